/* moe-topo: what moekit sees on a node, and what it would decide there.
 *
 *   moe-topo                          table of the node and its GPUs
 *   moe-topo --json                   the same as JSON
 *   moe-topo --xml node.xml           a saved `lstopo --of xml` export instead
 *   moe-topo --check --ep 8 [--dp 1] [--precision auto] [--experts 8]
 *            [--policy "on_non_blackwell=reject"] [--gpus 0-7] [--ntasks 8]
 *            [--config L1_8x7B_ep]    the SPANK plugin's verdict paragraph, and
 *                                     with a config its memory plan against the GPUs
 *
 * Exit status (common/exit_codes.h, as every moekit tool): 0 shown, or
 * --check would run; 1 failure (unreadable topology or environment); 2 usage
 * (bad command line); 3 --check would refuse the step. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/exit_codes.h"
#include "../common/precision.h"
#include "../common/version.h"
#include "../launch/policy.h"
#include "../launch/verdict.h"
#include "../trainer/plan/plan.h"
#include "report.h"
#include "step.h"
#include "topo.h"

enum { EXIT_RUN = MOE_EXIT_OK, EXIT_FAILURE_ = MOE_EXIT_FAILURE, EXIT_USAGE = MOE_EXIT_USAGE,
       EXIT_REFUSE = MOE_EXIT_REFUSED };

typedef struct {
    const char *xml;
    int json, check, no_nvml;
    moe_request req;
    int experts, ntasks, nodes;
    const char *policy;
    const char *gpus;
    const char *config;   /* --config: plan the run's memory against the GPUs */
    int check_flags_seen; /* options that only --check uses */
} cli;

static void usage(FILE *f)
{
    fputs("Usage: moe-topo [--xml FILE] [--json] [--no-nvml]\n"
          "  or:  moe-topo --check [--ep N] [--dp M] [--precision P] [--experts E] "
          "[--policy WORDS] [--gpus LIST] [--ntasks N] [--nodes N] [--config C] [--xml FILE] "
          "[--json]\n"
          "\n"
          "Shows the node as moekit sees it: sockets, cores, NUMA nodes and every NVIDIA GPU\n"
          "(PCI bus id, model, SM, memory, NUMA node, local CPUs, NVLink peers, and where each\n"
          "fact came from: nvml, xml-info, pci-id table or unknown).\n"
          "\n"
          "  --xml FILE      read a saved `lstopo --of xml` export (HWLOC_XMLFILE works too)\n"
          "  --json          JSON instead of the table\n"
          "  --no-nvml       do not ask NVML, even on a live node\n"
          "  --check         print the verdict the moekit SPANK plugin would reach for a step\n"
          "                  and exit 0 if it would run, 3 if it would refuse\n"
          "  --ep N, --dp M  expert and data parallel sizes (--moe-ep, --moe-dp); EP defaults\n"
          "                  to 1 and DP to GPUs / EP\n"
          "  --precision P   --moe-precision: " MOE_PRECISION_JOB_NAMES " (default auto)\n"
          "  --experts E     experts in the model (0 or absent: not checked)\n"
          "  --policy WORDS  the plugin's plugstack.conf arguments, e.g.\n"
          "                  \"on_non_blackwell=reject allow_cpu=yes\"; topology_xml= is read\n"
          "                  when --xml is not given\n"
          "  --gpus LIST     the step's GPUs as Slurm numbers them (\"0,1\", \"0-3\"); default:\n"
          "                  SLURM_STEP_GPUS, SLURM_JOB_GPUS or CUDA_VISIBLE_DEVICES, else all\n"
          "  --ntasks N      tasks in the step (default SLURM_STEP_NUM_TASKS / SLURM_NTASKS)\n"
          "  --nodes N       nodes in the step, each like this one (default SLURM_STEP_NUM_NODES\n"
          "                  / SLURM_NNODES, else 1)\n"
          "  --config C      a moe-train config (name or path): its memory plan per GPU at the\n"
          "                  verdict's EP x DP against the smallest GPU of the step; a run that\n"
          "                  does not fit is refused (policy refuse_memory_short=yes) or warned\n"
          "                  about, with what would fit\n"
          "  --version       the moekit version\n"
          "  --help, -h      this text\n"
          "\n"
          "GPU numbers follow PCI bus order, which is CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID.\n"
          "Without --policy, trainer=, configs= and data= are those installed beside moe-topo.\n"
          "\n"
          "Exit status: 0 shown (or --check: the step would run), 1 failure (unreadable\n"
          "topology or environment), 2 usage (bad command line), 3 --check: the plugin\n"
          "would refuse the step.\n",
          f);
}

