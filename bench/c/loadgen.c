/*
 * weft-loadgen: fixed-length request/response load generator.
 *
 * Each connection sends REQ-byte requests and expects exactly REPLY bytes
 * back per request, in order.  That is all the SimpleServer protocol and an
 * echo server (REQ == REPLY) need, so the generator never parses anything:
 * it only counts bytes, which keeps its own per-request cost tiny.
 *
 * Single-threaded on purpose: one core is pinned to the generator and the
 * other to the server under test, so a second generator thread would only
 * compete with the server.
 *
 * Output: one key=value line on stdout (see print_result); diagnostics go to
 * stderr.  Exit status: 0 if any request completed in the measured window,
 * 2 on usage/setup/connect errors, 3 if nothing completed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The classic weighttp request, so REQ=90 runs are comparable with the
 * published SimpleServer numbers that used weighttp. */
#define HTTP_REQ "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n" \
                 "User-Agent: weighttp/0.3\r\nConnection: keep-alive\r\n\r\n"
_Static_assert(sizeof(HTTP_REQ) - 1 == 90, "canned request must be 90 bytes");

#define MAX_EVENTS      1024
#define CONNECT_WINDOW  256          /* connects in flight; stays well under the server backlog */
#define RX_BUF          (64 * 1024)
#define TX_BUF_MIN      (64 * 1024)
#define DISPATCH_BUDGET 1024         /* open loop: sends per iteration before servicing epoll */
#define NS_PER_MS       1000000ull
#define NS_PER_S        1000000000ull
#define MAX_ERR_REPORTS 5

#define USAGE \
    "usage: weft-loadgen HOST PORT [--conns N] [--req BYTES] [--reply BYTES]\n" \
    "                    [--duration SECS] [--warmup SECS] [--rate REQ_PER_SEC]\n" \
    "                    [--idle N] [--src-addrs K] [--cdf FILE] [--connect-timeout SECS]\n" \
    "defaults: --conns 1 --req 90 --reply 323 --duration 5 --warmup 1 --rate 0 (closed loop)\n" \
    "          --idle 0 --src-addrs 1 --connect-timeout 5\n"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("weft-loadgen: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        fatal("out of memory");
    return p;
}

/* ------------------------------------------------------------------------ */
/* Latency histogram (nanoseconds), log-linear like HdrHistogram.
 *
 * Values below 2*SUB are stored exactly.  Above that, every power of two
 * [2^k, 2^(k+1)) is split into SUB equal buckets, so a bucket is at most
 * 1/SUB = 0.78% of its lower bound wide: under the 1% error budget while
 * the whole 0..100 s range still fits in ~4k counters (32 KiB). */

#define SUB_BITS    7
#define SUB         (1u << SUB_BITS)
#define HIST_MAX_NS (100 * NS_PER_S)

struct hist {
    uint64_t *counts;
    unsigned nbuckets;
    uint64_t total, sum_ns, min_ns, max_ns;
};

static unsigned bucket_of(uint64_t v)
{
    if (v < 2 * SUB)
        return (unsigned)v;
    int shift = 63 - __builtin_clzll(v) - SUB_BITS;
    return (unsigned)(shift + 1) * SUB + (unsigned)((v >> shift) - SUB);
}

static uint64_t bucket_lo(unsigned b)
{
    if (b < 2 * SUB)
        return b;
    unsigned shift = b / SUB - 1;
    return (uint64_t)(SUB + b % SUB) << shift;
}

static uint64_t bucket_hi(unsigned b)
{
    return bucket_lo(b + 1) - 1;
}

static void hist_init(struct hist *h)
{
    h->nbuckets = bucket_of(HIST_MAX_NS) + 1;
    h->counts = calloc(h->nbuckets, sizeof *h->counts);
    if (!h->counts)
        fatal("out of memory");
    h->total = h->sum_ns = h->max_ns = 0;
    h->min_ns = UINT64_MAX;
}

