# ---- the body every moekit job script shares: jobs/job_body.sh, copied below each script's
# header by scripts/job_scripts.sh (sbatch copies only the script, so the body travels inside
# it). Edit jobs/job_body.sh, then run scripts/job_scripts.sh; the cli tests fail while a
# script's copy differs. The header above sets $tag.
echo "$tag: job ${SLURM_JOB_ID}, ${SLURM_JOB_NUM_NODES:-1} node(s) ${SLURM_JOB_NODELIST}:" \
    "config ${SLURM_SPANK_MOE_CONFIG:-?}, overrides ${SLURM_SPANK_MOE_SET:-none}" \
    "${SLURM_RESTART_COUNT:+(restart $SLURM_RESTART_COUNT)}"

# Resume and requeue. The checkpoint directory defaults to one per job id (a requeued job keeps its
# id), and moe-train resumes from the newest checkpoint there that verifies; a --moe-set that names
# checkpoint.ckpt_dir or checkpoint.resume_from_checkpoint itself wins.
moe_set=${SLURM_SPANK_MOE_SET:-}
# Values this script adds are quoted the one way --moe-set knows (plugin/README.md): "..." with \"
# and \\ inside, so any submit directory passes intact. The plugin leaves room for these items
# beyond the user's 64.
quote_value() { local v=${1//\\/\\\\}; v=${v//\"/\\\"}; printf '"%s"' "$v"; }
case ",$moe_set" in
    *,checkpoint.ckpt_dir=*) ;;
    *) ckpt_dir="${SLURM_SUBMIT_DIR:-$PWD}/checkpoints/${SLURM_JOB_NAME:-moe}-${SLURM_JOB_ID}"
       moe_set="${moe_set:+$moe_set,}checkpoint.ckpt_dir=$(quote_value "$ckpt_dir")" ;;
esac
case ",$moe_set" in
    *,checkpoint.resume_from_checkpoint=*) ;;
    *) moe_set="$moe_set,checkpoint.resume_from_checkpoint=true" ;;
esac

# How srun starts the ranks. GPU steps: moe-train's ranks meet through the plugin's MOE_RANK,
# MOE_WORLD_SIZE and MOE_MASTER_ADDR/PORT (NCCL), no MPI. CPU steps of several tasks (--gres=none):
# the ranks talk over MPI, started through PMIx when this Slurm has it, whatever the cluster's
# MpiDefault. MOE_SRUN_MPI=TYPE (e.g. pmi2 for MPICH, none) decides instead.
srun_mpi=${MOE_SRUN_MPI:-}
if [ -z "$srun_mpi" ] && [ -z "${SLURM_JOB_GPUS:-}" ] && [ "${SLURM_NTASKS:-1}" -gt 1 ]; then
    plugin_dirs=$(scontrol show config 2>/dev/null | sed -n 's/^PluginDir *= *//p')
    for d in ${plugin_dirs//:/ }; do [ -e "$d/mpi_pmix.so" ] && srun_mpi=pmix; done
fi

# SIGUSR1 reaches this shell before the time limit (--signal=B:...); hand it to the training step.
# (scancel --signal=USR1 JOBID reaches moe-train directly.) moe-train finishes its step, saves a
# checkpoint and exits 75. --kill-on-bad-exit=1: a task that exits non-zero (a rank that crashed,
# was killed or gave up on a dead peer) ends the step's other tasks at once instead of leaving
# them blocked in a collective until moe-train's watchdog (parallel.timeout_s) gives up.
srun --kill-on-bad-exit=1 ${srun_mpi:+--mpi=$srun_mpi} --moe-set="$moe_set" moe-train &
step=$!
trap 'echo "$tag: SIGUSR1: asking moe-train to checkpoint and stop"; kill -USR1 "$step" 2>/dev/null' USR1
rc=0
while :; do
    wait "$step"; rc=$?
    # a status above 128 with the step still running only means the trap ran: wait on
    if [ "$rc" -gt 128 ] && kill -0 "$step" 2>/dev/null; then continue; fi
    break
done
trap - USR1

# Exit 75: checkpointed on a signal. Requeue when the job allows it (Requeue=1: sbatch --requeue,
# or the cluster's JobRequeue=1 default; --no-requeue forbids it), at most MOE_MAX_REQUEUES times.
if [ "$rc" -eq 75 ]; then
    restarts=${SLURM_RESTART_COUNT:-0}
    allowed=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | grep -o 'Requeue=[01]' | head -1)
    if [ "$allowed" != "Requeue=1" ]; then
        echo "$tag: moe-train saved a checkpoint and stopped; job ${SLURM_JOB_ID} does not allow" \
            "requeue (--no-requeue): resubmit with the same checkpoint.ckpt_dir to resume" >&2
    elif [ "$restarts" -ge "${MOE_MAX_REQUEUES:-20}" ]; then
        echo "$tag: job ${SLURM_JOB_ID} was already requeued $restarts times" \
            "(MOE_MAX_REQUEUES=${MOE_MAX_REQUEUES:-20}); not requeueing again" >&2
    else
        # said first: the requeue ends this script (Slurm cancels the running instance), so
        # nothing after a successful scontrol requeue is sure to run
        echo "$tag: moe-train saved a checkpoint and stopped; requeueing job ${SLURM_JOB_ID}" \
            "(restart $((restarts + 1))), it resumes from the checkpoint"
        scontrol requeue "$SLURM_JOB_ID" && exit 0
        echo "$tag: scontrol requeue ${SLURM_JOB_ID} failed; resubmit to resume" >&2
    fi
fi
exit "$rc"
