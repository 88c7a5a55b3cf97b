#include "fsio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fsio_write_full(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

ssize_t fsio_pread_full(int fd, void *buf, size_t n, off_t offset)
{
    char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, p + got, n - got, offset + (off_t)got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int fsio_read_all(const char *path, size_t max_bytes, char **data, size_t *len, moe_err *e)
{
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return moe_err_errno(e, errno, "%s", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return moe_err_errno(e, err, "%s: stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return moe_errf(e, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return moe_errf(e, "%s: file is %lld bytes, over the limit of %zu", path,
                        (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return moe_errf(e, "%s: out of memory reading %zu bytes", path, n);
    }
    ssize_t r = fsio_pread_full(fd, buf, n, 0);
    int err = errno;
    close(fd);
    if (r < 0 || (size_t)r != n) {
        free(buf);
        if (r < 0)
            return moe_err_errno(e, err, "%s: read", path);
        return moe_errf(e, "%s: file shrank while being read", path);
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

int fsio_write_all(const char *path, const void *data, size_t len, moe_err *e)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return moe_err_errno(e, errno, "%s: create", path);
    if (fsio_write_full(fd, data, len) != 0) {
        int err = errno;
        close(fd);
        return moe_err_errno(e, err, "%s: write", path);
    }
    /* Network file systems report deferred write errors at close. */
    if (close(fd) != 0)
        return moe_err_errno(e, errno, "%s: close", path);
    return 0;
}

int fsio_mkdir_p(const char *path, mode_t mode, moe_err *e)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0)
        return moe_errf(e, "mkdir: empty path");
    if (n >= sizeof buf)
        return moe_errf(e, "%s: path longer than %zu bytes", path, sizeof buf - 1);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, mode) != 0 && errno != EEXIST)
            return moe_err_errno(e, errno, "%s: mkdir", buf);
        buf[i] = saved;
    }
    struct stat st;
    if (stat(path, &st) != 0)
        return moe_err_errno(e, errno, "%s", path);
    if (!S_ISDIR(st.st_mode))
        return moe_errf(e, "%s: exists and is not a directory", path);
    return 0;
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    int rc = (type == FTW_DP) ? rmdir(path) : unlink(path);
    return (rc != 0 && errno != ENOENT) ? -1 : 0;
}

int fsio_rm_rf(const char *path, moe_err *e)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : moe_err_errno(e, errno, "%s", path);
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(path) != 0 && errno != ENOENT)
            return moe_err_errno(e, errno, "%s: unlink", path);
        return 0;
    }
    /* FTW_DEPTH: children before their directory; FTW_PHYS: never follow a
     * link out of the tree being deleted. */
    if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return moe_err_errno(e, errno, "%s: remove", path);
    return 0;
}

int fsio_fsync_path(const char *path, moe_err *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return moe_err_errno(e, errno, "%s: open for fsync", path);
    if (fsync(fd) != 0) {
        int err = errno;
        close(fd);
        return moe_err_errno(e, err, "%s: fsync", path);
    }
    close(fd);
    return 0;
}

int fsio_fsync_dir_files(const char *dir, moe_err *e)
{
    DIR *d = opendir(dir);
    if (!d)
        return moe_err_errno(e, errno, "%s: cannot list for fsync", dir);
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        char path[4200];
        struct stat st;
        if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, "..")))
            continue;
        if (fsio_join(path, sizeof path, dir, de->d_name, e))
            rc = -1;
        else if (lstat(path, &st) == 0 && S_ISREG(st.st_mode))
            rc = fsio_fsync_path(path, e);
    }
    closedir(d);
    return rc ? rc : fsio_fsync_path(dir, e);
}

int fsio_join(char *dst, size_t n, const char *dir, const char *name, moe_err *e)
{
    int w = snprintf(dst, n, "%s/%s", dir, name);
    if (w < 0 || (size_t)w >= n)
        return moe_errf(e, "%s/%s: path longer than %zu bytes", dir, name, n - 1);
    return 0;
}
