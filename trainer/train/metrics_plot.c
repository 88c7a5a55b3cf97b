/* moekit: loss.png from metrics.jsonl (see metrics.h).
 *
 * gnuplot runs a fixed script; the data, output and title paths and the
 * title come in as its arguments (gnuplot -c SCRIPT ARG1 ...), which gnuplot
 * keeps as string values and never parses as commands, so a run directory
 * or config name with quotes, semicolons or backquotes stays text. Data
 * paths are given as absolute or "./"-prefixed paths: gnuplot reads a file
 * name that starts with '<' as a shell command. */
#include "metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char plot_script[] =
    "# moekit loss.png. ARG1 step data, ARG2 output, ARG3 title, ARG4 \"1\" when\n"
    "# ARG5 holds held-out losses. Arguments are values, never script text.\n"
    "set terminal pngcairo size 1200,1000 noenhanced\n"
    "set output ARG2\n"
    "set datafile missing '?'\n"
    "set grid\n"
    "set key top right\n"
    "set xlabel 'step'\n"
    "set multiplot layout 3,2 title ARG3\n"
    "set title 'loss (nats/token)'\n"
    "if (ARG4 eq '1') {\n"
    "  plot ARG1 using 1:2 with lines lw 1.5 title 'train', \\\n"
    "       ARG5 using 1:2 with linespoints lw 2 pt 7 title 'held-out'\n"
    "} else {\n"
    "  plot ARG1 using 1:2 with lines lw 1.5 title 'train'\n"
    "}\n"
    "set title 'learning rate'\n"
    "plot ARG1 using 1:3 with lines lw 1.5 notitle\n"
    "set title 'gradient norm'\n"
    "plot ARG1 using 1:4 with lines lw 1.5 notitle\n"
    "set title 'aux loss'\n"
    "plot ARG1 using 1:5 with lines lw 1.5 notitle\n"
    "set title 'tokens/s'\n"
    "plot ARG1 using 1:6 with lines lw 1.5 notitle\n"
    "unset multiplot\n";

/* dir/name, written so gnuplot reads it as a file: "./" before a relative path */
static void path_in(char *out, size_t n, const char *dir, const char *name)
{
    snprintf(out, n, "%s%s/%s", dir[0] == '/' ? "" : "./", dir, name);
}

static void put_value(FILE *f, const char *line, const char *key)
{
    double v;
    if (metrics_json_number(line, key, &v))
        fprintf(f, " %.6g", v);
    else
        fputs(" ?", f);
}

/* the step columns (step loss lr grad_norm aux tokens/s) and the held-out
 * points; returns the number of held-out points, or -1 */
static int write_plot_data(const moe_metrics *mx, const char *steps_dat, const char *val_dat,
                           moe_err *e)
{
    FILE *in = fopen(mx->path, "r");
    if (!in)
        return moe_err_errno(e, errno, "cannot read %s", mx->path);
    FILE *fs = fopen(steps_dat, "w"), *fv = fopen(val_dat, "w");
    if (!fs || !fv) {
        fclose(in);
        if (fs)
            fclose(fs);
        if (fv)
            fclose(fv);
        return moe_err_errno(e, errno, "cannot write plot data in %s", mx->dir);
    }
    char *line = NULL;
    size_t cap = 0;
    int n_val = 0;
    while (getline(&line, &cap, in) > 0) {
        double step, v;
        if (!metrics_json_number(line, "step", &step))
            continue;
        if (metrics_json_number(line, "val_loss", &v)) {
            fprintf(fv, "%.0f %.6g\n", step, v);
            n_val++;
            continue;
        }
        fprintf(fs, "%.0f", step);
        put_value(fs, line, "loss");
        put_value(fs, line, "lr");
        put_value(fs, line, "grad_norm");
        put_value(fs, line, "aux_loss");
        put_value(fs, line, "tokens_per_s");
        fputc('\n', fs);
    }
    free(line);
    fclose(in);
    int bad = fclose(fs) | fclose(fv);
    if (bad)
        return moe_err_errno(e, errno, "cannot write plot data in %s", mx->dir);
    return n_val;
}

static int run_gnuplot(const char *script, char *const args[5], moe_err *e)
{
    pid_t pid = fork();
    if (pid < 0)
        return moe_err_errno(e, errno, "fork for gnuplot");
    if (pid == 0) {
        execlp("gnuplot", "gnuplot", "-c", script, args[0], args[1], args[2], args[3],
               args[4], (char *)NULL);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return moe_errf(e, "gnuplot %s (install gnuplot-nox for loss.png)",
                        WIFEXITED(status) && WEXITSTATUS(status) == 127 ? "was not found"
                                                                          : "failed");
    return 0;
}

int metrics_plot(const moe_metrics *mx, const char *title, moe_err *e)
{
    if (!mx->path[0])
        return 0;
    char steps_dat[4400], val_dat[4400], script[4400], tmp_png[4400], png[4400];
    path_in(steps_dat, sizeof steps_dat, mx->dir, ".loss_steps.dat");
    path_in(val_dat, sizeof val_dat, mx->dir, ".loss_val.dat");
    path_in(script, sizeof script, mx->dir, ".loss.gp");
    path_in(tmp_png, sizeof tmp_png, mx->dir, ".loss.png.tmp");
    path_in(png, sizeof png, mx->dir, "loss.png");
    int n_val = write_plot_data(mx, steps_dat, val_dat, e);
    int rc = n_val < 0 ? -1 : 0;
    FILE *gp = rc ? NULL : fopen(script, "w");
    if (!rc && !gp)
        rc = moe_err_errno(e, errno, "cannot write %s", script);
    if (gp && (fputs(plot_script, gp) < 0) + (fclose(gp) != 0))
        rc = moe_err_errno(e, errno, "cannot write %s", script);
    if (!rc) {
        char *args[] = {steps_dat, tmp_png, (char *)title, n_val > 0 ? "1" : "0", val_dat};
        rc = run_gnuplot(script, args, e);
    }
    /* replaced whole, so a reader never sees half a picture */
    if (!rc && rename(tmp_png, png))
        rc = moe_err_errno(e, errno, "cannot rename %s to %s", tmp_png, png);
    unlink(steps_dat);
    unlink(val_dat);
    unlink(script);
    unlink(tmp_png);
    return rc;
}
