#!/bin/bash
# Genome collections from the command line: moe-data prepare / info, training
# on a token store (the same losses as on the FASTA file, step for step),
# data.files with directories and globs, moe-train eval --fasta, and bad
# inputs with clear messages. Usage: tests/cli/data.sh [BUILD_DIR]
set -u
B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TRAIN=$ROOT/$B/bin/moe-train DATA=$ROOT/$B/bin/moe-data
LAMBDA=$ROOT/data/lambda_virus.fa.gz
T=$(mktemp -d /tmp/moekit-data-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$ROOT/tests/cli/lib.sh"

# ---- moe-data prepare / info
if "$DATA" prepare --quiet --out "$T/lam" "$LAMBDA" >"$T/out" 2>&1 &&
   "$DATA" info --verify "$T/lam" >"$T/info" 2>&1 && grep -q "^bases *48502 " "$T/info" &&
   grep -q "^verified" "$T/info"; then
    ok prepare_and_info
else
    bad prepare_and_info "$(cat "$T/out" "$T/info" 2>/dev/null)"
fi
if "$DATA" prepare --quiet --out "$T/lam" "$LAMBDA" 2>&1 | grep -q "up to date"; then
    ok prepare_again_is_a_no_op
else
    bad prepare_again_is_a_no_op
fi
mkfifo "$T/pipe.fa"
expect_fail prepare_fifo "pipe.fa: is a FIFO" "$DATA" prepare --quiet --out "$T/x" "$T/pipe.fa"
: > "$T/empty.fa"
expect_fail prepare_empty "empty.fa: empty file" "$DATA" prepare --quiet --out "$T/x" "$T/empty.fa"
printf '>only a header\n' > "$T/hdr.fa"
expect_fail prepare_header_only "hdr.fa:1: record 'only a header' has no sequence" \
    "$DATA" prepare --quiet --out "$T/x" "$T/hdr.fa"
expect_fail prepare_no_match "no file matches" "$DATA" prepare --quiet --out "$T/x" "$T/none*.fa"
# an empty --out is refused before the inputs are read (it was refused after the whole store)
expect_fail prepare_empty_out "--out is empty" "$DATA" prepare --quiet --out "" "$LAMBDA"
expect_fail store_not_a_store "not a directory" "$TRAIN" --config L0_sanity data.store="$LAMBDA" "${TINY[@]}"
[ -e "$T/x" ] && bad no_half_store "$T/x exists" || ok no_half_store

# ---- two prepares into one store at once: the first stopped halfway (SIGSTOP) while the second
# runs whole; both finish, the store is whole, no temporary directory is left. Where PID
# namespaces can be made, each prepare is pid 1 of its own (two containers, two nodes): the
# pid-named temporary directory was then shared, and the second removed the first's
{ printf '>big\n'; head -c 100000000 /dev/zero | tr '\0' A; printf '\n'; } > "$T/big.fa"
NS=()
unshare --pid --fork --kill-child true 2>/dev/null && NS=(unshare --pid --fork --kill-child)
"${NS[@]}" "$DATA" prepare --quiet --threads 1 --out "$T/shared" "$T/big.fa" >"$T/first.out" 2>&1 & first=$!
busy=
for ((i = 0; i < 2000; i++)); do
    busy=$(pgrep -f "prepare --quiet --threads 1 --out $T/shared" | grep -vx $first | tail -1)
    [ -n "$busy" ] && compgen -G "$T/shared.tmp-*" >/dev/null && break
    busy=; sleep 0.005
done
[ -z "$NS" ] && busy=$first
if [ -n "$busy" ]; then
    kill -STOP $busy
    "${NS[@]}" "$DATA" prepare --quiet --out "$T/shared" "$LAMBDA" >"$T/second.out" 2>&1; second=$?
    kill -CONT $busy
    wait $first; first_rc=$?
    if [ $first_rc -eq 0 ] && [ $second -eq 0 ] && "$DATA" info --verify "$T/shared" >"$T/info" 2>&1 &&
       ! compgen -G "$T/shared.tmp-*" >/dev/null; then
        ok concurrent_prepares_one_store${NS:+_same_pid}
    else
        bad concurrent_prepares_one_store "first exit $first_rc, second exit $second:" \
            "$(cat "$T/first.out" "$T/second.out" 2>/dev/null | tail -4)" "$(ls -d "$T"/shared* 2>&1)"
    fi
else
    wait $first
    bad concurrent_prepares_one_store "the first prepare ended before it could be stopped"
fi
rm -f "$T/big.fa"

# ---- L0_sanity on the store of phage lambda: the FASTA run's losses, step for step
L0=(--config L0_sanity train.steps=3 scheduler.warmup_steps=1 logger.frequency=1
    train.eval_every_n_steps=2 train.eval_batches=1 --quiet)
"$TRAIN" "${L0[@]}" logger.run_dir="$T/run_fa" >"$T/out" 2>&1
"$TRAIN" "${L0[@]}" logger.run_dir="$T/run_st" data.store="$T/lam" >>"$T/out" 2>&1
losses() { grep -oE '"(loss|val_loss|lm_loss|grad_norm)": *[-0-9.e+]+' "$1/metrics.jsonl"; }
if [ -s "$T/run_fa/metrics.jsonl" ] && [ "$(losses "$T/run_fa" | wc -l)" -ge 3 ] &&
   diff <(losses "$T/run_fa") <(losses "$T/run_st") >"$T/diff"; then
    ok l0_store_losses_equal_fasta
else
    bad l0_store_losses_equal_fasta "$(cat "$T/diff" "$T/out" | tail -8)"
fi

# ---- a store truncated under a running job: a named error (not a bare SIGBUS), checkpoints intact
"$DATA" prepare --quiet --out "$T/shrinks" "$LAMBDA" >/dev/null 2>&1
"$TRAIN" --config L0_sanity data.store="$T/shrinks" "${TINY[@]}" train.steps=1000000 \
    train.eval_every_n_steps=0 checkpoint.ckpt_dir="$T/shrinks_ck" checkpoint.save_every_n_steps=5 \
    >"$T/out" 2>"$T/err" &
pid=$!
for ((i = 0; i < 3000; i++)); do
    [ -f "$T/shrinks_ck/step_00000005/MANIFEST" ] && break
    sleep 0.01
done
truncate -s 0 "$T/shrinks/index.bin"
wait $pid; rc=$?
newest=$(ls -d "$T"/shrinks_ck/step_* 2>/dev/null | tail -1)
if [ $rc -eq 1 ] && grep -q "moe-train: $T/shrinks/index.bin shrank while this process was reading it" "$T/err" &&
   [ -n "$newest" ] && (cd "$newest" && sha256sum --quiet -c MANIFEST); then
    ok store_truncated_under_a_job_is_a_named_error
else
    bad store_truncated_under_a_job_is_a_named_error "exit $rc, newest checkpoint ${newest:-none}:" "$(cat "$T/err")"
fi

# ---- data.files: a directory and a glob, no cap on the count
mkdir -p "$T/many/sub"
for i in $(seq 1 40); do printf '>r%d\nACGTACGTACGTACGTACGTACGTACGTACGTACGTACGTACGTACGTACACGTACGTACGTACGTACGTACGTACGTACGTACGTACGTACGTACGTAC\n' $i > "$T/many/sub/f$i.fa"; done
if "$TRAIN" --config L0_sanity data.files="$T/many" "${TINY[@]}" >"$T/out" 2>&1 &&
   "$TRAIN" --config L0_sanity "data.files=$T/many/sub/f*.fa" "${TINY[@]}" >>"$T/out" 2>&1; then
    ok files_directory_and_glob
else
    bad files_directory_and_glob "$(tail -3 "$T/out")"
fi

# ---- directories with symlink loops: each file read once, the loops named (two links back to the
# directory once made both commands run forever)
mkdir -p "$T/loops"
cp "$T/many/sub/f1.fa" "$T/loops/a.fa"
ln -s . "$T/loops/self" && ln -s . "$T/loops/again" && ln -s a.fa "$T/loops/alias.fa"
if timeout -k 5 30 "$DATA" prepare --quiet --out "$T/loops_store" "$T/loops" >"$T/out" 2>"$T/err" &&
   grep -q "^files *1$" <("$DATA" info "$T/loops_store") &&
   grep -q "warning: $T/loops/self leads back to $T/loops (a symlink loop)" "$T/err" &&
   grep -q "warning: $T/loops/again leads back to $T/loops" "$T/err" &&
   grep -q "warning: $T/loops/alias.fa is the same file as $T/loops/a.fa" "$T/err"; then
    ok prepare_symlink_loops_read_once
else
    bad prepare_symlink_loops_read_once "exit $?:" "$(cat "$T/out" "$T/err" | tail -5)"
fi
if timeout -s KILL 30 "$TRAIN" --config L0_sanity data.files="$T/loops" "${TINY[@]:0:${#TINY[@]}-1}" train.steps=1 \
       >"$T/out" 2>"$T/err" && grep -q "data  *1 file(s), 1 record(s)" "$T/out" &&
   grep -q "warning: $T/loops/again leads back to $T/loops" "$T/err"; then
    ok files_symlink_loops_read_once
else
    bad files_symlink_loops_read_once "$(cat "$T/out" "$T/err" | tail -5)"
fi

# ---- gzip: concatenated members are one file; bytes after the last member are said, with their count
{ printf '>one\nACGT\n' | gzip; printf '>two\nGGCC\n' | gzip; } > "$T/members.fa.gz"
cp "$T/members.fa.gz" "$T/trailing.fa.gz" && printf 'not gzip' >> "$T/trailing.fa.gz"
if "$DATA" prepare --quiet --out "$T/members_store" "$T/members.fa.gz" >"$T/out" 2>"$T/err" &&
   grep -q "^records *2$" <("$DATA" info "$T/members_store") && ! grep -q warning "$T/err" &&
   "$DATA" prepare --quiet --out "$T/trailing_store" "$T/trailing.fa.gz" >"$T/out" 2>"$T/err" &&
   grep -q "^records *2$" <("$DATA" info "$T/trailing_store") &&
   grep -q "warning: $T/trailing.fa.gz: 8 bytes after the last gzip member are not gzip data" "$T/err"; then
    ok gzip_trailing_bytes_warned
else
    bad gzip_trailing_bytes_warned "$(cat "$T/out" "$T/err")"
fi

# ---- a gzip bomb in data.files (1 MB of gzip, 1 GB of 'A's): refused at prepare's inflate limit with
# the advice to prepare a store (it was read whole: 2.1 GB of memory here, OOM-killed when larger)
printf '>bomb\n' | gzip > "$T/bomb.fa.gz"
head -c 64000000 /dev/zero | tr '\0' A | gzip -9 > "$T/as.gz"
for i in $(seq 16); do cat "$T/as.gz"; done >> "$T/bomb.fa.gz"
expect_fail files_gzip_bomb_refused "bomb.fa.gz: 2[0-9][0-9] MB of text from 0 MB of gzip, more than 1000x.*moe-data prepare" \
    timeout -s KILL 60 "$TRAIN" --config L0_sanity data.files="$T/bomb.fa.gz" "${TINY[@]}"

# ---- eval --fasta: windows of the FASTA as training cuts them
CK="$T/ckpt"
if "$TRAIN" --config L0_sanity checkpoint.ckpt_dir="$CK" "${TINY[@]}" >"$T/out" 2>&1 &&
   "$TRAIN" eval --checkpoint "$CK/final_model" --fasta "$LAMBDA" --seq-length 32 >"$T/out" 2>"$T/err" &&
   python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["lm_loss"]>0 and d["tokens"]==48503 and d["sequences"]==1516, d' "$T/out"; then
    ok eval_fasta
else
    bad eval_fasta "$(cat "$T/out" "$T/err")"
fi
expect_fail eval_fasta_directory "is a directory" "$TRAIN" eval --checkpoint "$CK/final_model" --fasta "$T/many/sub/"
expect_fail eval_fasta_header_only "hdr.fa:1" "$TRAIN" eval --checkpoint "$CK/final_model" --fasta "$T/hdr.fa"

echo "data: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
