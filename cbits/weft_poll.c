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