static void hist_record(struct hist *h, uint64_t v)
{
    h->total++;
    h->sum_ns += v;
    if (v < h->min_ns)
        h->min_ns = v;
    if (v > h->max_ns)
        h->max_ns = v;
    h->counts[bucket_of(v > HIST_MAX_NS ? HIST_MAX_NS : v)]++;
}

/* Value at quantile q: the bucket holding the ceil(q*total)-th sample,
 * reported as its midpoint (halves the quantisation error) but never
 * outside the exactly tracked min/max. */
static uint64_t hist_quantile(const struct hist *h, double q)
{
    if (h->total == 0)
        return 0;
    double want = q * (double)h->total;
    uint64_t rank = (uint64_t)want;
    if ((double)rank < want || rank == 0)
        rank++;
    uint64_t seen = 0;
    for (unsigned b = 0; b < h->nbuckets; b++) {
        seen += h->counts[b];
        if (seen >= rank) {
            uint64_t lo = bucket_lo(b), hi = bucket_hi(b);
            uint64_t v = lo + (hi - lo) / 2;
            if (v < h->min_ns)
                v = h->min_ns;
            if (v > h->max_ns)
                v = h->max_ns;
            return v;
        }
    }
    return h->max_ns;
}

/* One row per non-empty bucket.  The bucket's upper edge is used so that
 * "fraction of samples <= latency" holds exactly for each row. */
static int hist_write_cdf(const struct hist *h, FILE *f)
{
    uint64_t seen = 0;
    for (unsigned b = 0; b < h->nbuckets && h->total; b++) {
        if (!h->counts[b])
            continue;
        seen += h->counts[b];
        uint64_t v = bucket_hi(b);
        if (v > h->max_ns)
            v = h->max_ns;
        fprintf(f, "%.3f %.9f\n", (double)v / 1e3, (double)seen / (double)h->total);
    }
    return fflush(f) == 0 && !ferror(f);
}

/* ------------------------------------------------------------------------ */
/* Connections */

enum { ST_UNUSED, ST_CONNECTING, ST_OPEN, ST_DEAD };

struct conn {
    int fd;
    unsigned char state;
    unsigned char idle;       /* opened only to load the server's fd tables */
    unsigned char out_armed;  /* EPOLLOUT requested because send() would block */
    size_t tx_pending;        /* request bytes still to send (may span requests) */
    size_t tx_off;            /* offset of the next byte within the request */
    size_t rx_partial;        /* reply bytes received beyond the last full reply */
    uint64_t t_connect;
    /* FIFO of send (closed loop) or scheduled (open loop) times of the
     * outstanding requests; replies arrive in request order. */
    uint64_t *q;
    uint32_t qhead, qlen, qcap;   /* qcap is a power of two */
};

static volatile sig_atomic_t g_stop;

static struct {
    /* configuration */
    const char *host;
    int port;
    struct sockaddr_in dst;
    int conns, idle, src_addrs;
    size_t req, reply;
    double duration, warmup, rate, connect_timeout;
    const char *cdf_path;
    FILE *cdf;

    /* runtime */
    int ep;
    struct conn *c;           /* idle connections first, then active ones */
    int total;
    int alive_active;
    int inflight_connects;
    char *txbuf;              /* the request repeated, so one send() can cover many */
    size_t txbuf_len;
    int closed_loop, sending, measuring;
    uint64_t errors;

    /* open-loop schedule */
    uint64_t t_load, next_t, next_idx;
    double interval_ns;
    int rr;
    uint64_t lag_sum_ns, lag_max_ns, lag_n;   /* how late sends were vs. schedule */

    struct hist h;
} G;

static char g_rxbuf[RX_BUF];

static unsigned src_octet(int i)
{
    return 1 + (unsigned)(i % G.src_addrs);
}

