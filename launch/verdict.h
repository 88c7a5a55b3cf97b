/* moekit: the launch verdict, as the SPANK plugin and `moe-topo --check`
 * both reach it (launch/ sits below plugin/ and topo/; both include this). Plain functions with no Slurm in them, unit-tested on the
 * fixture topologies.
 *
 * Inputs: the admin policy (plugstack.conf arguments), the user's request
 * (--moe-* options), and the GPUs this step was given (from topo/).
 * Output: a precision, DP and EP, or a refusal, with one readable paragraph
 * saying what was found and why. */
#ifndef MOE_VERDICT_H
#define MOE_VERDICT_H

#include "../common/err.h"
#include "../common/precision.h"

#define MOE_VERDICT_MAX_GPUS 64
/* Most GPUs in one step (nodes x GPUs per node); more would overflow the arithmetic. */
#define MOE_VERDICT_MAX_WORLD (1 << 20)

/* What the admin set in plugstack.conf; the policy always wins. */
typedef enum { MOE_NONBW_BF16 = 0, MOE_NONBW_REJECT } moe_nonbw_policy;

typedef struct {
    char trainer[4096];        /* trainer=PATH: the moe-train binary to run */
    char configs[4096];        /* configs=DIR: where config names resolve */
    char data[4096];           /* data=DIR: where the trainer finds data.files (MOE_DATA_DIR) */
    moe_nonbw_policy on_non_blackwell; /* on_non_blackwell=bf16|reject */
    int allow_user_configs;    /* allow_user_configs=yes|no: paths outside configs= */
    int allow_cpu;             /* allow_cpu=yes|no: train on CPU-only nodes */
    int allow_fp8_block;       /* allow_fp8_block=yes|no: Hopper may use fp8_block */
    char topology_xml[4096];   /* topology_xml=FILE: use a saved hwloc XML instead of live discovery */
    int bind;                  /* bind=yes|no: bind tasks to the GPU's NUMA node and CPUs */
    int refuse_memory_short;   /* refuse_memory_short=yes|no: a run whose memory plan exceeds
                                  a GPU is refused, or only warned about (plan_fit) */
    int planner_timeout_s;     /* planner_timeout=SECONDS: how long the plugin waits for the
                                  trainer's answers (moe-train query); 0 = the default */
} moe_policy;

/* What the user asked for with --moe-* options (already syntax-checked). */
typedef struct {
    int active;                /* any --moe-* option given: the plugin acts only then */
    char config[4096];         /* --moe-config=NAME|PATH */
    int ep;                    /* --moe-ep=N (0 = not given: 1) */
    int dp;                    /* --moe-dp=N (0 = not given: GPUs / EP) */
    moe_precision precision;   /* --moe-precision: auto, mxfp8, bf16 or fp8_block */
    int precision_strict;      /* precision.strict (the config with --moe-set): a recipe
                                  asked that cannot run is refused, not trained in BF16 */
    char set[16384];           /* --moe-set=k=v[,k=v] (raw, validated syntax); users get
                                  half at submit, the rest is for the job script's items */
    int check_only;            /* --moe-check */
} moe_request;

/* One GPU the step was given, as topo/ found it. */
typedef struct {
    char model[128];           /* e.g. "NVIDIA H200", "NVIDIA B200" */
    char pci_bus_id[32];       /* "0000:1b:00.0" */
    int cc_major, cc_minor;    /* compute capability; -1 if unknown */
    int numa_node;             /* -1 if unknown */
} moe_step_gpu;

typedef struct {
    int n_gpus;
    moe_step_gpu gpus[MOE_VERDICT_MAX_GPUS];
    int ntasks;                /* tasks in the step (0 = unknown at this point) */
    int num_experts;           /* from the resolved config (0 = unknown) */
    int nnodes;                /* nodes in the step, each with n_gpus GPUs (0 = unknown: 1) */
} moe_step;

typedef enum { MOE_VERDICT_RUN = 0, MOE_VERDICT_REFUSE } moe_verdict_kind;

typedef struct {
    moe_verdict_kind kind;
    moe_precision precision;   /* mxfp8, bf16, fp8_block or fp32 (cpu); auto when refused */
    int ep, dp;
    int cpu_only;              /* training on CPUs (allow_cpu=yes, no GPU) */
    char paragraph[2048];      /* one readable paragraph: GPUs found, decision, why */
} moe_verdict;

/* Reach the verdict for a step on the node. Never fails: a refusal is a
 * verdict. */
void verdict_decide(const moe_policy *pol, const moe_request *req, const moe_step *step,
                    moe_verdict *out);

/* The checks that need no node, for sbatch/srun/salloc time (allocator and
 * local contexts): option consistency and what the request says, e.g. DP x EP
 * against the requested GPUs or tasks when known (values <= 0 mean unknown).
 * Returns 0 when acceptable, else -1 with the reason in e. */
int verdict_precheck(const moe_policy *pol, const moe_request *req, int requested_gpus,
                     int requested_tasks, moe_err *e);

/* Names for a compute capability: the architecture ("Hopper", "Blackwell",
 * "compute capability unknown" for major < 0) and the SM ("sm_90",
 * "sm_100", "sm_??" when unknown) as the paragraph writes them. */
const char *verdict_arch_name(int cc_major, int cc_minor);
void verdict_sm_name(char *buf, size_t len, int cc_major, int cc_minor);

/* A --moe-precision value: one of the precision names a user may ask for
 * (auto, mxfp8, bf16, fp8_block); -1 for anything else. */
int verdict_parse_precision(const char *s, moe_precision *out);

#endif
