/* moekit: metrics.jsonl and loss.png. */
#include "metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* the value of "key": in a JSON line, as a number */
static int field(const char *line, const char *key, double *out)
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
        if (field(line, "step", &step) && step > resume_step)
            continue;
        fputs(line, out);
    }
    free(line);
    fclose(in);
    if (fclose(out) || rename(tmp, path))
        return moe_err_errno(e, errno, "cannot rewrite %s", path);
    return 0;
}

int metrics_open(moe_metrics *mx, const char *run_dir, long resume_step, moe_err *e)
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
    return 0;
}

void metrics_write(moe_metrics *mx, const char *json_fields)
{
    if (!mx->f)
        return;
    fprintf(mx->f, "{%s}\n", json_fields);
    fflush(mx->f);
}

void metrics_close(moe_metrics *mx)
{
    if (mx->f)
        fclose(mx->f);
    mx->f = NULL;
}

int metrics_plot(const moe_metrics *mx, const char *title, moe_err *e)
{
    if (!mx->path[0])
        return 0;
    char train_dat[4300], val_dat[4300], script[4300], png[4300];
    snprintf(train_dat, sizeof train_dat, "%s/.loss_train.dat", mx->dir);
    snprintf(val_dat, sizeof val_dat, "%s/.loss_val.dat", mx->dir);
    snprintf(script, sizeof script, "%s/.loss.gp", mx->dir);
    snprintf(png, sizeof png, "%s/loss.png", mx->dir);
    FILE *in = fopen(mx->path, "r");
    if (!in)
        return moe_err_errno(e, errno, "cannot read %s", mx->path);
    FILE *ft = fopen(train_dat, "w"), *fv = fopen(val_dat, "w");
    if (!ft || !fv) {
        fclose(in);
        if (ft)
            fclose(ft);
        if (fv)
            fclose(fv);
        return moe_err_errno(e, errno, "cannot write plot data in %s", mx->dir);
    }
    char *line = NULL;
    size_t cap = 0;
    int n_val = 0;
    while (getline(&line, &cap, in) > 0) {
        double step, v;
        if (!field(line, "step", &step))
            continue;
        if (field(line, "loss", &v))
            fprintf(ft, "%.0f %.6g\n", step, v);
        if (field(line, "val_loss", &v)) {
            fprintf(fv, "%.0f %.6g\n", step, v);
            n_val++;
        }
    }
    free(line);
    fclose(in);
    fclose(ft);
    fclose(fv);
    FILE *gp = fopen(script, "w");
    if (!gp)
        return moe_err_errno(e, errno, "cannot write %s", script);
    fprintf(gp,
            "set terminal pngcairo size 900,540 noenhanced\n"
            "set output '%s'\nset title '%s'\nset xlabel 'step'\n"
            "set ylabel 'cross-entropy (nats/token)'\nset grid\nset key top right\n"
            "plot '%s' using 1:2 with lines lw 1.5 title 'train'%s%s%s\n",
            png, title, train_dat, n_val ? ", '" : "", n_val ? val_dat : "",
            n_val ? "' using 1:2 with linespoints lw 2 pt 7 title 'held-out'" : "");
    fclose(gp);
    pid_t pid = fork();
    if (pid < 0)
        return moe_err_errno(e, errno, "fork for gnuplot");
    if (pid == 0) {
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    unlink(train_dat);
    unlink(val_dat);
    unlink(script);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return moe_errf(e, "gnuplot %s (install gnuplot-nox for loss.png)",
                        WIFEXITED(status) && WEXITSTATUS(status) == 127 ? "was not found"
                                                                          : "failed");
    return 0;
}
