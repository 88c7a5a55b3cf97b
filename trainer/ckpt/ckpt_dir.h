/* moekit checkpoints: crash-safe checkpoint directories.
 *
 * Layout under a checkpoint root:
 *   step_00001000/            a committed checkpoint: the caller's files + MANIFEST
 *   .tmp-step_00002000-4242/  being written by pid 4242 (never read as a checkpoint)
 * MANIFEST lists every other file of the directory in `sha256sum -c`'s
 * format, "<sha256 hex>  <name>", each followed by a "# size <bytes>" line,
 * between a "# moekit-manifest 2 ..." line and a "# end <count>" line (so a
 * truncated MANIFEST is detected too; sha256sum skips the # lines).
 * Version 1 ("<sha256 hex> <size> <name>" lines between "moekit-manifest 1"
 * and "end <count>") is still read.
 *
 * Protocol: ckpt_begin makes a fresh temp dir; the caller writes flat regular
 * files into t->tmp_dir; ckpt_commit hashes and fsyncs them, writes and
 * fsyncs MANIFEST and the temp dir, renames it to step_N (an existing step_N
 * is swapped out atomically with RENAME_EXCHANGE where the file system has
 * it, else parked as .old-step_N-<pid> until the new one is in place), fsyncs
 * the root, then prunes. A process killed at any instant leaves the previous
 * checkpoint loadable, and a directory is only ever called step_N once it is
 * complete; ckpt_latest still verifies, so bit rot or a damaged copy is
 * skipped, not loaded: every file's size and the small files' SHA-256 (the
 * large tensor files of a version-2 checkpoint are verified block by block
 * while a resume reads them, against the digests of its index, which is one
 * of the small files), every file's SHA-256 in version 1.
 *
 * One writer per root at a time (rank 0 of the job): ckpt_begin removes
 * .tmp-/.del- directories of processes that no longer run on this host. */
#ifndef MOE_CKPT_DIR_H
#define MOE_CKPT_DIR_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

#define CKPT_MANIFEST "MANIFEST"

typedef struct {
    char root[4096];
    char tmp_dir[4096];   /* where the caller writes; "" once committed or aborted */
    char final_dir[4096]; /* <root>/step_<NNNNNNNN> */
    int64_t step;
} ckpt_txn;

/* What killed writers left under root: their temp and deletion dirs removed,
 * a parked step whose replacement never arrived restored. The directory's
 * lock holder calls it at start-up, so a run that saves nothing still leaves
 * no debris; ckpt_begin calls it too. */
void ckpt_sweep(const char *root);

/* mkdir -p root, clear stale temp dirs, create a fresh t->tmp_dir for step. */
int ckpt_begin(ckpt_txn *t, const char *ckpt_root, int64_t step, moe_err *e);

/* Publish t->tmp_dir as t->final_dir, then keep only the newest max_keep
 * step dirs (0 = keep all; the one just written is never removed). If the
 * publish succeeded, t->tmp_dir is "" even when pruning then failed (the -1
 * message says so). After a failure before publishing, call ckpt_abort. */
int ckpt_commit(ckpt_txn *t, int max_keep, moe_err *e);

/* A file its writer already hashed (and fsynced): commit takes its digest
 * instead of reading it again. */
typedef struct {
    const char *name;
    char hex[65];
    uint64_t size;
} ckpt_hashed;
int ckpt_commit_hashed(ckpt_txn *t, int max_keep, const ckpt_hashed *pre, int n_pre, moe_err *e);

/* Remove the temp dir of an uncommitted checkpoint (no-op after commit). */
void ckpt_abort(ckpt_txn *t);

/* The newest step dir that verifies: 0 with its path and step, 1 when there
 * is none (or no root), -1 on an error reading the root. Broken checkpoints
 * on the way are skipped; after 0 or 1, e->msg is "" or says which were
 * skipped and why. */
int ckpt_latest(const char *ckpt_root, char *dir_out, size_t n, int64_t *step_out, moe_err *e);

/* Every file matches MANIFEST (size and SHA-256, every byte read), none is
 * missing, none is extra; the error names the file. */
int ckpt_verify(const char *dir, moe_err *e);

/* Committed checkpoints under root (0 when there is no root), the newest
 * step in *newest (-1 for none); -1 on an error reading root. */
int ckpt_count(const char *root, int64_t *newest, moe_err *e);

/* Remove every checkpoint under root, each renamed out of the step_N names
 * before it is deleted. */
int ckpt_remove_all(const char *root, moe_err *e);

#endif
