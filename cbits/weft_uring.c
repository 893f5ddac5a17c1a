/* weft's io_uring ring: readiness through poll requests.
 *
 * The ring itself comes from liburing (Debian's liburing-dev): its set-up,
 * mmaps and memory barriers are the part of io_uring that is easy to get
 * subtly wrong, and liburing is the kernel developers' own reference for
 * them. What weft decides (which requests, when they are submitted, what a
 * completion means) is here and in Weft.Event.Internal.Backend.Uring.
 *
 * One ring per manager. Every operation on it takes the ring's mutex,
 * except the blocking wait, which takes it only to reap and to flush the
 * submission queue: arms come from any capability's OS thread.
 *
 * A poll request's user_data is a generation (31 bits, fresh for every
 * arm) above the fd. The ring remembers, per fd, the user_data of the
 * request now armed, the arm's tag (Registry's slot tag, reported with its
 * events as the epoll backend reports its event data) and how it was
 * armed, so that it can remove it, re-arm a level-triggered interest after
 * each report, and resubmit a request the kernel cancelled because the OS
 * thread that submitted it exited (see Note [Submitting threads] in the
 * Haskell module). The generation is what tells these apart: a request
 * weft removed completes with -ECANCELED too, and if a re-arm with the
 * same tag had reused its user_data, that completion would look like a
 * thread's exit, and be resubmitted beside the new request.
 * User data with the top bit set is the ring's own: the wakeup read, and
 * removals whose completions nobody needs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <liburing.h>

#define UD_OWN     (1ULL << 63)
#define UD_IGNORE  (UD_OWN | 0)
#define UD_WAKE    (UD_OWN | 1)
/* A receive, accept or send request: UD_OP, the request's id (30 bits, chosen by
 * the Haskell side, which reuses an id only after 2^29 newer requests of
 * its kind; ID_SEND marks a send's or a connect's) and the fd. */
#define UD_OP      (UD_OWN | (1ULL << 62))
#define OP_UD(fd, id) (UD_OP | ((uint64_t) ((id) & 0x3fffffff) << 32) | (uint32_t) (fd))
#define ID_SEND    (1u << 29)

/* Marks a report a waiter must not confirm by polling the fd (evtTaken in
 * Haskell, Note [Confirmed waits]): one the ring makes for bytes its own
 * receive took, or a readiness report on an fd whose receives or accepts
 * on the ring may have taken what was reported. */
#define REPORT_TAKEN 0x40000000u

/* The provided-buffer ring receives complete into: group 0. */
#define BUF_GROUP  0

enum { MODE_ONCE = 0, MODE_LEVEL = 1, MODE_EDGE = 2 };

struct watch {
    uint64_t ud;       /* the armed request's user_data; 0: none */
    uint32_t tag;      /* the arm's tag */
    uint32_t mask;     /* its poll mask */
    uint32_t mode;     /* MODE_* */
    uint32_t takers;   /* the fd's receives and accepts queued or in flight */
    uint32_t took;     /* one of them took something since the last arm */
};

struct weft_uring {
    struct io_uring ring;
    pthread_mutex_t lock;
    struct watch *watches;
    size_t nwatches;
    int wakefd;
    uint64_t wakebuf;
    int wake_armed;          /* a read of wakefd is in the ring */
    int woken;               /* a wakeup was reaped since the last poll returned */
    long interest_changes;   /* poll adds and removes queued */
    long resubmits;          /* requests resubmitted after a thread exit */
    long enters;             /* io_uring_enter calls */
    int coop;                /* set up with COOP_TASKRUN | TASKRUN_FLAG */
    uint32_t generation;     /* of the last arm */
    struct io_uring_buf_ring *bufring;   /* NULL: no completion I/O */
    char *bufs;
    unsigned nbufs, bufsize;
};

/* The reaped events handed to Haskell: a poll's fd, tag and revents; or,
 * with the top bit of tag set, a completion: the id's low 32 bits in fd,
 * its high bits in tag, the result in revents and the CQE's flags in pad. */
struct weft_uring_event {
    uint32_t fd;
    uint32_t tag;
    uint32_t revents;
    uint32_t pad;
};

