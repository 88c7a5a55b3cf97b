/* moekit: choosing the backend at run time: cuda when this build has it and
 * a GPU is visible, else cpu; `--backend` (runtime.backend) forces one. */
#ifndef MOE_BACKEND_SELECT_H
#define MOE_BACKEND_SELECT_H

#include "backend.h"

/* want: runtime.backend's choice. why receives one line on the choice.
 * local_rank: this rank's index on its node; with several GPUs visible it
 * takes GPU local_rank mod their count (a launcher that gives each task one
 * GPU through CUDA_VISIBLE_DEVICES, as the SPANK plugin's bind=yes does,
 * leaves one: GPU 0). */
int backend_open(moe_backend_choice want, int threads, int local_rank, moe_backend **out, char *why,
                 size_t why_len, moe_err *e);

#endif
