#include "schedule.h"

#include <math.h>

double schedule_lr(double lr, int warmup, double min_ratio, int step, int total)
{
    if (warmup > 0 && step < warmup)
        return lr * (step + 1) / warmup;
    int span = total - warmup;
    if (span <= 1)
        return lr;
    double progress = (double)(step - warmup) / (span - 1);
    if (progress > 1)
        progress = 1;
    double floor = lr * min_ratio;
    return floor + (lr - floor) * 0.5 * (1 + cos(M_PI * progress));
}