/* Test hooks: a nonzero errno makes every ring set-up fail with it;
 * another makes the cooperative set-up fail with it (EINVAL: as a kernel
 * before 5.19 does). */
int weft_uring_fail_setup = 0;
int weft_uring_refuse_coop = 0;
/* Test hook: the next arm of this fd (-1: none) is followed by a report of
 * its mask that the kernel did not make, as the kernel makes one for a
 * waker whose readiness a reader took meanwhile (Note [Stale readiness on
 * a ring] in the Haskell module): a no-op completion whose result is
 * injected, under the arm's user_data. Kernels before 6.11 post 0
 * instead, which reports nothing. */
int weft_uring_inject_fd = -1;

struct weft_uring *weft_uring_open(unsigned entries, int *err)
{
    if (weft_uring_fail_setup) {
        *err = weft_uring_fail_setup;
        return NULL;
    }
    struct weft_uring *u = calloc(1, sizeof *u);
    if (!u) { *err = ENOMEM; return NULL; }
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL;
    p.cq_entries = entries * 4;
    /* Completions run when this ring's threads enter the kernel, instead
     * of interrupting them (Note [Completions without interrupts] in
     * Weft.Event.Internal.Backend.Uring); kernels before 5.19 refuse the
     * flags (EINVAL), and get a ring without them. */
    struct io_uring_params q = p;
    q.flags |= IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
    int r = weft_uring_refuse_coop ? -weft_uring_refuse_coop
                                   : io_uring_queue_init_params(entries, &u->ring, &q);
    if (r == 0) u->coop = (u->ring.flags & IORING_SETUP_COOP_TASKRUN) != 0;
    if (r == -EINVAL)
        r = io_uring_queue_init_params(entries, &u->ring, &p);
    if (r < 0) { free(u); *err = -r; return NULL; }
    /* Blocking: a ring's read of a non-blocking file fails with EAGAIN
     * instead of waiting for data. */
    u->wakefd = eventfd(0, EFD_CLOEXEC);
    if (u->wakefd < 0) {
        *err = errno;
        io_uring_queue_exit(&u->ring);
        free(u);
        return NULL;
    }
    pthread_mutex_init(&u->lock, NULL);
    return u;
}

void weft_uring_close(struct weft_uring *u)
{
    if (u->bufring) {
        io_uring_unregister_buf_ring(&u->ring, BUF_GROUP);
        free(u->bufring);
        free(u->bufs);
    }
    io_uring_queue_exit(&u->ring);
    close(u->wakefd);
    pthread_mutex_destroy(&u->lock);
    free(u->watches);
    free(u);
}

/* Submit what is queued. Lock held. */
static int submit(struct weft_uring *u)
{
    if (io_uring_sq_ready(&u->ring) == 0)
        return 0;
    u->enters++;
    int r = io_uring_submit(&u->ring);
    return r < 0 ? r : 0;
}

/* A free submission entry, submitting what is queued if the queue is
 * full. Lock held. NULL only if the kernel takes none (then -errno in *err). */
static struct io_uring_sqe *get_sqe(struct weft_uring *u)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) {
        submit(u);
        sqe = io_uring_get_sqe(&u->ring);
    }
    return sqe;
}

static struct watch *watch_of(struct weft_uring *u, int fd, int grow)
{
    if ((size_t) fd >= u->nwatches) {
        if (!grow)
            return NULL;
        size_t n = u->nwatches ? u->nwatches : 1024;
        while (n <= (size_t) fd) n *= 2;
        struct watch *w = realloc(u->watches, n * sizeof *w);
        if (!w) return NULL;
        memset(w + u->nwatches, 0, (n - u->nwatches) * sizeof *w);
        u->watches = w;
        u->nwatches = n;
    }
    return &u->watches[fd];
}

/* Queue the poll request of a watch. Lock held. */
static int queue_poll(struct weft_uring *u, int fd, struct watch *w)
{
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe) return -EBUSY;
    if (w->mode == MODE_EDGE)
        io_uring_prep_poll_multishot(sqe, fd, w->mask);
    else
        io_uring_prep_poll_add(sqe, fd, w->mask);
    io_uring_sqe_set_data64(sqe, w->ud);
    u->interest_changes++;
    return 0;
}

