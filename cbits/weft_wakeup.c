/* The wakeup channel's fds (Weft.Event.Internal.Wakeup): an eventfd with
 * WEFT_LINUX, else a pipe; both non-blocking and close-on-exec. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#ifdef WEFT_LINUX
#include <sys/eventfd.h>
#endif

/* Fills fds with the read and write ends (the same fd for an eventfd).
 * Returns 1 for an eventfd, 0 for a pipe, -errno on failure. */
int weft_wakeup_open(int fds[2], int want_eventfd)
{
    int i;
#ifdef WEFT_LINUX
    if (want_eventfd) {
        int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (fd >= 0) {
            fds[0] = fds[1] = fd;
            return 1;
        }
    }
#else
    (void)want_eventfd;
#endif
    if (pipe(fds) < 0) return -errno;
    for (i = 0; i < 2; i++) {
        int fl = fcntl(fds[i], F_GETFL);
        if (fl < 0 || fcntl(fds[i], F_SETFL, fl | O_NONBLOCK) < 0
            || fcntl(fds[i], F_SETFD, FD_CLOEXEC) < 0) {
            int err = errno;
            close(fds[0]);
            close(fds[1]);
            return -err;
        }
    }
    return 0;
}

/* A full memory barrier (Weft.Internal.Counters.fullBarrier): the calling
 * thread's earlier stores become visible before its later loads are
 * performed. GHC 9.0 has no primitive for this alone. */
void weft_full_barrier(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
