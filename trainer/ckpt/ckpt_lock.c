/* moekit checkpoints: the checkpoint directory's lock (ckpt_lock.h). */
#include "ckpt_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fsio.h"

static int holder_line(char *buf, size_t n)
{
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    const char *job = getenv("SLURM_JOB_ID");
    time_t now = time(NULL);
    struct tm tm;
    char when[32] = "?";
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return snprintf(buf, n, "host=%s pid=%d job=%s since=%s\n", host, (int)getpid(),
                    job && *job ? job : "-", when);
}

static int refuse(int fd, const char *path, moe_err *e)
{
    char who[512] = "";
    ssize_t r = pread(fd, who, sizeof who - 1, 0);
    who[r > 0 ? r : 0] = '\0';
    who[strcspn(who, "\n")] = '\0';
    close(fd);
    return moe_errf(e, "%s is held by another run (%s): two runs writing one checkpoint "
                       "directory destroy each other's checkpoints; give this run its own "
                       "checkpoint.ckpt_dir, or wait for that run to end",
                    path, who[0] ? who : "holder unknown");
}

int ckpt_lock_acquire(const char *root, moe_err *e)
{
    struct stat st;
    if (fsio_mkdir_p(root, 0755, e))
        return -1;
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode))
        return moe_errf(e, "%s is not a directory", root);
    if (access(root, W_OK | X_OK) != 0)
        return moe_err_errno(e, errno, "%s is not writable", root);
    char path[4200];
    if (fsio_join(path, sizeof path, root, CKPT_LOCK_FILE, e))
        return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return moe_err_errno(e, errno, "%s: cannot create the lock file", path);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(fd, F_SETLK, &fl) != 0) {
        if (errno == EACCES || errno == EAGAIN)
            return refuse(fd, path, e);
        int err = errno;
        close(fd);
        return moe_err_errno(e, err, "%s: cannot lock (does this file system support fcntl "
                                     "locks? Lustre needs -o flock)", path);
    }
    char line[512];
    int n = holder_line(line, sizeof line);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n || fsync(fd) != 0) {
        int err = errno;
        close(fd);
        return moe_err_errno(e, err, "%s: cannot write (is the file system full or read-only?)",
                             path);
    }
    return fd;
}

void ckpt_lock_release(int fd)
{
    if (fd >= 0)
        close(fd); /* the lock goes with the descriptor; the file stays for the next run */
}