/* Queue the removal of the watch's request, if any. Lock held.
 *
 * An async cancel, not a poll remove: a poll remove fails with -EALREADY
 * when it finds the request in the middle of reporting an event (its
 * wakeup owns it), and the request lives on. A multishot request then
 * never ends, and it holds its file: a socket closed through weft would
 * stay open, and its peer would never see the close. A cancel marks the
 * request cancelled whatever it is doing. */
static int queue_remove(struct weft_uring *u, struct watch *w)
{
    if (!w->ud) return 0;
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe) return -EBUSY;
    io_uring_prep_cancel64(sqe, w->ud, 0);
    io_uring_sqe_set_data64(sqe, UD_IGNORE);
    sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
    w->ud = 0;
    u->interest_changes++;
    return 1;
}

static int queue_wake_read(struct weft_uring *u)
{
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe) return -EBUSY;
    io_uring_prep_read(sqe, u->wakefd, &u->wakebuf, sizeof u->wakebuf, 0);
    io_uring_sqe_set_data64(sqe, UD_WAKE);
    u->wake_armed = 1;
    return 0;
}

/* Arm fd for mask (poll bits; 0 disarms) in the given mode, reporting tag.
 * The request is queued, and submitted by the next poll (the caller wakes
 * a blocked one). An fd weft does not yet know is checked first, so that
 * a bad fd fails the arm at once, as with epoll. Returns 0 or -errno. */
int weft_uring_arm(struct weft_uring *u, int fd, uint32_t tag, uint32_t mask,
                   int mode, int known)
{
    if (!known && fcntl(fd, F_GETFD) < 0)
        return -errno;
    pthread_mutex_lock(&u->lock);
    int r = 0;
    struct watch *w = watch_of(u, fd, 1);
    if (!w) { r = -ENOMEM; goto out; }
    if ((r = queue_remove(u, w)) < 0) goto out;
    r = 0;
    if (mask) {
        w->took = 0;
        u->generation = (u->generation + 1) & 0x7fffffff;
        if (u->generation == 0) u->generation = 1;
        w->ud = ((uint64_t) u->generation << 32) | (uint32_t) fd;
        w->tag = tag;
        w->mask = mask;
        w->mode = mode;
        r = queue_poll(u, fd, w);
        if (r < 0) w->ud = 0;
        else if (fd == weft_uring_inject_fd) {
            struct io_uring_sqe *sqe = get_sqe(u);
            weft_uring_inject_fd = -1;
            if (sqe) {
                io_uring_prep_nop(sqe);
                sqe->rw_flags = 1;       /* IORING_NOP_INJECT_RESULT */
                sqe->len = mask;
                io_uring_sqe_set_data64(sqe, w->ud);
            }
        }
    }
out:
    pthread_mutex_unlock(&u->lock);
    return r;
}

/* Remove fd's request and submit the removal now: the request holds a
 * reference to the file, so a close that follows would otherwise not close
 * the socket until the next poll. */
void weft_uring_forget(struct weft_uring *u, int fd)
{
    pthread_mutex_lock(&u->lock);
    struct watch *w = watch_of(u, fd, 0);
    if (w && queue_remove(u, w) > 0)
        submit(u);
    pthread_mutex_unlock(&u->lock);
}

int weft_uring_wake(struct weft_uring *u)
{
    uint64_t one = 1;
    return write(u->wakefd, &one, sizeof one) < 0 ? -errno : 0;
}

/* Register nbufs buffers of bufsize bytes (nbufs a power of two) for
 * receives. Returns 0 or -errno (then receives go through readiness). */
