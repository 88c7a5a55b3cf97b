/* moekit: named errors for guarded mappings that shrink (map_guard.h). */
#include "map_guard.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    _Atomic uintptr_t base; /* 0: free; set last, cleared first */
    size_t len;
    char msg[1024];
    size_t msg_len;
} guard_slot;

static guard_slot slots[MAP_GUARD_SLOTS];
static struct sigaction previous;
static pthread_once_t installed = PTHREAD_ONCE_INIT;
static int install_errno;
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER; /* between adders only */

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    uintptr_t addr = (uintptr_t)si->si_addr;
    for (int i = 0; si->si_code > 0 && i < MAP_GUARD_SLOTS; i++) { /* > 0: the kernel's, not kill(2)'s */
        uintptr_t b = atomic_load_explicit(&slots[i].base, memory_order_acquire);
        if (b && addr >= b && addr - b < slots[i].len) {
            ssize_t w = write(STDERR_FILENO, slots[i].msg, slots[i].msg_len);
            (void)w;
            _exit(1);
        }
    }
    /* not ours: as if this handler were never there; the faulting access
     * runs again under the previous disposition */
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, si, ctx);
        return;
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    signal(SIGBUS, SIG_DFL);
}

static void install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &previous) != 0)
        install_errno = errno;
}

int map_guard_add(const void *base, size_t len, const char *file, const char *why, moe_err *e)
{
    pthread_once(&installed, install);
    if (install_errno)
        return moe_err_errno(e, install_errno, "%s: cannot install the SIGBUS handler", file);
    pthread_mutex_lock(&slots_lock);
    guard_slot *s = NULL;
    for (int i = 0; i < MAP_GUARD_SLOTS && !s; i++)
        if (!atomic_load(&slots[i].base))
            s = &slots[i];
    if (s) {
        int n = snprintf(s->msg, sizeof s->msg, "%s: %s shrank while this process was reading it "
                         "(truncated or rewritten in place): %s; checkpoints already saved are "
                         "intact\n", program_invocation_short_name, file, why);
        s->msg_len = n < 0 ? 0 : (size_t)n < sizeof s->msg ? (size_t)n : sizeof s->msg - 1;
        s->len = len;
        atomic_store_explicit(&s->base, (uintptr_t)base, memory_order_release);
    }
    pthread_mutex_unlock(&slots_lock);
    if (!s)
        return moe_errf(e, "%s: more than %d guarded mappings", file, MAP_GUARD_SLOTS);
    return 0;
}

void map_guard_remove(const void *base)
{
    for (int i = 0; i < MAP_GUARD_SLOTS; i++)
        if (atomic_load(&slots[i].base) == (uintptr_t)base)
            atomic_store_explicit(&slots[i].base, 0, memory_order_release);
}
