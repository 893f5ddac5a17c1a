/*
 * weft-uring-ref: a C SimpleServer on one io_uring, one thread, to measure
 * what the ring's own mechanisms cost and save, apart from weft's Haskell
 * side: single-shot against multishot receives into a provided-buffer
 * ring, and the ways completions are delivered.
 *
 * Per connection the protocol is weft-ref-server's: read exactly REQ_BYTES,
 * answer exactly REPLY_BYTES, forever. Every receive, send and accept is a
 * ring request; the loop submits and waits in one io_uring_enter.
 *
 *   --recv single      one receive request per receive (weft's way)
 *   --recv multishot   one receive request per connection while it lasts
 *   --taskrun plain | coop | defer
 *                      the ring's set-up: interrupts, COOP_TASKRUN |
 *                      TASKRUN_FLAG (weft's), or DEFER_TASKRUN |
 *                      SINGLE_ISSUER (needs this one thread to do all)
 *   --files plain | fixed
 *                      receives and sends name the socket by its fd, or
 *                      by its slot in the ring's registered file table
 *                      (registered at accept, removed at close: a system
 *                      call each)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define USAGE "usage: weft-uring-ref PORT REQ_BYTES REPLY_BYTES [--recv single|multishot] [--taskrun plain|coop|defer] [--files plain|fixed]\n"

#define ENTRIES   4096
#define NBUFS     1024
#define BUFSIZE   4096
#define BGID      1
#define MAX_FDS   (1 << 16)

enum { OP_ACCEPT = 1, OP_RECV = 2, OP_SEND = 3 };

struct conn {
    unsigned got;       /* bytes of the current request received */
    int armed;          /* a receive request is in flight */
    int sending;        /* a send request is in flight */
};

static struct io_uring ring;
static struct io_uring_buf_ring *bufring;
static char *bufs;
static struct conn *conns;
static char *reply;
static unsigned req_bytes, reply_bytes;
static int multishot;
static int fixed_files;
static int max_fd = MAX_FDS;   /* fds at or above are closed at accept */
static volatile sig_atomic_t stop;

static void on_signal(int sig) { (void) sig; stop = 1; }

static void die(const char *what, int err)
{
    fprintf(stderr, "weft-uring-ref: %s: %s\n", what, strerror(err));
    exit(1);
}

static struct io_uring_sqe *sqe_get(void)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    if (!sqe) {
        io_uring_submit(&ring);
        sqe = io_uring_get_sqe(&ring);
        if (!sqe) die("io_uring_get_sqe", EBUSY);
    }
    return sqe;
}

static uint64_t ud(int op, int fd) { return ((uint64_t) op << 32) | (uint32_t) fd; }

static void arm_accept(int lfd)
{
    struct io_uring_sqe *sqe = sqe_get();
    io_uring_prep_accept(sqe, lfd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, ud(OP_ACCEPT, lfd));
}

static void arm_recv(int fd)
{
    struct io_uring_sqe *sqe = sqe_get();
    if (multishot)
        io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
    else
        io_uring_prep_recv(sqe, fd, NULL, BUFSIZE, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT | (fixed_files ? IOSQE_FIXED_FILE : 0);
    sqe->buf_group = BGID;
    io_uring_sqe_set_data64(sqe, ud(OP_RECV, fd));
    conns[fd].armed = 1;
}

static void arm_send(int fd)
{
    struct io_uring_sqe *sqe = sqe_get();
    io_uring_prep_send(sqe, fd, reply, reply_bytes, MSG_NOSIGNAL);
    if (fixed_files) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, ud(OP_SEND, fd));
    conns[fd].sending = 1;
}

static void recycle(unsigned bid)
{
    io_uring_buf_ring_add(bufring, bufs + (size_t) bid * BUFSIZE, BUFSIZE, bid,
                          io_uring_buf_ring_mask(NBUFS), 0);
    io_uring_buf_ring_advance(bufring, 1);
}

/* The socket's slot in the registered file table is its fd number. */
static void set_slot(int fd, int file)
{
    int r = io_uring_register_files_update(&ring, (unsigned) fd, &file, 1);
    if (r < 0) die("io_uring_register_files_update", -r);
}