static void set_events(struct conn *c, uint32_t events)
{
    struct epoll_event ev = { .events = events, .data.u64 = (uint64_t)(c - G.c) };
    if (epoll_ctl(G.ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        fatal("epoll_ctl: %s", strerror(errno));
}

/* A connection failure after set-up is not fatal: the connection just stops
 * and is counted, so the user sees errors=N next to the numbers it affected. */
static void conn_die(struct conn *c, const char *why)
{
    if (c->state == ST_DEAD)
        return;
    close(c->fd);
    c->fd = -1;
    c->state = ST_DEAD;
    if (!c->idle)
        G.alive_active--;
    G.errors++;
    if (G.errors <= MAX_ERR_REPORTS)
        fprintf(stderr, "weft-loadgen: %s connection %d lost: %s%s\n",
                c->idle ? "idle" : "active", (int)(c - G.c), why,
                G.errors == MAX_ERR_REPORTS ? " (further losses not reported)" : "");
}

static void q_push(struct conn *c, uint64_t t)
{
    if (c->qlen == c->qcap) {
        uint32_t ncap = c->qcap ? c->qcap * 2 : 4;
        uint64_t *nq = xmalloc(ncap * sizeof *nq);
        for (uint32_t i = 0; i < c->qlen; i++)
            nq[i] = c->q[(c->qhead + i) & (c->qcap - 1)];
        free(c->q);
        c->q = nq;
        c->qcap = ncap;
        c->qhead = 0;
    }
    c->q[(c->qhead + c->qlen) & (c->qcap - 1)] = t;
    c->qlen++;
}

static uint64_t q_pop(struct conn *c)
{
    uint64_t t = c->q[c->qhead];
    c->qhead = (c->qhead + 1) & (c->qcap - 1);
    c->qlen--;
    return t;
}

static void flush(struct conn *c)
{
    while (c->tx_pending) {
        size_t len = G.txbuf_len - c->tx_off;
        if (len > c->tx_pending)
            len = c->tx_pending;
        ssize_t n = send(c->fd, G.txbuf + c->tx_off, len, MSG_NOSIGNAL);
        if (n > 0) {
            c->tx_pending -= (size_t)n;
            c->tx_off = (c->tx_off + (size_t)n) % G.req;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->out_armed) {
                c->out_armed = 1;
                set_events(c, EPOLLIN | EPOLLRDHUP | EPOLLOUT);
            }
            return;
        } else {
            conn_die(c, n < 0 ? strerror(errno) : "send returned 0");
            return;
        }
    }
    if (c->out_armed) {
        c->out_armed = 0;
        set_events(c, EPOLLIN | EPOLLRDHUP);
    }
}

static void queue_request(struct conn *c, uint64_t t)
{
    q_push(c, t);
    c->tx_pending += G.req;
    /* With EPOLLOUT armed the socket is full; the event will flush it. */
    if (!c->out_armed)
        flush(c);
}

/* Level-triggered, so one recv per wake-up is enough: anything left over
 * is reported again by the next epoll_wait. */
static void on_readable(struct conn *c)
{
    ssize_t n = recv(c->fd, g_rxbuf, sizeof g_rxbuf, 0);
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            conn_die(c, strerror(errno));
        return;
    }
    if (n == 0) {
        conn_die(c, "EOF from server");
        return;
    }
    if (c->idle) {
        conn_die(c, "unexpected data on idle connection");
        return;
    }
    c->rx_partial += (size_t)n;
    if (c->rx_partial > (size_t)c->qlen * G.reply) {
        conn_die(c, "more reply bytes than requests sent (wrong --reply?)");
        return;
    }
    if (c->rx_partial < G.reply)
        return;

    uint64_t t = now_ns();
    while (c->rx_partial >= G.reply) {
        uint64_t t0 = q_pop(c);
        c->rx_partial -= G.reply;
        if (G.measuring)
            hist_record(&G.h, t - t0);
    }
    /* Closed loop: the completion time doubles as the next send time. */
    if (G.closed_loop && G.sending)
        queue_request(c, t);
}

static void on_connected(struct conn *c)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err)
        fatal("connect to %s:%d (connection %d, from 127.0.0.%u) failed: %s%s",
              G.host, G.port, (int)(c - G.c), src_octet((int)(c - G.c)), strerror(err),
              err == EADDRNOTAVAIL ? " (out of local ports? try more --src-addrs)" : "");
    c->state = ST_OPEN;
    G.inflight_connects--;
    set_events(c, EPOLLIN | EPOLLRDHUP);
}

