/* moe-train: train a Mixtral-style MoE model on genomic sequences, or
 * evaluate a checkpoint.
 *
 *   moe-train [--config NAME|PATH] [--backend auto|cpu|cuda] [key.path=value ...]
 *   moe-train eval --checkpoint DIR --tokens FILE [--backend ...]
 *   moe-train export --checkpoint DIR --out DIR [--dtype bf16|fp32] [--max-shard-size 5GB]
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "eval.h"
#include "train/hf_export.h"
#include "train/trainer.h"

#include "../common/version.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moe-train [--config NAME|PATH] [options] [key.path=value ...]\n"
            "       moe-train eval --checkpoint DIR --tokens FILE [--backend B]\n"
            "       moe-train export --checkpoint DIR --out DIR [--dtype bf16|fp32]\n"
            "                        [--max-shard-size 5GB] [--staging-mb N]\n"
            "\n"
            "Train a Mixtral-style mixture-of-experts model on nucleotide sequences.\n"
            "\n"
            "  --config NAME|PATH   a config name from the configs directory (e.g. L0_sanity)\n"
            "                       or a .cfg path (default: L0_sanity)\n"
            "  --backend B          auto (default: cuda if a GPU is visible), cpu or cuda\n"
            "  --threads N          CPU threads (runtime.threads)\n"
            "  --quiet              no progress lines\n"
            "  --stop-after-steps N train N steps in this run, checkpoint, exit %d\n"
            "  --print-config       print the effective configuration and exit\n"
            "  --version, --help\n"
            "  key.path=value       override any config key, e.g. train.steps=20\n"
            "                       checkpoint.ckpt_dir=/scratch/run1 logger.run_dir=runs/a\n"
            "\n"
            "eval prints one JSON object with the mean next-token cross-entropy (lm_loss)\n"
            "and the router aux loss (aux_loss) of a checkpoint on FILE, which holds one\n"
            "sequence of whitespace-separated token ids per line, all of one length.\n"
            "export writes a checkpoint (a step directory, or the newest in a checkpoint\n"
            "directory) as a Hugging Face model directory with its tokenizer.\n"
            "\n"
            "Exit status: 0 done, 1 error, 2 usage, %d stopped by SIGTERM/SIGUSR1 after\n"
            "saving a checkpoint (requeue and resume).\n",
            MOE_EXIT_PREEMPTED, MOE_EXIT_PREEMPTED);
}

static void on_stop_signal(int sig)
{
    (void)sig;
    moe_stop_requested = 1;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

static int cmd_train(int argc, char **argv)
{
    const char *config = "L0_sanity", *backend = NULL;
    int quiet = 0, print_config = 0, threads = -1, stop_after = 0;
    char **over = calloc((size_t)argc + 1, sizeof *over);
    int n_over = 0;
    if (!over)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config") || !strcmp(a, "--backend") || !strcmp(a, "--threads") ||
            !strcmp(a, "--stop-after-steps")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "moe-train: %s needs a value\n", a);
                free(over);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--config"))
                config = v;
            else if (!strcmp(a, "--backend"))
                backend = v;
            else {
                char *end;
                long n = strtol(v, &end, 10);
                int is_threads = !strcmp(a, "--threads");
                if (!*v || *end || n < 0 || n > (is_threads ? 4096 : 1000000000)) {
                    fprintf(stderr, "moe-train: %s '%s' is not a %s\n", a, v,
                            is_threads ? "thread count" : "step count");
                    free(over);
                    return 2;
                }
                if (is_threads)
                    threads = (int)n;
                else
                    stop_after = (int)n;
            }
        } else if (!strncmp(a, "--config=", 9)) {
            config = a + 9;
        } else if (!strncmp(a, "--backend=", 10)) {
            backend = a + 10;
        } else if (!strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (!strcmp(a, "--print-config")) {
            print_config = 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "moe-train: unknown option '%s' (see moe-train --help)\n", a);
            free(over);
            return 2;
        } else if (strchr(a, '=')) {
            over[n_over++] = argv[i];
        } else {
            fprintf(stderr,
                    "moe-train: '%s' is neither an option nor a key.path=value override\n", a);
            free(over);
            return 2;
        }
    }
    moe_config cfg;
    moe_err e = {{0}};
    if (config_load(&cfg, config, NULL, n_over, over, &e)) {
        fprintf(stderr, "moe-train: %s\n", e.msg);
        free(over);
        return 1;
    }
    free(over);
    if (threads >= 0)
        cfg.runtime.threads = threads;
    if (print_config) {
        return config_save(&cfg, "/dev/stdout", &e) ? (fprintf(stderr, "%s\n", e.msg), 1) : 0;
    }
    install_signals();
    moe_trainer t;
    if (trainer_create(&t, &cfg, backend, quiet, &e)) {
        fprintf(stderr, "moe-train: %s\n", e.msg);
        return 1;
    }
    t.stop_after_steps = stop_after;
    int rc = trainer_run(&t, &e);
    if (rc < 0)
        fprintf(stderr, "moe-train: %s\n", e.msg);
    else if (rc == 0 && !quiet && t.rank == 0)
        printf("moe-train: done: %d steps, final loss %.4f, held-out loss %.4f\n", t.step,
               t.last_loss, t.last_val_loss);
    trainer_destroy(&t);
    return rc < 0 ? 1 : rc == 1 ? MOE_EXIT_PREEMPTED : 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--version")) {
            printf("moe-train (moekit) %s\n", MOEKIT_VERSION);
            return 0;
        }
    }
    if (argc > 1 && !strcmp(argv[1], "eval"))
        return eval_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "export"))
        return export_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "train"))
        return cmd_train(argc - 1, argv + 1);
    return cmd_train(argc, argv);
}
