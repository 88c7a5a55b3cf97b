/* moekit: moe-topo's output, a table for people and JSON for programs. */
#ifndef MOE_TOPO_REPORT_H
#define MOE_TOPO_REPORT_H

#include <stdio.h>

#include "../launch/verdict.h"
#include "topo.h"

/* Node summary line(s), then one row per GPU. */
void report_table(FILE *f, const moe_topo *t);

/* A JSON string literal with the escapes JSON requires. */
void report_json_string(FILE *f, const char *s);

/* The members "node": {...}, "gpus": [...] (no enclosing braces). */
void report_json_topology(FILE *f, const moe_topo *t);

/* The member "verdict": {...}. */
void report_json_verdict(FILE *f, const moe_verdict *v);

#endif