int weft_uring_setup_buffers(struct weft_uring *u, unsigned nbufs, unsigned bufsize)
{
    void *ring_mem, *bufs;
    size_t ring_size = nbufs * sizeof(struct io_uring_buf);
    if (posix_memalign(&ring_mem, 4096, ring_size)) return -ENOMEM;
    if (posix_memalign(&bufs, 4096, (size_t) nbufs * bufsize)) { free(ring_mem); return -ENOMEM; }
    memset(ring_mem, 0, ring_size);
    struct io_uring_buf_reg reg;
    memset(&reg, 0, sizeof reg);
    reg.ring_addr = (uint64_t) (uintptr_t) ring_mem;
    reg.ring_entries = nbufs;
    reg.bgid = BUF_GROUP;
    int r = io_uring_register_buf_ring(&u->ring, &reg, 0);
    if (r < 0) { free(ring_mem); free(bufs); return r; }
    u->bufring = ring_mem;
    u->bufs = bufs;
    u->nbufs = nbufs;
    u->bufsize = bufsize;
    io_uring_buf_ring_init(u->bufring);
    for (unsigned i = 0; i < nbufs; i++)
        io_uring_buf_ring_add(u->bufring, u->bufs + (size_t) i * bufsize, bufsize, i,
                              io_uring_buf_ring_mask(nbufs), i);
    io_uring_buf_ring_advance(u->bufring, nbufs);
    return 0;
}

/* Start queuing a request: takes the ring's lock, held until finish_op;
 * NULL if the submission queue is full. */
static struct io_uring_sqe *start_op(struct weft_uring *u)
{
    pthread_mutex_lock(&u->lock);
    return get_sqe(u);
}

/* Finish queuing a request (its user_data ud) and release the lock;
 * -EBUSY if there was no room. */
static int finish_op(struct weft_uring *u, struct io_uring_sqe *sqe, uint64_t ud)
{
    if (sqe)
        io_uring_sqe_set_data64(sqe, ud);
    pthread_mutex_unlock(&u->lock);
    return sqe ? 0 : -EBUSY;
}

/* Count a receive or accept queued on fd, until its completion is reaped.
 * Lock held. (Without room for the count, reports on fd go unmarked.) */
static void count_taker(struct weft_uring *u, int fd)
{
    struct watch *w = watch_of(u, fd, 1);
    if (w) w->takers++;
}

/* Queue a receive of at most len bytes into a provided buffer. It is
 * tried at submission (weft's receives go to the ring first), and polls
 * only if nothing has come. */
int weft_uring_recv(struct weft_uring *u, int fd, uint64_t id, unsigned len)
{
    struct io_uring_sqe *sqe = start_op(u);
    if (sqe) {
        io_uring_prep_recv(sqe, fd, NULL, len < u->bufsize ? len : u->bufsize, 0);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = BUF_GROUP;
        count_taker(u, fd);
    }
    return finish_op(u, sqe, OP_UD(fd, id));
}

/* Queue a send of len bytes at buf (which must stay valid until the
 * completion); with poll_first, only once the socket is writable (the
 * caller's own send just said EAGAIN). */
