/* moekit: the learning-rate schedule: linear warmup from 0, then a cosine
 * decay to min_lr_ratio * lr at the last step. */
#ifndef MOE_SCHEDULE_H
#define MOE_SCHEDULE_H

/* lr for optimizer step `step` (0-based) of `total` steps */
double schedule_lr(double lr, int warmup, double min_ratio, int step, int total);

#endif