static void on_event(uint32_t idx, uint32_t events)
{
    struct conn *c = &G.c[idx];
    if (c->state == ST_DEAD)      /* closed earlier in this batch */
        return;
    if (c->state == ST_CONNECTING) {
        on_connected(c);
        return;
    }
    if (events & EPOLLOUT)
        flush(c);
    if (c->state == ST_OPEN && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        on_readable(c);
}

static void start_connect(int i, uint64_t now)
{
    struct conn *c = &G.c[i];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        fatal("socket (connection %d): %s", i, strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    /* Only bind when spreading: with a single address the kernel's default
     * source is right for any HOST, loopback or not. */
    if (G.src_addrs > 1) {
#ifdef IP_BIND_ADDRESS_NO_PORT
        /* Let connect() pick the port: then ports only need to be unique
         * per 4-tuple rather than per bound address. */
        setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
#endif
        struct sockaddr_in src = { .sin_family = AF_INET, .sin_port = 0 };
        src.sin_addr.s_addr = htonl(0x7f000000u | src_octet(i));
        if (bind(fd, (struct sockaddr *)&src, sizeof src) < 0)
            fatal("bind to 127.0.0.%u (connection %d): %s", src_octet(i), i, strerror(errno));
    }

    c->fd = fd;
    c->t_connect = now;
    struct epoll_event ev = { .data.u64 = (uint64_t)i };
    if (connect(fd, (struct sockaddr *)&G.dst, sizeof G.dst) == 0) {
        c->state = ST_OPEN;
        ev.events = EPOLLIN | EPOLLRDHUP;
    } else if (errno == EINPROGRESS) {
        c->state = ST_CONNECTING;
        G.inflight_connects++;
        ev.events = EPOLLOUT;
    } else {
        int err = errno;
        fatal("connect to %s:%d (connection %d, from 127.0.0.%u) failed: %s%s",
              G.host, G.port, i, src_octet(i), strerror(err),
              err == EADDRNOTAVAIL ? " (out of local ports? try more --src-addrs)" : "");
    }
    if (epoll_ctl(G.ep, EPOLL_CTL_ADD, fd, &ev) < 0)
        fatal("epoll_ctl: %s", strerror(errno));
}

/* Open conns [from, to) with at most CONNECT_WINDOW handshakes in flight:
 * fast, yet never enough to overflow the server's accept backlog (an
 * overflow costs a 1 s SYN retransmit per victim). */
static void connect_range(int from, int to)
{
    struct epoll_event evs[MAX_EVENTS];
    uint64_t timeout = (uint64_t)(G.connect_timeout * 1e9);
    int next = from, oldest = from;

    for (;;) {
        uint64_t now = now_ns();
        while (next < to && G.inflight_connects < CONNECT_WINDOW)
            start_connect(next++, now);
        /* Connects start in index order, so the lowest still pending is
         * the oldest one; only it needs a timeout check. */
        while (oldest < next && G.c[oldest].state != ST_CONNECTING)
            oldest++;
        if (oldest == to)
            return;
        if (oldest < next && now - G.c[oldest].t_connect > timeout)
            fatal("connect to %s:%d (connection %d) timed out after %.1f s",
                  G.host, G.port, oldest, G.connect_timeout);
        if (g_stop)
            fatal("interrupted while connecting");
        int n = epoll_wait(G.ep, evs, MAX_EVENTS, 10);
        if (n < 0 && errno != EINTR)
            fatal("epoll_wait: %s", strerror(errno));
        for (int k = 0; k < n; k++)
            on_event((uint32_t)evs[k].data.u64, evs[k].events);
    }
}

/* Round-robin over live active connections; NULL once all are dead. */
static struct conn *next_active(void)
{
    for (int tries = 0; tries < G.conns; tries++) {
        struct conn *c = &G.c[G.idle + G.rr];
        G.rr = (G.rr + 1) % G.conns;
        if (c->state == ST_OPEN)
            return c;
    }
    return NULL;
}

/* Open loop: send every request whose scheduled time has come.  Requests
 * keep their scheduled time even if we send them late, so any stall (ours
 * or the server's) shows up in the latency instead of being omitted. */
static void dispatch_due(uint64_t now)
{
    for (int budget = DISPATCH_BUDGET; budget > 0 && G.next_t <= now; budget--) {
        struct conn *c = next_active();
        if (!c)
            return;
        if (G.measuring) {
            uint64_t lag = now - G.next_t;
            G.lag_sum_ns += lag;
            G.lag_n++;
            if (lag > G.lag_max_ns)
                G.lag_max_ns = lag;
        }
        queue_request(c, G.next_t);
        G.next_idx++;
        /* Derived from the index, not accumulated, so the rate never drifts. */
        G.next_t = G.t_load + (uint64_t)((double)G.next_idx * G.interval_ns);
    }
}

static int ms_until(uint64_t now, uint64_t deadline, int round_up)
{
    if (deadline <= now)
        return 0;
    uint64_t d = deadline - now;
    uint64_t ms = round_up ? (d + NS_PER_MS - 1) / NS_PER_MS : d / NS_PER_MS;
    return ms > 1000 ? 1000 : (int)ms;
}

/* Runs warm-up then measurement; returns the measured window in ns. */
static uint64_t run_load(void)
{
    struct epoll_event evs[MAX_EVENTS];
    uint64_t warm_ns = (uint64_t)(G.warmup * 1e9), dur_ns = (uint64_t)(G.duration * 1e9);
    uint64_t m_start = 0, m_end;

    G.sending = 1;
    G.t_load = now_ns();
    uint64_t warm_end = G.t_load + warm_ns, meas_end = UINT64_MAX;

    if (G.closed_loop) {
        for (int i = G.idle; i < G.total; i++)
            if (G.c[i].state == ST_OPEN)
                queue_request(&G.c[i], G.t_load);
    } else {
        G.interval_ns = 1e9 / G.rate;
        G.next_t = G.t_load;
        G.next_idx = 0;
    }

    for (;;) {
        uint64_t now = now_ns();
        if (!G.measuring && now >= warm_end) {
            G.measuring = 1;
            m_start = now;
            meas_end = now + dur_ns;
        }
        if (now >= meas_end || g_stop || G.alive_active == 0) {
            m_end = now;
            break;
        }
        if (!G.closed_loop)
            dispatch_due(now);

        int timeout = ms_until(now, G.measuring ? meas_end : warm_end, 1);
        if (!G.closed_loop) {
            /* Sleep in epoll only while the next send is >= 2 ms away, and
             * wake 1 ms early; closer than that, poll without blocking so the
             * schedule is kept to a few microseconds. */
            uint64_t t = now_ns();
            int t_send = G.next_t > t + NS_PER_MS ? ms_until(t + NS_PER_MS, G.next_t, 0) : 0;
            if (t_send < timeout)
                timeout = t_send;
        }
        int n = epoll_wait(G.ep, evs, MAX_EVENTS, timeout);
        if (n < 0 && errno != EINTR)
            fatal("epoll_wait: %s", strerror(errno));
        for (int k = 0; k < n; k++)
            on_event((uint32_t)evs[k].data.u64, evs[k].events);
    }

    G.sending = 0;
    G.measuring = 0;
    if (G.alive_active == 0)
        fprintf(stderr, "weft-loadgen: all active connections lost, finishing early\n");
    else if (g_stop)
        fprintf(stderr, "weft-loadgen: interrupted, reporting partial results\n");
    /* Large lag means the generator itself could not keep the schedule
     * (CPU starved or rate too high); the latencies then include it. */
    if (G.lag_n)
        fprintf(stderr, "weft-loadgen: send lag behind schedule: mean %.1f us, max %.1f us\n",
                (double)G.lag_sum_ns / (double)G.lag_n / 1e3, (double)G.lag_max_ns / 1e3);
    return m_start ? m_end - m_start : 0;
}

/* ------------------------------------------------------------------------ */
/* Set-up */

static double parse_num(const char *opt, const char *s, double min, double max)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= min && v <= max)) {
        fprintf(stderr, "weft-loadgen: bad value '%s' for %s (want %g..%g)\n", s, opt, min, max);
        exit(2);
    }
    return v;
}

