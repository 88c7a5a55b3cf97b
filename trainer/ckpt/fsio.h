/* moekit checkpoints: small file-system helpers with moe_err reporting.
 * Everything that touches the disk in trainer/ckpt goes through these so
 * short writes, EINTR and fsync are handled in one place. */
#ifndef MOE_CKPT_FSIO_H
#define MOE_CKPT_FSIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../../common/err.h"

/* Read a whole regular file into a malloc'd buffer with a NUL after the last
 * byte (so text parsers may rely on it). Files over max_bytes are refused
 * before anything is read. *data is freed by the caller. */
int fsio_read_all(const char *path, size_t max_bytes, char **data, size_t *len, moe_err *e);

/* Create or truncate path and write len bytes. No fsync: durability is the
 * checkpoint commit's job. */
int fsio_write_all(const char *path, const void *data, size_t len, moe_err *e);

/* write(2)/pread(2) until done; retry on EINTR. write_full returns 0 or -1
 * (errno set); pread_full returns the bytes read (less than n only at end of
 * file) or -1. */
int fsio_write_full(int fd, const void *data, size_t n);
ssize_t fsio_pread_full(int fd, void *buf, size_t n, off_t offset);

/* mkdir -p: every missing component is created with mode. */
int fsio_mkdir_p(const char *path, mode_t mode, moe_err *e);

/* rm -rf without following symbolic links; a missing path is not an error. */
int fsio_rm_rf(const char *path, moe_err *e);

/* fsync a file or a directory by path. */
int fsio_fsync_path(const char *path, moe_err *e);

/* fsync every regular file directly in dir, then dir: what a rename of dir
 * publishes is on the disk before the rename is. */
int fsio_fsync_dir_files(const char *dir, moe_err *e);

/* snprintf that reports truncation: 0 if "dst" held the whole result. */
int fsio_join(char *dst, size_t n, const char *dir, const char *name, moe_err *e);

#endif
