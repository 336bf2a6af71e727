/*
 * Guarded reads of mapped files: a process-wide SIGBUS handler that returns a
 * fault inside an armed region to its sigsetjmp (see guard.h).
 *
 * Async-signal-safety: the handler reads and writes only the faulting thread's
 * own region pointer (initial-exec TLS: no lazy allocation on first access from
 * the handler), that region (on the thread's own stack), the saved previous
 * action (written once, before the handler is installed) and the interrupted
 * context, and calls only sigaction, raise and, where it cannot redirect the
 * context, siglongjmp. It does not jump out itself: it makes the interrupted
 * context resume in a function that jumps to the region, so that the signal
 * returns normally (the kernel restores the signal mask, and a runtime that
 * wraps handlers, as ThreadSanitizer does, sees its handler end). No sigsetjmp
 * saves the signal mask (a system call); for the fallback jump, the handler runs
 * with SA_NODEFER, so that SIGBUS is not left blocked.
 */
#include "guard.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <ucontext.h>

__thread ferry__guard *ferry__guard_top __attribute__((tls_model("initial-exec")));
#define top ferry__guard_top
static struct sigaction previous;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int install_errno;

static __thread ferry__guard *resume_to __attribute__((tls_model("initial-exec")));

/* Runs in place of the faulting instruction, once the handler has returned. */
__attribute__((noreturn, used)) static void resume(void)
{
    ferry__guard *g = resume_to;
    resume_to = NULL;
    siglongjmp(g->jb, 1);
}

/* Makes the interrupted context call resume() when the handler returns: a stack
 * pointer below the faulting frame's (and its red zone), aligned as at a call.
 * The frames below the region are abandoned anyway. False where the context's
 * layout is not known here. */
static bool redirect(void *ucv)
{
#if defined(__linux__) && defined(__x86_64__) && defined(REG_RIP)
    ucontext_t *uc = ucv;
    greg_t sp = uc->uc_mcontext.gregs[REG_RSP];
    uc->uc_mcontext.gregs[REG_RSP] = (greg_t)((((uint64_t)sp - 1024) & ~(uint64_t)15) - 8);
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)resume;
    return true;
#elif defined(__linux__) && defined(__aarch64__)
    ucontext_t *uc = ucv;
    uint64_t sp = uc->uc_mcontext.sp;
    uc->uc_mcontext.sp = (sp - 1024) & ~(uint64_t)15;
    uc->uc_mcontext.pc = (uint64_t)(uintptr_t)resume;
    return true;
#else
    (void)ucv;
    return false;
#endif
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    ferry__guard *g = top;
    /* si_code > 0: raised by the kernel for a fault, not sent by kill. A passive
     * region is armed only while a mapped reader it calls directly reads. */
    if (g && si && si->si_code > 0 && (!g->passive || g->reading)) {
        g->addr = (uintptr_t)si->si_addr;
        if (g->passive) {
            /* the reading lives in a frame the jump abandons: keep a copy */
            g->at_fault.fault = g->reading->fault;
            g->at_fault.arg = g->reading->arg;
            g->at_fault.item = g->reading->item;
            g->at_fault.res = g->reading->res;
            g->reading = NULL;
        }
        top = g->prev;
        resume_to = g;
        /* Return from the handler into resume(), which jumps from ordinary
         * context: a jump out of the handler itself would skip the bookkeeping
         * of a runtime that wraps signal handlers (ThreadSanitizer's counts the
         * handler as still running, and treats the next fault as fatal). */
        if (redirect(uc))
            return;
        siglongjmp(g->jb, 1);
    }
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction) {
            previous.sa_sigaction(sig, si, uc);
            return;
        }
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    /* The default (or ignored, which a fault cannot be): put the default back and
     * return; the faulting access runs again and ends the process as it would
     * have without ferry. A signal sent by kill is raised again. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGBUS, &dfl, NULL);
    if (!si || si->si_code <= 0)
        raise(SIGBUS);
}

static void install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, NULL, &previous) != 0 || sigaction(SIGBUS, &sa, NULL) != 0)
        install_errno = errno ? errno : EINVAL;
}

int ferry__guard_install(void)
{
    pthread_once(&once, install);
    if (install_errno)
        return ferry__err(FERRY_EIO, "cannot install the SIGBUS handler for mapped files: %s",
                          strerror(install_errno));
    return 0;
}

void ferry__guard_push(ferry__guard *g)
{
    g->prev = top;
    g->addr = 0;
    g->passive = false;
    g->direct = NULL;
    g->reading = NULL;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    top = g;
}

void ferry__guard_pop(ferry__guard *g)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    top = g->prev;
}

int ferry__guard_err(uintptr_t addr, const char *path, const void *base, const char *fmt, ...)
{
    char what[FERRY_ERRMSG_MAX], where[96] = "", now[64] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    struct stat st;
    if (path && stat(path, &st) == 0)
        snprintf(now, sizeof now, ": %llu bytes now", (unsigned long long)st.st_size);
    if (base && addr >= (uintptr_t)base)
        snprintf(where, sizeof where, " (offset %llu is past its end%s)",
                 (unsigned long long)(addr - (uintptr_t)base), now);
    else if (now[0])
        snprintf(where, sizeof where, " (%s)", now + 2);
    return ferry__err(FERRY_EIO, "%s: %s: the file was cut short while it was read%s",
                      path ? path : "(unknown file)", what, where);
}
