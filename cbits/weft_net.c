/* Socket syscalls for Weft.Net.
 *
 * Every call on an open socket goes through a guard block that the Haskell
 * side owns (a Weft.Internal.Counters array, passed to these unsafe calls
 * as a MutableByteArray#). Slot 0 counts syscalls in flight (2 each) and has
 * bit 0 set once the socket is closing; close waits for the count to drain
 * before it closes the fd, so no syscall here can ever hit a reused fd
 * number (Note [Socket close and fd reuse] in Weft.Net.Internal.Socket). Doing the
 * guard here, inside one unsafe call, keeps async exceptions out of the
 * window between taking the guard and releasing it.
 *
 * All functions return a non-negative result, or -errno.
 *
 * With WEFT_LINUX (set by weft.cabal on Linux) they use Linux's accept4,
 * SOCK_NONBLOCK, MSG_MORE, sendfile and recvmmsg; without it, the POSIX
 * equivalents (fcntl after accept and socket, a copy through a buffer for
 * sendfile, a loop of recvfrom), which is what another POSIX system gets.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#ifdef WEFT_LINUX
#include <sys/sendfile.h>
#endif

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif
#if !defined(WEFT_LINUX) || !defined(MSG_MORE)
#undef MSG_MORE
#define MSG_MORE 0
#endif

enum { G_USE = 0, G_ACTIVITY = 1, G_TRACK = 2, G_MIN_RECV = 4, G_RECV_ACC = 5, G_STATE = 6 };

/* What a tracked connection is doing, from its last syscalls (Note [What a
 * connection waits for] in Weft.Net.Internal.Socket). */
enum { ST_ANSWERED = 0, ST_RECEIVED = 1, ST_WAIT_NEXT = 2, ST_WAIT_MORE = 3, ST_WAIT_READER = 4 };

static inline void set_state(int64_t *g, int64_t st)
{
    if (__atomic_load_n(&g[G_STATE], __ATOMIC_RELAXED) != st)
        __atomic_store_n(&g[G_STATE], st, __ATOMIC_RELAXED);
}

/* A tracked connection's receive or send found nothing to do: it now waits
 * for its peer, for the next request, for more of the current one, or for
 * the peer to read. */
static inline void note_wait(int64_t *g, int received)
{
    if (__atomic_load_n(&g[G_TRACK], __ATOMIC_RELAXED)) {
        int64_t st = __atomic_load_n(&g[G_STATE], __ATOMIC_RELAXED);
        if (!received)
            set_state(g, ST_WAIT_READER);
        else
            set_state(g, st == ST_RECEIVED || st == ST_WAIT_MORE ? ST_WAIT_MORE : ST_WAIT_NEXT);
    }
}

void weft_net_note_wait(int64_t *g, int received)
{
    note_wait(g, received);
}

static inline int enter(int64_t *g)
{
    int64_t prev = __atomic_fetch_add(&g[G_USE], 2, __ATOMIC_ACQ_REL);
    if (prev & 1) {
        __atomic_fetch_sub(&g[G_USE], 2, __ATOMIC_RELEASE);
        return 0;
    }
    return 1;
}

static inline void stamp(int64_t *g)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    __atomic_store_n(&g[G_ACTIVITY], (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec,
                     __ATOMIC_RELAXED);
}

/* Progress (a positive result) is stamped for the idle timeout, if one is
 * set: one vDSO clock read, only for sockets that track idleness. A
 * receive counts only once the bytes received since the last stamp reach
 * the socket's minimum (G_MIN_RECV, 0 for none), so a peer that trickles
 * bytes cannot keep the timer from expiring (Note [Idle timeouts] in
 * Weft.Net.Internal.Socket). */
static inline void note_progress(int64_t *g, long r, int received)
{
    if (r > 0 && __atomic_load_n(&g[G_TRACK], __ATOMIC_RELAXED)) {
        set_state(g, received ? ST_RECEIVED : ST_ANSWERED);
        int64_t min = received ? __atomic_load_n(&g[G_MIN_RECV], __ATOMIC_RELAXED) : 0;
        if (min <= 0) {
            stamp(g);
        } else if (__atomic_add_fetch(&g[G_RECV_ACC], r, __ATOMIC_RELAXED) >= min) {
            __atomic_store_n(&g[G_RECV_ACC], 0, __ATOMIC_RELAXED);
            stamp(g);
        }
    }
}

