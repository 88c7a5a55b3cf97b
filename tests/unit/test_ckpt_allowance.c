/* The checkpoint I/O allowance (trainer/train/ckpt_allowance.h): its
 * arithmetic, its key's default, and that a collective given it is watched
 * for that long and no longer (a rank dying during a save ends the job). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../trainer/config/config.h"
#include "../../trainer/comm/comm.h"
#include "../../trainer/comm/watchdog.h"
#include "../../trainer/train/ckpt_allowance.h"
#include "../check.h"
#include "../slow_world.h"

static void test_arithmetic(void)
{
    /* nothing to move: the timeout again */
    CHECK(ckpt_allowance_s(0, 50, 300) == 300);
    /* MB are 10^6 bytes: 50 MB at 50 MB/s is one second */
    CHECK_NEAR(ckpt_allowance_s(50000000, 50, 300), 301, 1e-9);
    CHECK_NEAR(ckpt_allowance_s(1u << 30, 50, 3), 1073741824 / 50e6 + 3, 1e-9);
    /* an L1_8x7B_ep rank's share (6.98B parameters x 12 B) at the default floor */
    CHECK_NEAR(ckpt_allowance_s(83760000000ull, 50, 300), 1675.2 + 300, 1e-6);
    CHECK_NEAR(ckpt_allowance_s(1000000, 0.5, 0), 2, 1e-12);
    /* more bytes or a lower floor never allow less */
    CHECK(ckpt_allowance_s(1000001, 50, 300) > ckpt_allowance_s(1000000, 50, 300));
    CHECK(ckpt_allowance_s(1000000, 10, 300) > ckpt_allowance_s(1000000, 50, 300));
    /* the largest count stays finite */
    CHECK(isfinite(ckpt_allowance_s(UINT64_MAX, 50, 300)));
    /* a floor the config would refuse: never a division by zero */
    CHECK(isinf(ckpt_allowance_s(1000, 0, 300)));
    CHECK(isinf(ckpt_allowance_s(1000, -1, 300)));
    CHECK(isinf(ckpt_allowance_s(1000, NAN, 300)));
}

static void test_default(void)
{
    moe_config c;
    config_defaults(&c);
    CHECK(c.checkpoint.min_write_mb_per_s == 50);
}

/* ---- ckpt_allow over a two-rank stand-in whose barrier takes `slow_world_ticks` x 50 ms ---- */


static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_watched_for_the_allowance(void)
{
    moe_comm *base;
    moe_err e = {{0}};
    CHECK(comm_single_create(&base, &e) == 0);
    moe_comm_ops ops;
    moe_comm two;
    int ranks[2];
    slow_world_make(&two, &ops, ranks, base, "world");
    moe_config c;
    config_defaults(&c);
    c.parallel.timeout_s = 0.2;
    c.checkpoint.min_write_mb_per_s = 1;
    CHECK(watchdog_start(c.parallel.timeout_s, &two, &e) == 0);

    /* 600 kB at 1 MB/s: 0.6 + 0.2 s beyond the 0.2 s timeout; a 0.7 s wait passes */
    slow_world_ticks = 14;
    ckpt_allow(&c, 600000);
    CHECK(comm_barrier(&two, &e) == 0 && slow_world_aborted == -1);
    /* the same wait with nothing to write: the timeout twice, and it aborts */
    ckpt_allow(&c, 0);
    CHECK(comm_barrier(&two, &e) == -1 && slow_world_aborted == 1);
    CHECK_MSG(strstr(e.msg, "aborted"), "%s", e.msg);

    /* a peer that never comes: aborted once the allowance is spent (about 1 s), not never */
    slow_world_aborted = -1;
    slow_world_ticks = 100;
    ckpt_allow(&c, 600000);
    double t0 = now_s();
    CHECK(comm_barrier(&two, &e) == -1 && slow_world_aborted == 1);
    double waited = now_s() - t0;
    CHECK_MSG(waited > 0.95 && waited < 2.0, "aborted after %.2f s, expected about 1.0 s", waited);
    watchdog_stop();
    comm_destroy(base);
}

int main(void)
{
    RUN(test_arithmetic);
    RUN(test_default);
    RUN(test_watched_for_the_allowance);
    return check_summary("test_ckpt_allowance");
}
