#include "select.h"

#include <stdio.h>
#include <string.h>

#ifndef MOE_WITH_CUDA
/* This build has no CUDA backend (built with CUDA=0 or without nvcc). */
int cuda_backend_available(void) { return 0; }
int cuda_device_count(void) { return 0; }
int cuda_backend_create(moe_backend **out, int device, moe_err *e)
{
    return moe_errf(e, "this moe-train was built without the CUDA backend (rebuild with nvcc "
                       "present, or use --backend cpu)");
}
#endif

/* this rank's GPU among the visible ones */
static int rank_device(int local_rank)
{
    int n = cuda_device_count();
    return n > 1 && local_rank > 0 ? local_rank % n : 0;
}

int backend_open(moe_backend_choice want, int threads, int local_rank, moe_backend **out, char *why,
                 size_t why_len, moe_err *e)
{
    switch (want) {
    case MOE_BACKEND_CPU:
        snprintf(why, why_len, "cpu (requested)");
        return cpu_backend_create(out, threads, e);
    case MOE_BACKEND_CUDA:
        snprintf(why, why_len, "cuda (requested)");
        return cuda_backend_create(out, rank_device(local_rank), e);
    case MOE_BACKEND_AUTO:
        break;
    default:
        return moe_errf(e, "unknown backend %d (allowed: auto, cpu, cuda)", (int)want);
    }
    if (cuda_backend_available()) {
        snprintf(why, why_len, "cuda (a GPU is visible)");
        return cuda_backend_create(out, rank_device(local_rank), e);
    }
#ifdef MOE_WITH_CUDA
    snprintf(why, why_len, "cpu (no usable GPU is visible)");
#else
    snprintf(why, why_len, "cpu (this build has no CUDA backend)");
#endif
    return cpu_backend_create(out, threads, e);
}