static long parse_int(const char *opt, const char *s, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "weft-loadgen: bad value '%s' for %s (want integer %ld..%ld)\n",
                s, opt, min, max);
        exit(2);
    }
    return v;
}

static void parse_args(int argc, char **argv)
{
    const char *pos[2];
    int npos = 0;

    G.conns = 1;
    G.req = 90;
    G.reply = 323;
    G.duration = 5;
    G.warmup = 1;
    G.src_addrs = 1;
    G.connect_timeout = 5;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE, stdout);
            exit(0);
        }
        if (strncmp(a, "--", 2) != 0) {
            if (npos == 2) {
                fputs(USAGE, stderr);
                exit(2);
            }
            pos[npos++] = a;
            continue;
        }
        /* Accept both "--opt value" and "--opt=value". */
        char name[32];
        const char *val, *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        if (nlen >= sizeof name) {
            fprintf(stderr, "weft-loadgen: unknown option %s\n%s", a, USAGE);
            exit(2);
        }
        memcpy(name, a, nlen);
        name[nlen] = 0;
        if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            fprintf(stderr, "weft-loadgen: %s needs a value\n", name);
            exit(2);
        }

        if (!strcmp(name, "--conns"))
            G.conns = (int)parse_int(name, val, 1, 10000000);
        else if (!strcmp(name, "--req"))
            G.req = (size_t)parse_int(name, val, 1, 64 << 20);
        else if (!strcmp(name, "--reply"))
            G.reply = (size_t)parse_int(name, val, 1, 64 << 20);
        else if (!strcmp(name, "--duration"))
            G.duration = parse_num(name, val, 1e-3, 1e6);
        else if (!strcmp(name, "--warmup"))
            G.warmup = parse_num(name, val, 0, 1e6);
        else if (!strcmp(name, "--rate"))
            G.rate = parse_num(name, val, 0, 1e9);
        else if (!strcmp(name, "--idle"))
            G.idle = (int)parse_int(name, val, 0, 10000000);
        else if (!strcmp(name, "--src-addrs"))
            G.src_addrs = (int)parse_int(name, val, 1, 254);
        else if (!strcmp(name, "--cdf"))
            G.cdf_path = val;
        else if (!strcmp(name, "--connect-timeout"))
            G.connect_timeout = parse_num(name, val, 1e-3, 1e6);
        else {
            fprintf(stderr, "weft-loadgen: unknown option %s\n%s", name, USAGE);
            exit(2);
        }
    }
    if (npos != 2) {
        fputs(USAGE, stderr);
        exit(2);
    }
    G.host = pos[0];
    G.port = (int)parse_int("PORT", pos[1], 1, 65535);
}

