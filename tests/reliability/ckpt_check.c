/* ckpt_check ROOT: what a resuming moe-train would find under a checkpoint
 * root, for tests/reliability/run.sh. Verifies every step_* directory (a
 * directory only gets that name once complete, so each must verify, even
 * after a SIGKILL at any instant), then prints what ckpt_latest picks:
 *   latest <step> <dir>     or     latest none
 *   inflight <n>            temp/parked directories left by killed writers
 * Exit 0 when every step_* verifies, 1 when one does not (named on stderr),
 * 2 on usage or an unreadable root. */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../../trainer/ckpt/ckpt_dir.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: ckpt_check CHECKPOINT_ROOT\n");
        return 2;
    }
    const char *root = argv[1];
    int bad = 0, inflight = 0;
    DIR *d = opendir(root);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            char path[8192];
            snprintf(path, sizeof path, "%s/%s", root, de->d_name);
            if (strncmp(de->d_name, "step_", 5) == 0) {
                moe_err e = {{0}};
                if (ckpt_verify(path, &e) != 0) {
                    fprintf(stderr, "ckpt_check: %s is named as a checkpoint but does not verify: %s\n",
                            path, e.msg);
                    bad = 1;
                }
            } else if (de->d_name[0] == '.' && strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                inflight++;
            }
        }
        closedir(d);
    }
    char dir[4096];
    int64_t step = -1;
    moe_err e = {{0}};
    int rc = ckpt_latest(root, dir, sizeof dir, &step, &e);
    if (rc < 0) {
        fprintf(stderr, "ckpt_check: %s\n", e.msg);
        return 2;
    }
    if (rc == 0)
        printf("latest %" PRId64 " %s\n", step, dir);
    else
        printf("latest none\n");
    if (e.msg[0])
        fprintf(stderr, "ckpt_check: skipped: %s\n", e.msg);
    printf("inflight %d\n", inflight);
    return bad;
}