/* The progress of r bytes a ring received or sent for the socket, as
 * the guarded calls note theirs. */
void weft_net_note_progress(int64_t *g, long r, int received)
{
    note_progress(g, r, received);
}

static inline void leave_as(int64_t *g, long r, int received)
{
    note_progress(g, r, received);
    if (r == -EAGAIN || r == -EWOULDBLOCK)
        note_wait(g, received);
    __atomic_fetch_sub(&g[G_USE], 2, __ATOMIC_RELEASE);
}

#define leave(g, r) leave_as((g), (r), 0)

#define GUARDED_AS(g, received, call)             \
    do {                                          \
        long r_;                                  \
        if (!enter(g)) return -EBADF;             \
        r_ = (long)(call);                        \
        if (r_ < 0) r_ = -errno;                  \
        leave_as(g, r_, received);                \
        return r_;                                \
    } while (0)

#define GUARDED(g, call) GUARDED_AS(g, 0, call)

long weft_net_recv(int64_t *g, int fd, void *buf, size_t len)
{
    GUARDED_AS(g, 1, recv(fd, buf, len, 0));
}

long weft_net_send(int64_t *g, int fd, const void *buf, size_t len)
{
    GUARDED(g, send(fd, buf, len, MSG_NOSIGNAL));
}

/* A gather write; sendmsg rather than writev so that a closed peer gives
 * EPIPE and never SIGPIPE. With more set, MSG_MORE tells TCP that more
 * data follows at once (a file after its header), so a partial segment is
 * held back for it instead of going out alone. */
long weft_net_sendv(int64_t *g, int fd, struct iovec *iov, int count, int more)
{
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)count;
    GUARDED(g, sendmsg(fd, &msg, MSG_NOSIGNAL | (more ? MSG_MORE : 0)));
}

/* One sendfile(2) of at most count bytes of file, from offset, to the
 * socket. The file is not guarded: its owner keeps it open for the call. */
#ifdef WEFT_LINUX
long weft_net_sendfile(int64_t *g, int fd, int file, int64_t offset, size_t count)
{
    off_t off = (off_t)offset;
    GUARDED(g, sendfile(fd, file, &off, count));
}
#else
/* Without sendfile: one pread into a buffer and one send of what was read
 * (the caller loops, as it does over sendfile's short writes). */
static long copy_file_chunk(int fd, int file, int64_t offset, size_t count)
{
    char buf[65536];
    ssize_t n = pread(file, buf, count < sizeof buf ? count : sizeof buf, (off_t)offset);
    if (n <= 0) return n;
    return send(fd, buf, (size_t)n, MSG_NOSIGNAL);
}

long weft_net_sendfile(int64_t *g, int fd, int file, int64_t offset, size_t count)
{
    GUARDED(g, copy_file_chunk(fd, file, offset, count));
}
#endif

/* Make a new fd non-blocking and close-on-exec; -errno (and the fd closed)
 * on failure. */
static int set_nonblock_cloexec(int fd)
{
    int fl;
    if (fd < 0) return fd;
    fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

long weft_net_accept(int64_t *g, int fd, struct sockaddr *addr, socklen_t *len)
{
#ifdef WEFT_LINUX
    GUARDED(g, accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC));
#else
    GUARDED(g, set_nonblock_cloexec(accept(fd, addr, len)));
#endif
}

long weft_net_connect(int64_t *g, int fd, const struct sockaddr *addr, socklen_t len)
{
    GUARDED(g, connect(fd, addr, len));
}

long weft_net_shutdown(int64_t *g, int fd, int how)
{
    GUARDED(g, shutdown(fd, how));
}

long weft_net_sendto(int64_t *g, int fd, const void *buf, size_t len,
                     const struct sockaddr *addr, socklen_t alen)
{
    GUARDED(g, sendto(fd, buf, len, MSG_NOSIGNAL, addr, alen));
}