static void resolve_host(void)
{
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res;
    int rc = getaddrinfo(G.host, NULL, &hints, &res);
    if (rc != 0)
        fatal("cannot resolve %s: %s", G.host, gai_strerror(rc));
    memcpy(&G.dst, res->ai_addr, sizeof G.dst);
    G.dst.sin_port = htons((uint16_t)G.port);
    freeaddrinfo(res);
}

/* Every connection is an fd, so 30k idle connections need a big limit.
 * Root may raise the hard limit itself; otherwise the soft limit goes as
 * high as the hard limit allows, and we fail early with a clear message. */
static void raise_fd_limit(void)
{
    rlim_t need = (rlim_t)G.conns + (rlim_t)G.idle + 100;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
        struct rlimit want = { need, need };
        if (setrlimit(RLIMIT_NOFILE, &want) == 0)
            rl = want;
    }
    if (rl.rlim_max != RLIM_INFINITY)
        rl.rlim_cur = rl.rlim_max;
    else if (rl.rlim_cur < need)
        rl.rlim_cur = need;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < need)
        fatal("%d connections need about %llu file descriptors but the limit is %llu "
              "(raise 'ulimit -n' or run as root)",
              G.conns + G.idle, (unsigned long long)need, (unsigned long long)rl.rlim_cur);
}

