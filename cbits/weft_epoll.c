/* epoll_ctl with the event built on the C stack, so that arming an fd
 * allocates nothing on the Haskell heap. Returns 0, or -errno. */
#include <errno.h>
#include <stdint.h>
#include <sys/epoll.h>

int weft_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t data)
{
    struct epoll_event ev;
    ev.events = events;
    ev.data.u64 = data;
    return epoll_ctl(epfd, op, fd, &ev) == 0 ? 0 : -errno;
}

/* A blocking epoll wait with a timeout in nanoseconds (negative: forever).
 * epoll_pwait2 (Linux 5.11) takes a timespec, so sub-millisecond timers do
 * not round up to a whole millisecond. Where the kernel lacks it (ENOSYS),
 * it falls back, once and for all, to epoll_wait with the timeout rounded
 * up to milliseconds, so it never returns before the deadline. */
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static volatile int weft_no_pwait2 = 0;

int weft_epoll_wait_ns(int epfd, struct epoll_event *events, int max, int64_t ns)
{
    if (ns < 0)
        return epoll_wait(epfd, events, max, -1);
#ifdef SYS_epoll_pwait2
    if (!weft_no_pwait2) {
        struct timespec ts;
        ts.tv_sec = ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        long r = syscall(SYS_epoll_pwait2, epfd, events, max, &ts, NULL, 0);
        if (r >= 0 || errno != ENOSYS)
            return (int) r;
        weft_no_pwait2 = 1;
    }
#endif
    int64_t ms = (ns + 999999) / 1000000;
    return epoll_wait(epfd, events, max, ms > 0x7fffffff ? 0x7fffffff : (int) ms);
}
