/*
 * weft-ref-server: the C reference server for weft benchmarks (the
 * "SimpleServerC" design).
 *
 * The main thread blocks in accept4() and deals connections round-robin to
 * T worker threads.  Each worker owns an epoll instance, and connections are
 * registered edge-triggered and one-shot, so exactly one worker ever touches
 * a connection and no locking is needed.  Per connection the protocol is:
 * read exactly REQ_BYTES, answer exactly REPLY_BYTES, forever.  With --echo
 * every byte received is sent back instead.
 *
 * This is the baseline weft is compared against, so it deliberately follows
 * the classic design (recv until EAGAIN, re-arm with EPOLL_CTL_MOD) rather
 * than being clever.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_EVENTS  512
#define BACKLOG     4096
#define RX_BUF      (64 * 1024)
#define TX_BUF_MIN  (64 * 1024)
#define RECV_BUDGET 16    /* recvs per wake-up before yielding to other connections */
#define MAX_THREADS 1024

#define USAGE "usage: weft-ref-server PORT REQ_BYTES REPLY_BYTES [--threads T] [--echo]\n"

struct conn {
    int fd;
    size_t rx_partial;   /* bytes of the current, incomplete request */
    /* Fixed mode: reply bytes still owed and where in the reply they start.
     * Replies are identical, so a count is all the output state we need. */
    size_t owed, owed_off;
    /* Echo mode: bytes received but not yet sent back. */
    char *pend;
    size_t pend_len, pend_off, pend_cap;
};

struct worker {
    pthread_t tid;
    int epfd;
};

static size_t g_req, g_reply;
static int g_echo;
static char *g_replybuf;      /* the reply repeated, so one send() can carry many */
static size_t g_replybuf_len;

/* An HTTP-ish reply padded with 'x' to exactly REPLY bytes; just 'x'
 * when REPLY is too small to hold the header. */
static void build_reply(void)
{
    static const char fmt[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                              "Content-Length: %zu\r\n\r\n";
    size_t copies = g_reply >= TX_BUF_MIN ? 1 : (TX_BUF_MIN + g_reply - 1) / g_reply;
    g_replybuf_len = copies * g_reply;
    g_replybuf = malloc(g_replybuf_len + 1);
    if (!g_replybuf) {
        fputs("weft-ref-server: out of memory\n", stderr);
        exit(1);
    }
    memset(g_replybuf, 'x', g_reply);

    /* The header length depends on the digits of the body length, so
     * iterate to the fixed point (two rounds at most in practice). */
    size_t body = g_reply;
    for (int round = 0; round < 4; round++) {
        size_t hlen = (size_t)snprintf(NULL, 0, fmt, body);
        if (hlen > g_reply)
            break;
        if (hlen + body == g_reply) {
            snprintf(g_replybuf, hlen + 1, fmt, body);
            g_replybuf[hlen] = 'x';   /* overwrite snprintf's terminator */
            break;
        }
        body = g_reply - hlen;
    }
    for (size_t k = 1; k < copies; k++)
        memcpy(g_replybuf + k * g_reply, g_replybuf, g_reply);
}

static void close_conn(struct conn *c)
{
    close(c->fd);   /* also drops it from the worker's epoll set */
    free(c->pend);
    free(c);
}

/* Re-arm the one-shot registration.  MOD re-checks readiness, so if data
 * is already waiting the connection is queued again straight away. */
static int arm(struct worker *w, struct conn *c, unsigned events)
{
    struct epoll_event ev = { .events = events | EPOLLET | EPOLLONESHOT, .data.ptr = c };
    return epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static int has_pending(const struct conn *c)
{
    return g_echo ? c->pend_off < c->pend_len : c->owed > 0;
}

/* Send what is owed.  1: all sent, 0: socket full, -1: connection broken. */
static int flush_pending(struct conn *c)
{
    while (has_pending(c)) {
        const char *p;
        size_t len;
        if (g_echo) {
            p = c->pend + c->pend_off;
            len = c->pend_len - c->pend_off;
        } else {
            p = g_replybuf + c->owed_off;
            len = g_replybuf_len - c->owed_off;
            if (len > c->owed)
                len = c->owed;
        }
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        }
        if (g_echo) {
            c->pend_off += (size_t)n;
        } else {
            c->owed -= (size_t)n;
            c->owed_off = (c->owed_off + (size_t)n) % g_reply;
        }
    }
    c->pend_len = c->pend_off = 0;
    return 1;
}

/* Account for n received bytes and send what they call for.
 * Same return convention as flush_pending. */
static int consume(struct conn *c, const char *buf, size_t n)
{
    if (!g_echo) {
        size_t have = c->rx_partial + n;
        c->owed += have / g_req * g_reply;
        c->rx_partial = have % g_req;
        return flush_pending(c);
    }

    /* Echo: send straight from the receive buffer; only what the socket
     * refuses is copied aside.  (Reading stops while anything is pending,
     * so pend never holds more than one recv's worth.) */
    size_t off = 0;
    while (off < n) {
        ssize_t s = send(c->fd, buf + off, n - off, MSG_NOSIGNAL);
        if (s < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return -1;
        }
        off += (size_t)s;
    }
    if (off == n)
        return 1;
    size_t left = n - off;
    if (c->pend_cap < left) {
        char *p = realloc(c->pend, left);
        if (!p)
            return -1;
        c->pend = p;
        c->pend_cap = left;
    }
    memcpy(c->pend, buf + off, left);
    c->pend_len = left;
    c->pend_off = 0;
    return 0;
}

static void serve(struct worker *w, struct conn *c, char *buf)
{
    int r;
    /* Woken for EPOLLOUT: finish the backlog before reading more, which
     * also pushes back on a client that does not read its replies. */
    if (has_pending(c)) {
        if ((r = flush_pending(c)) < 0)
            goto dead;
        if (r == 0)
            goto want_out;
    }
    for (int i = 0; i < RECV_BUDGET; i++) {
        ssize_t n = recv(c->fd, buf, RX_BUF, 0);
        if (n > 0) {
            if ((r = consume(c, buf, (size_t)n)) < 0)
                goto dead;
            if (r == 0)
                goto want_out;
            continue;
        }
        if (n == 0)
            goto dead;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            break;
        if (errno != EINTR)
            goto dead;
    }
    /* Drained (or budget used up: MOD re-queues it behind the others). */
    if (arm(w, c, EPOLLIN) < 0)
        goto dead;
    return;
want_out:
    if (arm(w, c, EPOLLOUT) < 0)
        goto dead;
    return;
dead:
    close_conn(c);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char buf[RX_BUF];   /* per thread; contents only matter in echo mode */
    struct epoll_event evs[MAX_EVENTS];

    for (;;) {
        int n = epoll_wait(w->epfd, evs, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno != EINTR)
                perror("weft-ref-server: epoll_wait");
            continue;
        }
        for (int i = 0; i < n; i++)
            serve(w, evs[i].data.ptr, buf);
    }
    return NULL;
}

