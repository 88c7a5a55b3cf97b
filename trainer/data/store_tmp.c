/* Temporary directories of moe-data prepare, owned through an fcntl lock
 * (store_tmp.h). */
#include "store_tmp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void store_remove_flat_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char path[PATH_MAX + 256];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(dir);
}

/* The host name, with what a file name should not hold replaced. */
static void host_tag(char *out, size_t cap)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "host");
    size_t n = 0;
    for (const char *c = host; *c && n + 1 < cap && n < 64; c++, n++)
        out[n] = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                 *c == '-' || *c == '.' ? *c : '_';
    out[n] = '\0';
}

static uint32_t random_word(void)
{
    uint32_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r)
        return r;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint32_t)ts.tv_nsec ^ ((uint32_t)getpid() << 16) ^ (uint32_t)ts.tv_sec;
}

static int write_lock(int fd)
{
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    return fcntl(fd, F_SETLK, &l);
}

/* The lock file is made and locked under another name, then renamed into
 * place: a prepare looking for dead owners never sees it unlocked. */
static int take_ownership(const char *dir, int *lock_fd, moe_err *e)
{
    char fresh[PATH_MAX + 64], final[PATH_MAX + 64], host[72];
    snprintf(fresh, sizeof fresh, "%s/%s.new", dir, STORE_TMP_LOCK);
    snprintf(final, sizeof final, "%s/%s", dir, STORE_TMP_LOCK);
    int fd = open(fresh, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return moe_err_errno(e, errno, "cannot create %s", fresh);
    host_tag(host, sizeof host);
    dprintf(fd, "host=%s pid=%ld\n", host, (long)getpid());
    if (write_lock(fd) != 0 || rename(fresh, final) != 0) {
        int err = errno;
        close(fd);
        return moe_err_errno(e, err, "cannot lock %s", final);
    }
    *lock_fd = fd;
    return 0;
}

int store_tmp_create(const char *out, char *dir, size_t cap, int *lock_fd, moe_err *e)
{
    char host[72];
    host_tag(host, sizeof host);
    for (int attempt = 0;; attempt++) {
        int n = snprintf(dir, cap, "%s" STORE_TMP_TAG "%s-%ld-%08x", out, host, (long)getpid(),
                         random_word());
        if (n < 0 || (size_t)n >= cap)
            return moe_errf(e, "%s: path too long", out);
        if (mkdir(dir, 0755) == 0)
            break;
        if (errno != EEXIST || attempt == 16)
            return moe_err_errno(e, errno, "cannot create %s", dir);
    }
    if (take_ownership(dir, lock_fd, e) < 0) {
        store_remove_flat_dir(dir);
        return -1;
    }
    return 0;
}

void store_tmp_disown(const char *dir)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, STORE_TMP_LOCK);
    unlink(path);
}

/* 1 when dir's owner lock could be taken: nobody holds it any more. */
static int owner_dead(const char *dir, int *fd)
{
    char path[PATH_MAX * 2 + 64];
    snprintf(path, sizeof path, "%s/%s", dir, STORE_TMP_LOCK);
    *fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (*fd < 0)
        return 0; /* no lock file: being set up, being published, or not ours to judge */
    struct stat st;
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode) || write_lock(*fd) != 0) {
        close(*fd);
        *fd = -1;
        return 0;
    }
    return 1;
}

void store_tmp_remove_stale(const char *out)
{
    char parent[PATH_MAX], prefix[PATH_MAX], path[PATH_MAX * 2];
    const char *slash = strrchr(out, '/');
    snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - out) : 1, slash ? out : ".");
    if (slash == out)
        snprintf(parent, sizeof parent, "/");
    snprintf(prefix, sizeof prefix, "%s" STORE_TMP_TAG, slash ? slash + 1 : out);
    DIR *d = opendir(parent);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)) != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", parent, de->d_name);
        int fd;
        if (!owner_dead(path, &fd))
            continue;
        store_remove_flat_dir(path); /* the lock held until it is gone */
        close(fd);
    }
    closedir(d);
}
