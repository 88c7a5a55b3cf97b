/* moekit: `moe-train --plan` (plan.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../plan/plan.h"
#include "plan_cli.h"

int plan_main(const moe_config *c, int gpus, double gpu_mem_gib, int backend)
{
    moe_err e = {{0}};
    int ep = c->parallel.ep, dp = c->parallel.dp > 0 ? c->parallel.dp : 1;
    if (gpus > 0) {
        if (gpus % ep) {
            fprintf(stderr, "moe-train: --plan-gpus %d is not a multiple of parallel.ep=%d\n",
                    gpus, ep);
            return 2;
        }
        dp = gpus / ep;
    }
    /* sized as the cpu backend lays buffers out, or (default) as a GPU */
    moe_backend *shape = NULL;
    if (backend == MOE_BACKEND_CPU && cpu_backend_create(&shape, 1, &e)) {
        fprintf(stderr, "moe-train: %s\n", e.msg);
        return 1;
    }
    moe_plan p;
    int rc = plan_make(&p, c, ep, dp, shape, &e);
    if (shape)
        shape->destroy(shape);
    if (rc) {
        fprintf(stderr, "moe-train: %s\n", e.msg);
        return 1;
    }
    double gpu_bytes = gpu_mem_gib * 1073741824.0;
    plan_print(stdout, &p, c, gpu_bytes);
    if (gpu_bytes > 0 && (double)p.need > gpu_bytes && !shape) {
        char msg[4096];
        plan_fit(c, ep, dp, gpu_bytes, 0, msg, sizeof msg, &e);
        printf("  %s\n", msg);
    }
    return 0;
}

int plan_gpu_mem_parse(const char *s, double *gib)
{
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || !(v > 0)) {
        fprintf(stderr, "moe-train: --plan-gpu-mem needs a memory size in GiB, not '%s'\n",
                s ? s : "");
        return -1;
    }
    *gib = v;
    return 0;
}