/* _exit is async-signal-safe and avoids the race between checking a flag
 * and blocking in accept(); there is nothing to flush or clean up. */
static void on_term(int sig)
{
    (void)sig;
    _exit(0);
}

static long parse_int(const char *what, const char *s, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "weft-ref-server: bad %s '%s' (want %ld..%ld)\n%s", what, s, min, max, USAGE);
        exit(2);
    }
    return v;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    const char *pos[3];
    int npos = 0, nthreads = 1;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--echo")) {
            g_echo = 1;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            nthreads = (int)parse_int("thread count", argv[++i], 1, MAX_THREADS);
        } else if (!strncmp(argv[i], "--threads=", 10)) {
            nthreads = (int)parse_int("thread count", argv[i] + 10, 1, MAX_THREADS);
        } else if (argv[i][0] != '-' && npos < 3) {
            pos[npos++] = argv[i];
        } else {
            fputs(USAGE, stderr);
            return 2;
        }
    }
    if (npos != 3) {
        fputs(USAGE, stderr);
        return 2;
    }
    int port = (int)parse_int("port", pos[0], 1, 65535);
    /* Echo mode ignores the sizes, so any number (even 0) is fine there. */
    g_req = (size_t)parse_int("REQ_BYTES", pos[1], !g_echo, 64 << 20);
    g_reply = (size_t)parse_int("REPLY_BYTES", pos[2], !g_echo, 64 << 20);
    if (!g_echo)
        build_reply();

    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = { .sa_handler = on_term };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    /* Idle-connection benchmarks hold tens of thousands of sockets. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) {
        perror("weft-ref-server: socket");
        return 1;
    }
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_ANY) };
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(lfd, BACKLOG) < 0) {
        fprintf(stderr, "weft-ref-server: cannot listen on port %d: %s\n", port, strerror(errno));
        return 1;
    }

    struct worker *workers = calloc((size_t)nthreads, sizeof *workers);
    if (!workers) {
        fputs("weft-ref-server: out of memory\n", stderr);
        return 1;
    }
    for (int t = 0; t < nthreads; t++) {
        workers[t].epfd = epoll_create1(EPOLL_CLOEXEC);
        if (workers[t].epfd < 0) {
            perror("weft-ref-server: epoll_create1");
            return 1;
        }
        int rc = pthread_create(&workers[t].tid, NULL, worker_main, &workers[t]);
        if (rc) {
            fprintf(stderr, "weft-ref-server: pthread_create: %s\n", strerror(rc));
            return 1;
        }
    }
    fprintf(stderr, "weft-ref-server: listening on %d\n", port);

    int next = 0, warned_fd_limit = 0, warned_other = 0;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            switch (errno) {
            case EINTR:
            case ECONNABORTED:
            case EPROTO:
                continue;
            case EMFILE:
            case ENFILE:
                /* Out of fds: back off so existing connections can close,
                 * rather than spinning or dying. */
                if (!warned_fd_limit++)
                    fprintf(stderr, "weft-ref-server: accept: %s (retrying; reported once)\n",
                            strerror(errno));
                sleep_ms(10);
                continue;
            default:
                if (!warned_other++)
                    fprintf(stderr, "weft-ref-server: accept: %s (retrying; reported once)\n",
                            strerror(errno));
                sleep_ms(10);
                continue;
            }
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        /* After this ADD the worker owns c; the main thread never touches it. */
        struct epoll_event ev = { .events = EPOLLIN | EPOLLET | EPOLLONESHOT, .data.ptr = c };
        if (epoll_ctl(workers[next].epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close_conn(c);
            continue;
        }
        next = (next + 1) % nthreads;
    }
}
