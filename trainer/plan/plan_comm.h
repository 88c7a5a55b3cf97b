/* moekit: communicators of a planned layout that move nothing: the memory
 * plan makes the dispatcher and the optimizer over them, as rank 0 of
 * groups of the planned sizes. Every collective returns at once. */
#ifndef MOE_PLAN_COMM_H
#define MOE_PLAN_COMM_H

#include "../comm/comm.h"

int plan_comm_create(moe_comm **out, const char *name, int size, moe_err *e);

#endif
