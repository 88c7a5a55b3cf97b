/* moe-train: train a Mixtral-style MoE model on genomic sequences, or
 * evaluate a checkpoint.
 *
 *   moe-train [--config NAME|PATH] [--backend auto|cpu|cuda] [key.path=value ...]
 *   moe-train eval --checkpoint DIR (--tokens FILE | --fasta FILE [--seq-length T]) [--backend ...]
 *   moe-train export --checkpoint DIR --out DIR [--dtype bf16|fp32] [--max-shard-size 5GB]
 *   moe-train query --config-facts|--plan-fit ...   (the SPANK plugin's questions, query.h)
 *
 * Options come from the tables below (cli.h): a new option is a row there
 * and a field in the options struct. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/exit_codes.h"
#include "../../common/version.h"
#include "../config/config.h"
#include "../config/config_scale.h"
#include "../train/trainer.h"
#include "cli.h"
#include "eval.h"
#include "export_cmd.h"
#include "plan_cli.h"
#include "query.h"

typedef struct {
    const char *config, *plan_gpu_mem;
    int backend; /* a moe_backend_choice, -1 when not given (runtime.backend) */
    int threads, stop_after_steps, quiet, print_config, help, version, plan, plan_gpus;
} train_opts;

#define OPT(name, kind, field, max, choices, metavar, help)                                         \
    CLI_OPT(name, kind, train_opts, field, max, choices, metavar, help)
static const cli_option train_options[] = {
    OPT("config", CLI_STRING, config, 0, NULL, "NAME|PATH",
        "a config name from the configs directory (e.g. L0_sanity)\nor a .cfg path "
        "(default: L0_sanity)"),
    OPT("backend", CLI_ENUM, backend, 0, config_backend_names, NULL,
        "auto (default: cuda if a GPU is visible), cpu or cuda"),
    OPT("threads", CLI_COUNT, threads, MOE_MAX_THREADS, NULL, "N", "CPU threads (runtime.threads)"),
    OPT("stop-after-steps", CLI_COUNT, stop_after_steps, 1000000000, NULL, "N",
        "train N steps in this run, checkpoint, exit 75"),
    OPT("quiet", CLI_FLAG, quiet, 0, NULL, NULL, "no progress lines"),
    OPT("print-config", CLI_FLAG, print_config, 0, NULL, NULL,
        "print the effective configuration and exit"),
    OPT("plan", CLI_FLAG, plan, 0, NULL, NULL,
        "print the per-rank memory plan and each step's traffic,\ncounted over the real "
        "allocation path, and exit"),
    OPT("plan-gpus", CLI_COUNT, plan_gpus, 1 << 20, NULL, "N",
        "plan for N GPUs (parallel.dp = N / parallel.ep)"),
    OPT("plan-gpu-mem", CLI_STRING, plan_gpu_mem, 0, NULL, "GIB",
        "say whether it fits GPUs of GIB GiB, and what would"),
    OPT("help", CLI_FLAG, help, 0, NULL, NULL, "this text (also -h)"),
    OPT("version", CLI_FLAG, version, 0, NULL, NULL, "the moekit version"),
};
#undef OPT
#define N_TRAIN_OPTIONS (sizeof train_options / sizeof train_options[0])

static void usage(FILE *f)
{
    fprintf(f, "Usage: moe-train [--config NAME|PATH] [options] [key.path=value ...]\n"
               "  or:  moe-train eval --checkpoint DIR (--tokens FILE | --fasta FILE\n"
               "                       [--seq-length T]) [--backend B]\n"
               "  or:  moe-train export --checkpoint DIR --out DIR [--dtype bf16|fp32]\n"
               "                       [--max-shard-size 5GB] [--staging-mb N]\n"
               "  or:  moe-train query --config-facts|--plan-fit --config PATH ...\n"
               "\n"
               "Train a Mixtral-style mixture-of-experts model on nucleotide sequences.\n"
               "\n"
               "Options:\n");
    cli_print_options(f, train_options, N_TRAIN_OPTIONS);
    fprintf(f, "  %-24s%s\n  %-24s%s\n", "key.path=value",
            "override any config key, e.g. train.steps=20", "",
            "checkpoint.ckpt_dir=/scratch/run1 logger.run_dir=runs/a");
    fprintf(f, "\neval options (moe-train eval --help):\n");
    eval_print_options(f);
    fprintf(f, "\nexport options (moe-train export --help):\n");
    export_print_options(f);
    fprintf(f, "\nquery options (moe-train query --help):\n");
    query_print_options(f);
    fprintf(f,
            "\n"
            "query answers the SPANK plugin's questions (the config's facts, the memory\n"
            "plan's fit) with one JSON object on stdout, so the plugin links no trainer code.\n"
            "\n"
            "eval prints one JSON object with the mean next-token cross-entropy (lm_loss)\n"
            "and the router aux loss (aux_loss) of a checkpoint on FILE, which holds one\n"
            "sequence of whitespace-separated token ids per line, all of one length;\n"
            "--fasta FILE is tokenized and cut into windows of T tokens (default 128) as\n"
            "training does.\n"
            "\n"
            "export writes a checkpoint (a step directory, or the newest in a checkpoint\n"
            "directory) as a Hugging Face model directory with its tokenizer.\n"
            "\n"
            "Signals: SIGTERM, SIGHUP, SIGUSR1 or Ctrl-C (SIGINT) finish the step, save a\n"
            "checkpoint and exit %d; a second SIGINT aborts at once without saving.\n"
            "\n"
            "Exit status: %d done, %d failure, %d usage (bad command line), %d stopped by a\n"
            "signal or --stop-after-steps after saving a checkpoint (requeue and resume).\n",
            MOE_EXIT_PREEMPTED, MOE_EXIT_OK, MOE_EXIT_FAILURE, MOE_EXIT_USAGE,
            MOE_EXIT_PREEMPTED);
}

