/* moe-data prepare's temporary directories, safe when several prepares
 * write the same store at once (other nodes, other users, other PID
 * namespaces): each run's directory is STORE.tmp-<host>-<pid>-<random>,
 * created with mkdir (never taken over) and holding owner.lock, which the
 * run keeps an fcntl lock on for as long as it lives. Another prepare
 * removes a temporary directory only when it can take that lock itself:
 * its owner is dead, however it died, on any node (fcntl locks reach across
 * NFS and Lustre -o flock). A directory without the lock file (one being
 * set up, one being published, an older moekit's STORE.tmp-<pid>) is never
 * removed. */
#ifndef MOE_STORE_TMP_H
#define MOE_STORE_TMP_H

#include <stddef.h>

#include "../../common/err.h"

#define STORE_TMP_TAG ".tmp-"
#define STORE_TMP_LOCK "owner.lock"

/* Make this run's directory for store out into dir[cap]; *lock_fd holds
 * the owner lock (close it only after store_tmp_disown). */
int store_tmp_create(const char *out, char *dir, size_t cap, int *lock_fd, moe_err *e);
/* Drop the lock file before dir becomes the store (a store holds only its
 * own files); the lock stays held through lock_fd until it is closed. */
void store_tmp_disown(const char *dir);
/* Remove the temporary directories of out whose owners are provably dead. */
void store_tmp_remove_stale(const char *out);
/* Remove a directory holding only files (a store or a temporary). */
void store_remove_flat_dir(const char *dir);

#endif
