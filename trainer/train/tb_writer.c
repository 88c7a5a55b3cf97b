/* moekit: TensorBoard event files (see tb_writer.h). The protobuf encoding
 * is protobuf-c's; CRC-32C is written here because Debian packages no C
 * library for it (zlib's crc32 is the other polynomial). */
#include "tb_writer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tb_event.pb-c.h"

/* reflected Castagnoli polynomial 0x1EDC6F41 */
#define CRC32C_POLY 0x82F63B78u

uint32_t tb_crc32c(const void *data, size_t n)
{
    static uint32_t table[256];
    static int ready;
    if (!ready) { /* 1 KiB, filled once; a data race would write the same values */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const unsigned char *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

uint32_t tb_masked_crc32c(const void *data, size_t n)
{
    uint32_t crc = tb_crc32c(data, n);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

static void put_le(unsigned char *out, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        out[i] = (unsigned char)(v >> (8 * i));
}

/* one TFRecord: length, its CRC, the data, its CRC */
static int write_record(tb_writer *w, const uint8_t *data, size_t n, moe_err *e)
{
    unsigned char head[12], tail[4];
    put_le(head, n, 8);
    put_le(head + 8, tb_masked_crc32c(head, 8), 4);
    put_le(tail, tb_masked_crc32c(data, n), 4);
    if (fwrite(head, 1, sizeof head, w->f) != sizeof head || fwrite(data, 1, n, w->f) != n ||
        fwrite(tail, 1, sizeof tail, w->f) != sizeof tail || fflush(w->f))
        return moe_err_errno(e, errno, "writing %s", w->path);
    return 0;
}

static int write_event(tb_writer *w, const Moekit__Tb__Event *ev, moe_err *e)
{
    size_t n = moekit__tb__event__get_packed_size(ev);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return moe_errf(e, "out of memory encoding a TensorBoard event");
    moekit__tb__event__pack(ev, buf);
    int rc = write_record(w, buf, n, e);
    free(buf);
    return rc;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int tb_open(tb_writer *w, const char *run_dir, moe_err *e)
{
    memset(w, 0, sizeof *w);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    double now = wall_now();
    snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d", run_dir,
             (long long)now, host, (int)getpid());
    w->f = fopen(w->path, "wb");
    if (!w->f)
        return moe_err_errno(e, errno, "cannot create the TensorBoard event file %s", w->path);
    Moekit__Tb__Event ev = MOEKIT__TB__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = now;
    ev.file_version = (char *)"brain.Event:2";
    if (write_event(w, &ev, e)) {
        tb_close(w);
        return -1;
    }
    return 0;
}

int tb_write_scalars(tb_writer *w, int64_t step, double wall_time, const char *const *tags,
                     const double *values, int n, moe_err *e)
{
    if (!w->f)
        return 0;
    enum { MAX_SCALARS = 32 };
    if (n > MAX_SCALARS)
        return moe_errf(e, "%d TensorBoard scalars in one event: at most %d", n, MAX_SCALARS);
    Moekit__Tb__SummaryValue vals[MAX_SCALARS], *ptrs[MAX_SCALARS];
    for (int i = 0; i < n; i++) {
        moekit__tb__summary_value__init(&vals[i]);
        vals[i].tag = (char *)tags[i];
        vals[i].has_simple_value = 1;
        vals[i].simple_value = (float)values[i];
        ptrs[i] = &vals[i];
    }
    Moekit__Tb__Summary summary = MOEKIT__TB__SUMMARY__INIT;
    summary.n_value = (size_t)n;
    summary.value = ptrs;
    Moekit__Tb__Event ev = MOEKIT__TB__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = wall_time;
    ev.has_step = 1;
    ev.step = step;
    ev.summary = &summary;
    return write_event(w, &ev, e);
}

void tb_close(tb_writer *w)
{
    if (w->f)
        fclose(w->f);
    w->f = NULL;
}
