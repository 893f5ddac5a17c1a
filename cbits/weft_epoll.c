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
