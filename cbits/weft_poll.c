/* A blocking poll with a timeout in nanoseconds (negative: forever), through
 * ppoll, so sub-millisecond timers do not round up to a millisecond. */
#define _GNU_SOURCE
#include <poll.h>
#include <stdint.h>
#include <time.h>

int weft_poll_ns(struct pollfd *fds, unsigned long n, int64_t ns)
{
    if (ns < 0)
        return ppoll(fds, n, NULL, NULL);
    struct timespec ts;
    ts.tv_sec = ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    return ppoll(fds, n, &ts, NULL);
}

/* Whether fd is readable (writing 0) or writable (writing 1) now, or has
 * an error or hang-up; 1 if the check itself fails, so that a failed check
 * never keeps a waiter (Note [Confirmed waits] in
 * Weft.Event.Internal.Registry). */
int weft_ready_now(int fd, int writing)
{
    struct pollfd p = { .fd = fd, .events = writing ? POLLOUT : POLLIN, .revents = 0 };
    return poll(&p, 1, 0) != 0;
}
