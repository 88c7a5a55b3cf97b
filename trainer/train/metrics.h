/* moekit: what a run reports: the JSONL metrics file in the run directory
 * and the loss-curve PNG drawn from it at the end. */
#ifndef MOE_METRICS_H
#define MOE_METRICS_H

#include <stdio.h>

#include "../../common/err.h"

typedef struct {
    FILE *f;
    char dir[4096];
    char path[4200];
} moe_metrics;

/* Open <run_dir>/metrics.jsonl for appending (creating run_dir). A resumed
 * run first drops lines of steps after `resume_step`, so the file reads as
 * one straight run. run_dir "" disables everything. */
int metrics_open(moe_metrics *mx, const char *run_dir, long resume_step, moe_err *e);
/* one JSON object per line; `json_fields` is the inside of the object */
void metrics_write(moe_metrics *mx, const char *json_fields);
void metrics_close(moe_metrics *mx);

/* Draw <run_dir>/loss.png from metrics.jsonl with gnuplot (train loss per
 * step, held-out loss at each evaluation). Returns 0, or -1 with the reason
 * (e.g. gnuplot not installed), which callers report as a warning. */
int metrics_plot(const moe_metrics *mx, const char *title, moe_err *e);

#endif