static void on_stop_signal(int sig)
{
    /* A second Ctrl-C means "now": the default action, no checkpoint. */
    if (sig == SIGINT && moe_stop_requested) {
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        return;
    }
    moe_stop_requested = 1;
    if (sig == SIGINT) {
        static const char note[] = "\nmoe-train: interrupted: finishing the step and saving a "
                                   "checkpoint (Ctrl-C again aborts without saving)\n";
        ssize_t w = write(STDERR_FILENO, note, sizeof note - 1);
        (void)w;
    }
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    /* a closed terminal: save and stop, as on SIGTERM; under nohup (SIGHUP
     * ignored from the start) it stays ignored */
    struct sigaction hup;
    if (sigaction(SIGHUP, NULL, &hup) == 0 && hup.sa_handler != SIG_IGN)
        sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

static int cmd_train(int argc, char **argv)
{
    train_opts o = {.config = "L0_sanity", .backend = -1, .threads = -1};
    int first;
    int rc = cli_parse("moe-train", train_options, N_TRAIN_OPTIONS, &o, argc, argv, &first);
    if (rc)
        return rc;
    if (o.help) {
        usage(stdout);
        return MOE_EXIT_OK;
    }
    if (o.version) {
        printf("moe-train (moekit) %s\n", MOEKIT_VERSION);
        return MOE_EXIT_OK;
    }
    for (int i = first; i < argc; i++)
        if (!strchr(argv[i], '=')) {
            fprintf(stderr,
                    "moe-train: '%s' is neither an option nor a key.path=value override "
                    "(see moe-train --help)\n",
                    argv[i]);
            return MOE_EXIT_USAGE;
        }
    moe_config cfg;
    moe_err e = {{0}};
    if (config_load(&cfg, o.config, NULL, argc - first, argv + first, &e)) {
        fprintf(stderr, "moe-train: %s\n", e.msg);
        return MOE_EXIT_FAILURE;
    }
    if (o.threads >= 0)
        cfg.runtime.threads = o.threads;
    if (o.plan || o.plan_gpus || o.plan_gpu_mem) {
        double gib = 0;
        if (o.plan_gpu_mem && plan_gpu_mem_parse(o.plan_gpu_mem, &gib))
            return MOE_EXIT_USAGE;
        return plan_main(&cfg, o.plan_gpus, gib, o.backend);
    }
    if (o.print_config)
        return config_save(&cfg, "/dev/stdout", &e) ? (fprintf(stderr, "%s\n", e.msg), 1) : 0;
    install_signals();
    moe_trainer t;
    if (trainer_create(&t, &cfg, o.backend, o.quiet, &e)) {
        fprintf(stderr, "moe-train: %s\n", e.msg);
        return MOE_EXIT_FAILURE;
    }
    t.stop_after_steps = o.stop_after_steps;
    rc = trainer_run(&t, &e);
    if (rc < 0)
        fprintf(stderr, "moe-train: %s\n", e.msg);
    else if (rc == 0 && !o.quiet && t.rank == 0)
        printf("moe-train: done: %d steps, final loss %.4f, held-out loss %.4f\n", t.step,
               t.last_loss, t.last_val_loss);
    trainer_destroy(&t);
    return rc < 0 ? MOE_EXIT_FAILURE : rc == 1 ? MOE_EXIT_PREEMPTED : MOE_EXIT_OK;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "eval"))
        return eval_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "export"))
        return export_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "query"))
        return query_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "train"))
        return cmd_train(argc - 1, argv + 1);
    return cmd_train(argc, argv);
}