static void build_txbuf(void)
{
    size_t copies = G.req >= TX_BUF_MIN ? 1 : (TX_BUF_MIN + G.req - 1) / G.req;
    G.txbuf_len = copies * G.req;
    G.txbuf = xmalloc(G.txbuf_len);
    for (size_t k = 0; k < copies; k++) {
        char *p = G.txbuf + k * G.req;
        if (G.req == sizeof(HTTP_REQ) - 1)
            memcpy(p, HTTP_REQ, G.req);
        else
            memset(p, 'x', G.req);
    }
}

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void print_result(uint64_t window_ns)
{
    const struct hist *h = &G.h;
    double secs = (double)window_ns / 1e9;
    double us = 1e-3;
    printf("requests=%llu seconds=%.6f rps=%.1f mean_us=%.2f p50_us=%.2f p90_us=%.2f "
           "p99_us=%.2f p999_us=%.2f max_us=%.2f errors=%llu\n",
           (unsigned long long)h->total, secs, secs > 0 ? (double)h->total / secs : 0.0,
           h->total ? (double)h->sum_ns / (double)h->total * us : 0.0,
           (double)hist_quantile(h, 0.50) * us, (double)hist_quantile(h, 0.90) * us,
           (double)hist_quantile(h, 0.99) * us, (double)hist_quantile(h, 0.999) * us,
           (double)h->max_ns * us, (unsigned long long)G.errors);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    resolve_host();

    /* Open the CDF file now so a bad path fails before a long run. */
    if (G.cdf_path && !(G.cdf = fopen(G.cdf_path, "w")))
        fatal("cannot open %s: %s", G.cdf_path, strerror(errno));

    struct sigaction sa = { .sa_handler = on_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    raise_fd_limit();
    build_txbuf();
    hist_init(&G.h);
    G.closed_loop = G.rate == 0;
    G.total = G.idle + G.conns;
    G.alive_active = G.conns;
    G.c = calloc((size_t)G.total, sizeof *G.c);
    if (!G.c)
        fatal("out of memory");
    if ((G.ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
        fatal("epoll_create1: %s", strerror(errno));
    for (int i = 0; i < G.total; i++) {
        G.c[i].fd = -1;
        G.c[i].idle = i < G.idle;
    }

    /* Idle connections first, so the server already carries them when the
     * active ones arrive; they stay registered only to notice if they die. */
    uint64_t t0 = now_ns();
    connect_range(0, G.idle);
    connect_range(G.idle, G.total);
    fprintf(stderr, "weft-loadgen: %d active + %d idle connections to %s:%d in %.2f s; "
            "%s, warm-up %g s, measuring %g s\n",
            G.conns, G.idle, G.host, G.port, (double)(now_ns() - t0) / 1e9,
            G.closed_loop ? "closed loop" : "open loop", G.warmup, G.duration);
    if (!G.closed_loop)
        fprintf(stderr, "weft-loadgen: target rate %g req/s\n", G.rate);

    uint64_t window_ns = run_load();

    for (int i = 0; i < G.total; i++) {
        if (G.c[i].fd >= 0)
            close(G.c[i].fd);
        free(G.c[i].q);
    }
    close(G.ep);

    if (G.cdf) {
        if (!hist_write_cdf(&G.h, G.cdf))
            fprintf(stderr, "weft-loadgen: writing %s failed\n", G.cdf_path);
        fclose(G.cdf);
    }
    print_result(window_ns);
    if (G.h.total == 0)
        fprintf(stderr, "weft-loadgen: no request completed in the measured window "
                "(server not answering, or --req/--reply not matching it?)\n");

    free(G.c);
    free(G.txbuf);
    free(G.h.counts);
    return G.h.total > 0 ? 0 : 3;
}
