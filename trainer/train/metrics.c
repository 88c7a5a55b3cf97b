/* moekit: metrics.jsonl and TensorBoard event files (see metrics.h). */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int mkdir_p(const char *path, moe_err *e)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return moe_errf(e, "path too long: %s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST)
            return moe_err_errno(e, errno, "cannot create directory %s", buf);
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST)
        return moe_err_errno(e, errno, "cannot create directory %s", buf);
    return 0;
}

int metrics_json_number(const char *line, const char *key, double *out)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p)
        return 0;
    char *end;
    *out = strtod(p + strlen(pat), &end);
    return end != p + strlen(pat);
}

/* keep only the lines of steps <= resume_step: a resumed run rewrites what
 * the interrupted one logged after its last checkpoint */
static int truncate_after(const char *path, long resume_step, moe_err *e)
{
    FILE *in = fopen(path, "r");
    if (!in)
        return errno == ENOENT ? 0 : moe_err_errno(e, errno, "cannot read %s", path);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        return moe_err_errno(e, errno, "cannot write %s", tmp);
    }
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, in) > 0) {
        double step;
        if (metrics_json_number(line, "step", &step) && step > resume_step)
            continue;
        fputs(line, out);
    }
    free(line);
    fclose(in);
    if (fclose(out) || rename(tmp, path))
        return moe_err_errno(e, errno, "cannot rewrite %s", path);
    return 0;
}

int metrics_open(moe_metrics *mx, const char *run_dir, long resume_step, int tensorboard,
                 moe_err *e)
{
    memset(mx, 0, sizeof *mx);
    if (!run_dir || !*run_dir)
        return 0;
    if (mkdir_p(run_dir, e))
        return moe_err_prefix(e, "logger.run_dir");
    snprintf(mx->dir, sizeof mx->dir, "%s", run_dir);
    snprintf(mx->path, sizeof mx->path, "%s/metrics.jsonl", run_dir);
    if (resume_step >= 0) {
        if (truncate_after(mx->path, resume_step, e))
            return -1;
    } else {
        unlink(mx->path); /* a fresh run starts a fresh file */
    }
    mx->f = fopen(mx->path, "a");
    if (!mx->f)
        return moe_err_errno(e, errno, "cannot open %s", mx->path);
    if (tensorboard && tb_open(&mx->tb, run_dir, e)) {
        metrics_close(mx);
        return moe_err_prefix(e, "logger.tensorboard");
    }
    return 0;
}

/* ",\"key\":value" with JSON's null for an unknown (NaN) value */
static void put_number(char *buf, size_t n, size_t *used, const char *key, const char *fmt,
                       double v)
{
    if (*used >= n)
        return;
    int w = snprintf(buf + *used, n - *used, ",\"%s\":", key);
    if (w > 0)
        *used += (size_t)w;
    if (*used >= n)
        return;
    w = isfinite(v) ? snprintf(buf + *used, n - *used, fmt, v)
                    : snprintf(buf + *used, n - *used, "null");
    if (w > 0)
        *used += (size_t)w;
}

static int write_line(moe_metrics *mx, const char *fields, moe_err *e)
{
    if (fprintf(mx->f, "{%s}\n", fields) < 0 || fflush(mx->f))
        return moe_err_errno(e, errno, "writing %s", mx->path);
    return 0;
}

