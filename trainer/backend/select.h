/* moekit: choosing the backend at run time: cuda when this build has it and
 * a GPU is visible, else cpu; `--backend` (runtime.backend) forces one. */
#ifndef MOE_BACKEND_SELECT_H
#define MOE_BACKEND_SELECT_H

#include "backend.h"

/* name: "auto", "cpu" or "cuda". why receives one line on the choice. */
int backend_open(const char *name, int threads, moe_backend **out, char *why, size_t why_len,
                 moe_err *e);

#endif