int weft_uring_send(struct weft_uring *u, int fd, uint64_t id, const void *buf, unsigned len,
                    int more, int poll_first)
{
    struct io_uring_sqe *sqe = start_op(u);
    if (sqe) {
        io_uring_prep_send(sqe, fd, buf, len, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
        if (poll_first)
            sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
    }
    return finish_op(u, sqe, OP_UD(fd, id | ID_SEND));
}

/* Queue a gather send (msg, its iovecs and their bytes must stay valid
 * until the completion); poll_first as for weft_uring_send. */
int weft_uring_sendmsg(struct weft_uring *u, int fd, uint64_t id, const struct msghdr *msg,
                       int more, int poll_first)
{
    struct io_uring_sqe *sqe = start_op(u);
    if (sqe) {
        io_uring_prep_sendmsg(sqe, fd, msg, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
        if (poll_first)
            sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
    }
    return finish_op(u, sqe, OP_UD(fd, id | ID_SEND));
}

/* Queue an accept on listener fd; the peer's address goes to addr, its
 * length to *len (both must stay valid until the completion). */
int weft_uring_accept(struct weft_uring *u, int fd, uint64_t id, struct sockaddr *addr,
                      socklen_t *len)
{
    struct io_uring_sqe *sqe = start_op(u);
    if (sqe) {
        io_uring_prep_accept(sqe, fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        count_taker(u, fd);
    }
    return finish_op(u, sqe, OP_UD(fd, id));
}

/* Queue a connect of fd to the address of len bytes at addr (which must
 * stay valid until the completion). */
int weft_uring_connect(struct weft_uring *u, int fd, uint64_t id, const struct sockaddr *addr,
                       socklen_t len)
{
    struct io_uring_sqe *sqe = start_op(u);
    if (sqe)
        io_uring_prep_connect(sqe, fd, addr, len);
    return finish_op(u, sqe, OP_UD(fd, id | ID_SEND));
}

/* Queue the cancellation of a completion request. */
int weft_uring_cancel(struct weft_uring *u, int fd, uint64_t id)
{
    struct io_uring_sqe *sqe = start_op(u);
    if (sqe) {
        io_uring_prep_cancel64(sqe, OP_UD(fd, id), 0);
        sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
    }
    return finish_op(u, sqe, UD_IGNORE);
}

/* Where provided buffer bid is. */
char *weft_uring_buffer(struct weft_uring *u, unsigned bid)
{
    return u->bufs + (size_t) bid * u->bufsize;
}

/* Give buffer bid back to the kernel. Only the dispatcher calls this, one
 * poll at a time (it hands out the completions that carry buffers), and the
 * buffer ring is shared with the kernel alone, not with the submission
 * queue: no lock. */
void weft_uring_recycle(struct weft_uring *u, unsigned bid)
{
    io_uring_buf_ring_add(u->bufring, weft_uring_buffer(u, bid), u->bufsize, bid,
                          io_uring_buf_ring_mask(u->nbufs), 0);
    io_uring_buf_ring_advance(u->bufring, 1);
}

/* Handle the completions in the queue, at most max of them delivered.
 * Lock held. */
static int reap(struct weft_uring *u, struct weft_uring_event *out, int max)
{
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    int n = 0;
    io_uring_for_each_cqe(&u->ring, head, cqe) {
        if (n + 2 > max) break;
        seen++;
        uint64_t ud = cqe->user_data;
        int32_t res = cqe->res;
        if ((ud & UD_OP) == UD_OP) {
            int fd = (int) (uint32_t) ud;
            out[n].fd = (uint32_t) fd;
            out[n].tag = 0x80000000u | (uint32_t) ((ud >> 32) & 0x3fffffff);
            out[n].revents = (uint32_t) res;
            out[n].pad = cqe->flags;
            n++;
            /* A readiness wait on the same fd would race the receive for
             * its bytes and might never see them: tell it what came. (A
             * send consumes nothing a writer waits for.) */
            struct watch *w = (ud >> 32) & ID_SEND ? NULL : watch_of(u, fd, 0);
            if (w) {
                if (w->takers) w->takers--;
                if (res > 0) w->took = 1;
            }
            if (w && w->ud && res != -ECANCELED && res != -ENOBUFS) {
                out[n].fd = (uint32_t) fd;
                out[n].tag = w->tag;
                out[n].revents = REPORT_TAKEN
                                 | (res > 0 ? POLLIN : res == 0 ? (POLLIN | POLLRDHUP) : POLLERR);
                out[n].pad = 0;
                n++;
                if (w->mode == MODE_ONCE)
                    queue_remove(u, w);
            }
            continue;
        }
        if (ud & UD_OWN) {
            if (ud == UD_WAKE) {
                u->woken = 1;
                queue_wake_read(u);
            }
            continue;
        }
        int fd = (int) (uint32_t) ud;
        struct watch *w = watch_of(u, fd, 0);
        if (!w || w->ud != ud)
            continue;                     /* removed or re-armed since */
        if (res == -ECANCELED) {
            /* Not ours (a request weft removed or replaced no longer
             * has the watch's user_data): the submitting thread exited. */
            u->resubmits++;
            queue_poll(u, fd, w);
            continue;
        }
        out[n].fd = (uint32_t) fd;
        out[n].tag = w->tag;
        out[n].revents = res < 0 ? POLLERR
                       : (uint32_t) res | (w->takers || w->took ? REPORT_TAKEN : 0);
        out[n].pad = 0;
        n++;
        if (res < 0 || w->mode == MODE_ONCE)
            w->ud = 0;
        else if (w->mode == MODE_LEVEL || !(cqe->flags & IORING_CQE_F_MORE))
            queue_poll(u, fd, w);
    }
    io_uring_cq_advance(&u->ring, seen);
    return n;
}

/* Flush the submission queue to the kernel without entering it; returns
 * how many entries the next io_uring_enter should submit. Lock held. */
static unsigned flush_sq(struct weft_uring *u)
{
    struct io_uring_sq *sq = &u->ring.sq;
    unsigned tail = sq->sqe_tail;
    if (sq->sqe_head != tail) {
        sq->sqe_head = tail;
        io_uring_smp_store_release(sq->ktail, tail);
    }
    return tail - *sq->khead;
}

/* Poll: reap up to max events into out. ns == 0 returns at once (an
 * unsafe call); ns > 0 waits at most ns nanoseconds, ns < 0 until an event
 * or a wakeup (safe calls). Queued requests are submitted either way, in
 * the same io_uring_enter as the wait. Returns the count, or -errno. */
int weft_uring_poll(struct weft_uring *u, struct weft_uring_event *out, int max,
                    int64_t ns)
{
    pthread_mutex_lock(&u->lock);
    if (!u->wake_armed) queue_wake_read(u);
    /* Completions wait as task work (TASKRUN): entering the kernel runs
     * this thread's, or else a dispatcher that polls without system calls
     * would not see them until it blocks. Another submitting thread's
     * stay until that thread enters the kernel (at most a timer tick for
     * a running one), so a few enters may find nothing meanwhile. */
    if (io_uring_cq_has_overflow(&u->ring)
        || (u->coop && (IO_URING_READ_ONCE(*u->ring.sq.kflags) & IORING_SQ_TASKRUN))) {
        u->enters++;
        io_uring_get_events(&u->ring);
    }
    int n = reap(u, out, max);
    if (n > 0 || ns == 0 || u->woken) {
        /* A wakeup reaped here was meant for this poll (the manager wakes
         * only a dispatcher on its way to block): do not block. */
        u->woken = 0;
        int r = submit(u);
        pthread_mutex_unlock(&u->lock);
        return n > 0 ? n : r;
    }
    unsigned to_submit = flush_sq(u);
    u->enters++;
    pthread_mutex_unlock(&u->lock);

    struct __kernel_timespec ts;
    struct io_uring_getevents_arg arg;
    memset(&arg, 0, sizeof arg);
    arg.sigmask_sz = _NSIG / 8;
    if (ns > 0) {
        ts.tv_sec = ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        arg.ts = (uint64_t) (uintptr_t) &ts;
    }
    int r = syscall(__NR_io_uring_enter, u->ring.ring_fd, to_submit, 1,
                    IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, &arg, sizeof arg);
    int err = r < 0 ? errno : 0;

    pthread_mutex_lock(&u->lock);
    n = reap(u, out, max);
    u->woken = 0;
    int r2 = submit(u);
    pthread_mutex_unlock(&u->lock);
    if (n > 0) return n;
    if (err && err != ETIME && err != EINTR && err != EBUSY) return -err;
    return r2 < 0 ? r2 : 0;
}

long weft_uring_interest_changes(struct weft_uring *u)
{
    pthread_mutex_lock(&u->lock);
    long n = u->interest_changes;
    pthread_mutex_unlock(&u->lock);
    return n;
}

long weft_uring_resubmits(struct weft_uring *u)
{
    pthread_mutex_lock(&u->lock);
    long n = u->resubmits;
    pthread_mutex_unlock(&u->lock);
    return n;
}

int weft_uring_cooperative(struct weft_uring *u)
{
    return u->coop;
}

long weft_uring_enters(struct weft_uring *u)
{
    pthread_mutex_lock(&u->lock);
    long n = u->enters;
    pthread_mutex_unlock(&u->lock);
    return n;
}