static int positive(const char *opt, const char *arg, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (end == arg || *end || errno || v <= 0 || v > INT_MAX) {
        fprintf(stderr, "moe-topo: %s \"%s\": expected a positive integer\n", opt, arg);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, cli *c)
{
    enum { O_XML = 256, O_JSON, O_CHECK, O_EP, O_DP, O_PREC, O_EXPERTS, O_POLICY, O_GPUS,
           O_NTASKS, O_NODES, O_NO_NVML, O_HELP, O_CONFIG, O_VERSION };
    static const struct option opts[] = {
        {"xml", required_argument, 0, O_XML},       {"json", no_argument, 0, O_JSON},
        {"check", no_argument, 0, O_CHECK},         {"ep", required_argument, 0, O_EP},
        {"dp", required_argument, 0, O_DP},         {"precision", required_argument, 0, O_PREC},
        {"experts", required_argument, 0, O_EXPERTS},
        {"policy", required_argument, 0, O_POLICY}, {"gpus", required_argument, 0, O_GPUS},
        {"ntasks", required_argument, 0, O_NTASKS}, {"nodes", required_argument, 0, O_NODES},
        {"no-nvml", no_argument, 0, O_NO_NVML},     {"help", no_argument, 0, O_HELP},
        {"config", required_argument, 0, O_CONFIG},
        {"version", no_argument, 0, O_VERSION},
        {0, 0, 0, 0},
    };
    memset(c, 0, sizeof *c);
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int check_only_opt = 1;
        switch (o) {
        case O_XML: c->xml = optarg, check_only_opt = 0; break;
        case O_JSON: c->json = 1, check_only_opt = 0; break;
        case O_NO_NVML: c->no_nvml = 1, check_only_opt = 0; break;
        case O_CHECK: c->check = 1, check_only_opt = 0; break;
        case O_EP: if (positive("--ep", optarg, &c->req.ep)) return -1; break;
        case O_DP: if (positive("--dp", optarg, &c->req.dp)) return -1; break;
        case O_EXPERTS: if (positive("--experts", optarg, &c->experts)) return -1; break;
        case O_NTASKS: if (positive("--ntasks", optarg, &c->ntasks)) return -1; break;
        case O_NODES: if (positive("--nodes", optarg, &c->nodes)) return -1; break;
        case O_PREC:
            if (verdict_parse_precision(optarg, &c->req.precision)) {
                char names[96];
                fprintf(stderr, "moe-topo: --precision \"%s\": expected %s\n", optarg,
                        precision_name_list(names, sizeof names, ", ", " or ", 1));
                return -1;
            }
            break;
        case O_POLICY: c->policy = optarg; break;
        case O_GPUS: c->gpus = optarg; break;
        case O_CONFIG: c->config = optarg; break;
        case O_HELP:
        case 'h': usage(stdout); exit(EXIT_RUN);
        case O_VERSION: printf("moe-topo (moekit) %s\n", MOEKIT_VERSION); exit(EXIT_RUN);
        default:
            if (optopt) /* a known option without its value */
                fprintf(stderr, "moe-topo: option %s needs a value (see --help)\n",
                        argv[optind - 1]);
            else
                fprintf(stderr, "moe-topo: unknown option %s (see --help)\n", argv[optind - 1]);
            return -1;
        }
        c->check_flags_seen |= check_only_opt;
    }
    if (optind < argc) {
        fprintf(stderr, "moe-topo: unexpected argument \"%s\" (see --help)\n", argv[optind]);
        return -1;
    }
    if (c->check_flags_seen && !c->check) {
        fputs("moe-topo: --ep, --dp, --precision, --experts, --policy, --gpus, --ntasks, "
              "--nodes and --config only apply with --check\n", stderr);
        return -1;
    }
    c->req.active = 1;
    return 0;
}

/* The step as the plugin would see it, with the command line's overrides. */
static int build_step(const cli *c, const moe_topo *t, moe_step *step, int *idx, int *n,
                      const char **from, moe_err *e)
{
    if (topo_fill_step(t, NULL, step, e))
        return -1;
    if (c->gpus) {
        if (topo_gpus_from_list(t, "--gpus", c->gpus, idx, n, e))
            return -1;
        *from = "--gpus";
        topo_step_from_indices(t, idx, *n, step);
    } else if (topo_step_gpus(t, topo_env_get(NULL, "SLURM_STEP_GPUS"),
                              topo_env_get(NULL, "SLURM_JOB_GPUS"),
                              topo_env_get(NULL, "CUDA_VISIBLE_DEVICES"), idx, n, from, e)) {
        return -1;
    }
    if (c->ntasks)
        step->ntasks = c->ntasks;
    if (c->nodes)
        step->nnodes = c->nodes;
    step->num_experts = c->experts;
    return 0;
}

/* The config's memory plan at the verdict's EP x DP against the smallest of
 * the step's GPUs (plan_fit): EXIT_REFUSE when it does not fit and the
 * policy refuses, else EXIT_RUN (a warning said). */