long weft_net_recvfrom(int64_t *g, int fd, void *buf, size_t len,
                       struct sockaddr *addr, socklen_t *alen)
{
    GUARDED_AS(g, 1, recvfrom(fd, buf, len, 0, addr, alen));
}

/* Receive up to count datagrams with one recvmmsg (a loop of recvfrom
 * without WEFT_LINUX). Datagram i goes to bufs + i * size; its length to
 * lens[i]; its source to addrs + i * sizeof(struct sockaddr_storage).
 * Returns how many came. */
#define WEFT_MAX_BATCH 64
#ifdef WEFT_LINUX
long weft_net_recvmany(int64_t *g, int fd, char *bufs, int size, int count,
                       int *lens, char *addrs)
{
    struct mmsghdr msgs[WEFT_MAX_BATCH];
    struct iovec iovs[WEFT_MAX_BATCH];
    long r;
    int i;
    if (count > WEFT_MAX_BATCH) count = WEFT_MAX_BATCH;
    memset(msgs, 0, sizeof(struct mmsghdr) * (size_t)count);
    for (i = 0; i < count; i++) {
        iovs[i].iov_base = bufs + (size_t)i * (size_t)size;
        iovs[i].iov_len = (size_t)size;
        msgs[i].msg_hdr.msg_iov = &iovs[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_name = addrs + (size_t)i * sizeof(struct sockaddr_storage);
        msgs[i].msg_hdr.msg_namelen = sizeof(struct sockaddr_storage);
    }
    if (!enter(g)) return -EBADF;
    r = recvmmsg(fd, msgs, (unsigned)count, 0, NULL);
    if (r < 0) r = -errno;
    leave(g, r);
    for (i = 0; i < r; i++)
        lens[i] = (int)msgs[i].msg_len;
    return r;
}
#else
long weft_net_recvmany(int64_t *g, int fd, char *bufs, int size, int count,
                       int *lens, char *addrs)
{
    long r = 0;
    if (count > WEFT_MAX_BATCH) count = WEFT_MAX_BATCH;
    if (!enter(g)) return -EBADF;
    while (r < count) {
        socklen_t alen = sizeof(struct sockaddr_storage);
        ssize_t n = recvfrom(fd, bufs + (size_t)r * (size_t)size, (size_t)size, 0,
                             (struct sockaddr *)(addrs + (size_t)r * sizeof(struct sockaddr_storage)),
                             &alen);
        if (n < 0) {
            if (r == 0) r = -errno;
            break;
        }
        lens[r++] = (int)n;
    }
    leave(g, r);
    return r;
}
#endif

/* Opening and setting up sockets: no guard, the socket is not shared yet. */

long weft_net_socket(int family, int type)
{
#ifdef WEFT_LINUX
    int fd = socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
#else
    int fd = set_nonblock_cloexec(socket(family, type, 0));
#endif
    return fd < 0 ? -errno : fd;
}

long weft_net_bind(int fd, const struct sockaddr *addr, socklen_t len, int reuseport)
{
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) return -errno;
    if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
        return -errno;
    return bind(fd, addr, len) < 0 ? -errno : 0;
}

long weft_net_listen(int fd, int backlog)
{
    return listen(fd, backlog) < 0 ? -errno : 0;
}

long weft_net_set_nodelay(int fd, int on)
{
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) < 0 ? -errno : 0;
}

/* The outcome of a non-blocking connect: 0, or the pending error. */
long weft_net_socket_error(int fd)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) return -errno;
    return -err;
}

long weft_net_local_addr(int fd, struct sockaddr *addr, socklen_t *len)
{
    return getsockname(fd, addr, len) < 0 ? -errno : 0;
}

long weft_net_close(int fd)
{
    return close(fd) < 0 ? -errno : 0;
}

/* An fd held in reserve, so that a server out of fds can still accept a
 * client to refuse it (Note [Making room under fd pressure] in
 * Weft.Net.Internal.Serve). */
int weft_net_reserve_fd(void)
{
    return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* The soft limit on open files, or -1 if there is none. */
long weft_net_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return -1;
    return (long)rl.rlim_cur;
}