int metrics_log_step(moe_metrics *mx, const moe_step_metrics *m, moe_err *e)
{
    if (!mx->f)
        return 0;
    char buf[1024];
    size_t used = (size_t)snprintf(buf, sizeof buf, "\"step\":%d", m->step);
    put_number(buf, sizeof buf, &used, "loss", "%.6f", m->loss);
    put_number(buf, sizeof buf, &used, "aux_loss", "%.6f", m->aux_loss);
    put_number(buf, sizeof buf, &used, "lr", "%.6e", m->lr);
    put_number(buf, sizeof buf, &used, "grad_norm", "%.6f", m->grad_norm);
    put_number(buf, sizeof buf, &used, "tokens", "%.0f", (double)m->tokens);
    put_number(buf, sizeof buf, &used, "time", "%.3f", m->wall_time);
    put_number(buf, sizeof buf, &used, "elapsed_s", "%.6f", m->elapsed_s); /* a tiny step is 0.5 ms */
    put_number(buf, sizeof buf, &used, "tokens_per_s", "%.1f", m->tokens_per_s);
    put_number(buf, sizeof buf, &used, "tflops", "%.4g", m->tflops);
    put_number(buf, sizeof buf, &used, "mfu", "%.4g", m->mfu);
    put_number(buf, sizeof buf, &used, "mem_bytes", "%.0f", m->mem_bytes);
    put_number(buf, sizeof buf, &used, "host_link_bytes", "%.0f", m->host_link_bytes);
    put_number(buf, sizeof buf, &used, "host_waits", "%.0f", m->host_waits);
    if (m->host_wait_by && used < sizeof buf) {
        int w = snprintf(buf + used, sizeof buf - used, ",\"host_wait_by\":%s", m->host_wait_by);
        if (w > 0 && (size_t)w < sizeof buf - used)
            used += (size_t)w;
        else
            buf[used] = 0; /* too long: left out whole, never cut */
    }
    if (write_line(mx, buf, e))
        return -1;
    /* TensorBoard: the same numbers, those that are known */
    static const char *const tags[] = {"train/loss",         "train/aux_loss", "train/lr",
                                       "train/grad_norm",    "perf/tokens_per_s",
                                       "perf/tflops",        "perf/mfu",
                                       "perf/mem_gib"};
    double vals[] = {m->loss,         m->aux_loss, m->lr,  m->grad_norm, m->tokens_per_s,
                     m->tflops,       m->mfu,      m->mem_bytes / (1024.0 * 1024.0 * 1024.0)};
    const char *known_tags[8];
    double known[8];
    int n = 0;
    for (int i = 0; i < 8; i++)
        if (isfinite(vals[i])) {
            known_tags[n] = tags[i];
            known[n++] = vals[i];
        }
    return tb_write_scalars(&mx->tb, m->step, m->wall_time, known_tags, known, n, e);
}

int metrics_log_eval(moe_metrics *mx, int step, double val_loss, uint64_t tokens,
                     double wall_time, double elapsed_s, moe_err *e)
{
    if (!mx->f)
        return 0;
    char buf[256];
    size_t used = (size_t)snprintf(buf, sizeof buf, "\"step\":%d", step);
    put_number(buf, sizeof buf, &used, "val_loss", "%.6f", val_loss);
    put_number(buf, sizeof buf, &used, "tokens", "%.0f", (double)tokens);
    put_number(buf, sizeof buf, &used, "time", "%.3f", wall_time);
    put_number(buf, sizeof buf, &used, "elapsed_s", "%.6f", elapsed_s);
    if (write_line(mx, buf, e))
        return -1;
    const char *tag = "val/loss";
    return isfinite(val_loss) ? tb_write_scalars(&mx->tb, step, wall_time, &tag, &val_loss, 1, e)
                              : 0;
}

void metrics_close(moe_metrics *mx)
{
    if (mx->f)
        fclose(mx->f);
    mx->f = NULL;
    tb_close(&mx->tb);
}

double metrics_flops_per_token(const moe_dims *d, int T)
{
    double C = d->C, attn = C * d->NH * d->HD * 2 + C * d->NKV * d->HD * 2; /* q, o; k, v */
    double per_layer = attn + C * d->E + (double)d->K * 3 * C * d->I;       /* router, experts */
    double weights = d->L * per_layer + (double)d->V * C;                   /* + LM head */
    return 6 * weights + 12.0 * d->L * T * d->NH * d->HD;
}