static void drop(int fd)
{
    memset(&conns[fd], 0, sizeof conns[fd]);
    if (fixed_files) set_slot(fd, -1);
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc < 4) { fputs(USAGE, stderr); return 2; }
    int port = atoi(argv[1]);
    req_bytes = (unsigned) atoi(argv[2]);
    reply_bytes = (unsigned) atoi(argv[3]);
    unsigned flags = IORING_SETUP_SUBMIT_ALL;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--recv"))
            multishot = !strcmp(argv[i + 1], "multishot");
        else if (!strcmp(argv[i], "--taskrun") && !strcmp(argv[i + 1], "coop"))
            flags |= IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
        else if (!strcmp(argv[i], "--taskrun") && !strcmp(argv[i + 1], "defer"))
            flags |= IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SINGLE_ISSUER;
        else if (!strcmp(argv[i], "--files"))
            fixed_files = !strcmp(argv[i + 1], "fixed");
        else if (strcmp(argv[i], "--taskrun")) { fputs(USAGE, stderr); return 2; }
    }
    if (req_bytes == 0 || req_bytes > BUFSIZE) { fputs("weft-uring-ref: REQ_BYTES must be 1..4096\n", stderr); return 2; }

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < (rlim_t) max_fd) max_fd = (int) rl.rlim_cur;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);

    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = flags;
    int r = io_uring_queue_init_params(ENTRIES, &ring, &p);
    if (r < 0) die("io_uring_queue_init_params", -r);

    if (posix_memalign((void **) &bufring, 4096, NBUFS * sizeof(struct io_uring_buf))) die("memory", ENOMEM);
    if (posix_memalign((void **) &bufs, 4096, (size_t) NBUFS * BUFSIZE)) die("memory", ENOMEM);
    struct io_uring_buf_reg reg;
    memset(&reg, 0, sizeof reg);
    reg.ring_addr = (uint64_t) (uintptr_t) bufring;
    reg.ring_entries = NBUFS;
    reg.bgid = BGID;
    if ((r = io_uring_register_buf_ring(&ring, &reg, 0)) < 0) die("io_uring_register_buf_ring", -r);
    io_uring_buf_ring_init(bufring);
    for (unsigned i = 0; i < NBUFS; i++)
        io_uring_buf_ring_add(bufring, bufs + (size_t) i * BUFSIZE, BUFSIZE, i, io_uring_buf_ring_mask(NBUFS), i);
    io_uring_buf_ring_advance(bufring, NBUFS);

    if (fixed_files && (r = io_uring_register_files_sparse(&ring, (unsigned) max_fd)) < 0)
        die("io_uring_register_files_sparse", -r);
    conns = calloc(MAX_FDS, sizeof *conns);
    reply = malloc(reply_bytes ? reply_bytes : 1);
    if (!conns || !reply) die("memory", ENOMEM);
    memset(reply, 'x', reply_bytes);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t) port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *) &a, sizeof a) < 0) die("bind", errno);
    if (listen(lfd, 4096) < 0) die("listen", errno);
    fprintf(stderr, "weft-uring-ref: port %d, %s receives, taskrun flags 0x%x, %s files\n",
            port, multishot ? "multishot" : "single-shot", flags, fixed_files ? "registered" : "plain");
    arm_accept(lfd);

    while (!stop) {
        r = io_uring_submit_and_wait(&ring, 1);
        if (r < 0 && r != -EINTR && r != -ETIME) die("io_uring_submit_and_wait", -r);
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            seen++;
            int op = (int) (cqe->user_data >> 32);
            int fd = (int) (uint32_t) cqe->user_data;
            int res = cqe->res;
            if (op == OP_ACCEPT) {
                if (res >= 0 && res < max_fd) {
                    setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    if (fixed_files) set_slot(res, res);
                    arm_recv(res);
                } else if (res >= 0) {
                    close(res);
                }
                arm_accept(lfd);
            } else if (op == OP_RECV) {
                int more = multishot && (cqe->flags & IORING_CQE_F_MORE);
                if (!more) conns[fd].armed = 0;
                if (cqe->flags & IORING_CQE_F_BUFFER)
                    recycle(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
                if (res == -ENOBUFS) {
                    if (!more) arm_recv(fd);
                } else if (res <= 0) {
                    if (!conns[fd].sending && !more) drop(fd);
                } else {
                    conns[fd].got += (unsigned) res;
                    if (conns[fd].got >= req_bytes) {
                        conns[fd].got -= req_bytes;
                        arm_send(fd);
                    } else if (!more) {
                        arm_recv(fd);
                    }
                }
            } else if (op == OP_SEND) {
                conns[fd].sending = 0;
                if (res < 0) {
                    if (!conns[fd].armed) drop(fd);
                } else if (!conns[fd].armed) {
                    arm_recv(fd);
                }
            }
        }
        io_uring_cq_advance(&ring, seen);
    }
    io_uring_queue_exit(&ring);
    return 0;
}