static int check_memory(const cli *c, const moe_topo *t, const int *idx, int n,
                        const moe_policy *pol, const moe_verdict *v)
{
    int gpu, is_free;
    unsigned long long mem = topo_step_room(t, idx, n, &gpu, &is_free);
    moe_err e = {{0}};
    char msg[4096], what[64];
    if (!mem) {
        printf("memory: the GPUs' memory is unknown here; no memory plan checked\n");
        return EXIT_RUN;
    }
    /* on the node: what the driver has free; elsewhere: the card's figures */
    if (is_free)
        snprintf(what, sizeof what, "GPU %d has free", gpu);
    else
        snprintf(what, sizeof what, "a GPU has (the card's total)");
    plan_room room = {(double)mem, what, 0};
    int fit = plan_fit_config(c->config, pol->configs, NULL, 0, precision_name(v->precision), v->ep, v->dp,
                              &room, pol->refuse_memory_short, msg, sizeof msg, &e);
    if (e.msg[0]) {
        fprintf(stderr, "moe-topo: --config: %s\n", e.msg);
        return EXIT_USAGE;
    }
    if (fit == PLAN_FITS)
        printf("memory: %s fits the %.0f GiB %s at EP=%d x DP=%d (moe-train --plan shows the "
               "plan)\n", c->config, mem / 1073741824.0,
               is_free ? "free on each GPU" : "GPUs (the card's total)", v->ep, v->dp);
    else
        printf("memory: %s: %s\n", fit == PLAN_REFUSE ? "refused" : "warning", msg);
    return fit == PLAN_REFUSE ? EXIT_REFUSE : EXIT_RUN;
}

static int run_check(const cli *c, const moe_topo *t, const moe_policy *pol)
{
    moe_step *step = calloc(1, sizeof *step);
    moe_verdict *v = calloc(1, sizeof *v);
    int idx[TOPO_MAX_GPUS], n = 0, rc = EXIT_FAILURE_;
    const char *from = "";
    moe_err e = {{0}};
    if (!step || !v) {
        fputs("moe-topo: out of memory\n", stderr);
        goto out;
    }
    if (build_step(c, t, step, idx, &n, &from, &e)) {
        fprintf(stderr, "moe-topo: %s\n", e.msg);
        goto out;
    }
    verdict_decide(pol, &c->req, step, v);
    rc = v->kind == MOE_VERDICT_RUN ? EXIT_RUN : EXIT_REFUSE;
    if (!c->json) {
        printf("%s\n", v->paragraph);
        if (c->config && rc == EXIT_RUN)
            rc = check_memory(c, t, idx, n, pol, v);
        goto out;
    }
    char words[3 * 4096 + 512];
    policy_format(pol, words, sizeof words);
    fputs("{", stdout);
    report_json_topology(stdout, t);
    printf(",\n\"step\": {\"gpus\": [");
    for (int k = 0; k < n; k++)
        printf("%s%d", k ? ", " : "", idx[k]);
    printf("], \"from\": ");
    report_json_string(stdout, from);
    printf(", \"ntasks\": %d, \"nnodes\": %d, \"num_experts\": %d},\n\"policy\": ",
           step->ntasks, step->nnodes, step->num_experts);
    report_json_string(stdout, words);
    fputs(",\n", stdout);
    report_json_verdict(stdout, v);
    fputs("}\n", stdout);
out:
    free(step);
    free(v);
    return rc;
}

int main(int argc, char **argv)
{
    cli c;
    if (parse_args(argc, argv, &c))
        return EXIT_USAGE;
    moe_policy pol;
    moe_err e = {{0}};
    if (policy_parse_string(&pol, c.policy, &e)) {
        fprintf(stderr, "moe-topo: --policy: %s\n", e.msg);
        return EXIT_USAGE;
    }
    const char *xml = c.xml ? c.xml : (pol.topology_xml[0] ? pol.topology_xml : NULL);
    moe_topo *t = malloc(sizeof *t);
    if (!t) {
        fputs("moe-topo: out of memory\n", stderr);
        return EXIT_FAILURE_;
    }
    int rc = EXIT_RUN;
    if (topo_load(t, xml, c.no_nvml ? TOPO_NO_NVML : 0, &e)) {
        fprintf(stderr, "moe-topo: %s\n", e.msg);
        rc = EXIT_FAILURE_;
    } else if (c.check) {
        rc = run_check(&c, t, &pol);
    } else if (c.json) {
        fputs("{", stdout);
        report_json_topology(stdout, t);
        fputs("}\n", stdout);
    } else {
        report_table(stdout, t);
    }
    free(t);
    if (fflush(stdout) != 0 && rc == EXIT_RUN)
        rc = EXIT_FAILURE_;
    return rc;
}
