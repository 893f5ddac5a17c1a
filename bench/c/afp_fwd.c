/* weft-afp-fwd: the C twin of weft's Haskell AF_PACKET forwarder.
 *
 *   weft-afp-fwd [--batch N] [--seconds S] IF1 IF2
 *
 * Forwards every frame received on IF1 out of IF2 and vice versa, in one
 * loop, as ixy-fwd does: receive a batch, touch one byte of each packet
 * (data[1]++), transmit the batch, free what the transmit ring did not
 * take. Run it pinned (taskset -c N). It prints one line per second,
 *   IF1->IF2 <Mpps> IF2->IF1 <Mpps>
 * and at the end (after S seconds, or SIGINT/SIGTERM)
 *   summary forwarded=<packets sent, both directions> seconds=<float>
 *
 * The I/O path is exactly Weft.Packet.Internal.AfPacket's default: one packet
 * socket per interface with a TPACKET_V2 RX ring and a TPACKET_V2 TX ring
 * (2048-byte frames, 4096 frames each) in one mapping, PACKET_QDISC_BYPASS,
 * PACKET_LOSS, PACKET_IGNORE_OUTGOING plus a PACKET_OUTGOING check, one
 * pool of 4096 2048-byte buffers per interface (data at offset 64) with a
 * free stack, one copy ring->buffer on receive and one buffer->ring on
 * transmit, the same length rules (Note [Frames that do not fit] in the
 * Haskell module), taken buffers freed to their own pool at once, and one
 * send(fd, NULL, 0, MSG_DONTWAIT) per transmit batch that queued a frame
 * or found the ring full. Only the language differs, so the benchmark
 * ratio measures language and runtime, not design.
 *
 * It busy-polls even when idle (it is only run under load); the Haskell
 * forwarder's hybrid rule blocks when idle instead, which does not matter
 * under load because a busy queue is polled there too.
 *
 * The memory-ordering argument is the one in Note [Ring status handshake]
 * (Weft.Packet.Internal.AfPacket): x86-64 TSO, a compiler barrier where the
 * Haskell side has its unsafe memcpy calls. Here the status word is read
 * and written with relaxed atomics plus compiler barriers, which compile
 * to plain moves on x86-64, as the Haskell peeks and pokes do.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>

#ifndef PACKET_QDISC_BYPASS
#define PACKET_QDISC_BYPASS 20
#endif
#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

#define FRAME_SIZE 2048u
#define RING_FRAMES 4096u
#define BLOCK_SIZE 4096u
#define POOL_SIZE 4096u
#define BUF_SIZE 2048u
#define DATA_OFFSET 64u
#define MAX_DATA (BUF_SIZE - DATA_OFFSET)
#define TX_DATA 32u /* TPACKET2_HDRLEN - sizeof(struct sockaddr_ll) */
#define PKTTYPE_OFF (32u + 10u)
#define MAX_BATCH 256

/* ---- mempool: ixy's, as Weft.Packet.Internal.MemPool ---- */

struct mempool;

struct buf {
    uint64_t iova;
    struct mempool *pool;
    uint32_t index;
    uint32_t len;
    uint8_t pad[DATA_OFFSET - 24];
    uint8_t data[];
};

struct mempool {
    uint8_t *base;
    uint32_t entries;
    uint32_t top;
    uint32_t *stack;
};

static struct mempool *pool_new(uint32_t n)
{
    struct mempool *mp = calloc(1, sizeof *mp);
    size_t len = (size_t)n * BUF_SIZE;
    mp->base = mmap(NULL, len, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (mp->base == MAP_FAILED) {
        perror("mmap pool");
        exit(1);
    }
    (void)mlock(mp->base, len);
    mp->entries = n;
    mp->stack = malloc(n * sizeof(uint32_t));
    for (uint32_t i = 0; i < n; i++) {
        struct buf *b = (struct buf *)(mp->base + (size_t)i * BUF_SIZE);
        b->iova = (uint64_t)(uintptr_t)b->data;
        b->pool = mp;
        b->index = i;
        b->len = 0;
        mp->stack[n - 1 - i] = i;
    }
    mp->top = n;
    return mp;
}

static inline struct buf *pool_alloc(struct mempool *mp)
{
    if (mp->top == 0)
        return NULL;
    uint32_t i = mp->stack[--mp->top];
    return (struct buf *)(mp->base + (size_t)i * BUF_SIZE);
}

static inline void pool_free(struct buf *b)
{
    struct mempool *mp = b->pool;
    mp->stack[mp->top++] = b->index;
}

/* ---- one AF_PACKET queue ---- */

struct queue {
    const char *name;
    int fd;
    uint8_t *rx_ring, *tx_ring;
    uint32_t rx_head, tx_head;
    uint32_t tx_max;
    struct mempool *pool;
    uint64_t rx_pkts, tx_pkts, rx_too_long, tx_invalid, kicks;
};

static void die(const char *what, const char *ifname)
{
    fprintf(stderr, "weft-afp-fwd: %s %s: %s\n", what, ifname, strerror(errno));
    exit(1);
}

static void setopt(int fd, int opt, int val, const char *what, const char *ifname)
{
    if (setsockopt(fd, SOL_PACKET, opt, &val, sizeof val) < 0)
        die(what, ifname);
}

static void queue_open(struct queue *q, const char *ifname)
{
    memset(q, 0, sizeof *q);
    q->name = ifname;
    unsigned idx = if_nametoindex(ifname);
    if (idx == 0)
        die("if_nametoindex", ifname);
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket", ifname);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
    if (ioctl(fd, SIOCGIFMTU, &ifr) < 0)
        die("SIOCGIFMTU", ifname);
    q->tx_max = FRAME_SIZE - TX_DATA;
    if ((uint32_t)ifr.ifr_mtu + 14 < q->tx_max)
        q->tx_max = (uint32_t)ifr.ifr_mtu + 14;

    setopt(fd, PACKET_VERSION, TPACKET_V2, "PACKET_VERSION", ifname);
    setopt(fd, PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS", ifname);
    setopt(fd, PACKET_LOSS, 1, "PACKET_LOSS", ifname);
    int one = 1;
    (void)setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    struct tpacket_req req = {
        .tp_block_size = BLOCK_SIZE,
        .tp_block_nr = RING_FRAMES * FRAME_SIZE / BLOCK_SIZE,
        .tp_frame_size = FRAME_SIZE,
        .tp_frame_nr = RING_FRAMES,
    };
    if (setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) < 0)
        die("PACKET_RX_RING", ifname);
    if (setsockopt(fd, SOL_PACKET, PACKET_TX_RING, &req, sizeof req) < 0)
        die("PACKET_TX_RING", ifname);
    size_t ring = (size_t)RING_FRAMES * FRAME_SIZE;
    uint8_t *map = mmap(NULL, 2 * ring, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED)
        die("mmap", ifname);
    struct sockaddr_ll sll;
    memset(&sll, 0, sizeof sll);
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = (int)idx;
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0)
        die("bind", ifname);
    q->fd = fd;
    q->rx_ring = map;
    q->tx_ring = map + ring;
    q->pool = pool_new(POOL_SIZE);
}

static inline uint32_t load_status(const uint8_t *fr)
{
    uint32_t s = __atomic_load_n((const uint32_t *)fr, __ATOMIC_RELAXED);
    __asm__ __volatile__("" ::: "memory");
    return s;
}

static inline void store_status(uint8_t *fr, uint32_t s)
{
    __asm__ __volatile__("" ::: "memory");
    __atomic_store_n((uint32_t *)fr, s, __ATOMIC_RELAXED);
}

/* rxV2 of Weft.Packet.Internal.AfPacket. */
static uint32_t rx_batch(struct queue *q, struct buf **bufs, uint32_t n)
{
    uint32_t h = q->rx_head, k = 0;
    while (k < n) {
        uint8_t *fr = q->rx_ring + (size_t)h * FRAME_SIZE;
        if (!(load_status(fr) & TP_STATUS_USER))
            break;
        struct tpacket2_hdr *hdr = (struct tpacket2_hdr *)fr;
        uint32_t next = h + 1 == RING_FRAMES ? 0 : h + 1;
        uint8_t pkttype = fr[PKTTYPE_OFF];
        uint32_t snap = hdr->tp_snaplen, len = hdr->tp_len;
        if (pkttype == PACKET_OUTGOING) {
            store_status(fr, TP_STATUS_KERNEL);
            h = next;
            continue;
        }
        if (snap < len || snap > MAX_DATA) {
            store_status(fr, TP_STATUS_KERNEL);
            q->rx_too_long++;
            h = next;
            continue;
        }
        struct buf *b = pool_alloc(q->pool);
        if (!b)
            break; /* pool empty: the frame stays in the ring */
        memcpy(b->data, fr + hdr->tp_mac, snap);
        b->len = snap;
        store_status(fr, TP_STATUS_KERNEL);
        bufs[k++] = b;
        h = next;
    }
    q->rx_head = h;
    q->rx_pkts += k;
    return k;
}

/* txV2 of Weft.Packet.Internal.AfPacket. */
static uint32_t tx_batch(struct queue *q, struct buf **bufs, uint32_t n)
{
    uint32_t h = q->tx_head, i = 0, queued = 0;
    int full = 0;
    for (; i < n; i++) {
        struct buf *b = bufs[i];
        uint32_t len = b->len;
        if (len < 14 || len > q->tx_max) {
            q->tx_invalid++;
            continue; /* taken and dropped */
        }
        uint8_t *fr = q->tx_ring + (size_t)h * FRAME_SIZE;
        uint32_t st = load_status(fr);
        if (st != TP_STATUS_AVAILABLE && st != TP_STATUS_WRONG_FORMAT) {
            full = 1;
            break;
        }
        memcpy(fr + TX_DATA, b->data, len);
        ((struct tpacket2_hdr *)fr)->tp_len = len;
        store_status(fr, TP_STATUS_SEND_REQUEST);
        h = h + 1 == RING_FRAMES ? 0 : h + 1;
        queued++;
    }
    q->tx_head = h;
    for (uint32_t j = 0; j < i; j++)
        pool_free(bufs[j]);
    if (queued > 0 || full) {
        (void)send(q->fd, NULL, 0, MSG_DONTWAIT);
        q->kicks++;
    }
    q->tx_pkts += queued;
    return i;
}

/* ixy-fwd's forward(). */
static void forward(struct queue *rx, struct queue *tx, struct buf **bufs, uint32_t batch)
{
    uint32_t n = rx_batch(rx, bufs, batch);
    if (n == 0)
        return;
    for (uint32_t i = 0; i < n; i++)
        bufs[i]->data[1]++;
    uint32_t k = tx_batch(tx, bufs, n);
    for (uint32_t i = k; i < n; i++)
        pool_free(bufs[i]);
}

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(void)
{
    fprintf(stderr, "usage: weft-afp-fwd [--batch N (1..256)] [--seconds S (0: until a signal)] IF1 IF2\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long batch = 32;
    double seconds = 0;
    const char *ifs[2];
    int nifs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = strtod(argv[++i], NULL);
        else if (argv[i][0] == '-' || nifs == 2)
            usage();
        else
            ifs[nifs++] = argv[i];
    }
    if (nifs != 2 || batch < 1 || batch > MAX_BATCH || seconds < 0)
        usage();

    struct queue q1, q2;
    queue_open(&q1, ifs[0]);
    queue_open(&q2, ifs[1]);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    setvbuf(stdout, NULL, _IOLBF, 0);

    struct buf *bufs[MAX_BATCH];
    double start = now_s(), last = start;
    uint64_t last12 = 0, last21 = 0;
    uint64_t counter = 0;
    while (!stop) {
        forward(&q1, &q2, bufs, (uint32_t)batch);
        forward(&q2, &q1, bufs, (uint32_t)batch);
        /* the clock is read every 0xFFF iterations, as in ixy-fwd */
        if ((counter++ & 0xFFF) == 0) {
            double t = now_s();
            if (t - last >= 1.0) {
                printf("%s->%s %.3f %s->%s %.3f\n", q1.name, q2.name,
                       (q2.tx_pkts - last12) / (t - last) / 1e6, q2.name, q1.name,
                       (q1.tx_pkts - last21) / (t - last) / 1e6);
                last12 = q2.tx_pkts;
                last21 = q1.tx_pkts;
                last = t;
            }
            if (seconds > 0 && t - start >= seconds)
                break;
        }
    }
    double elapsed = now_s() - start;
    fprintf(stderr, "weft-afp-fwd: rx %llu/%llu tx %llu/%llu too-long %llu invalid %llu kicks %llu\n",
            (unsigned long long)q1.rx_pkts, (unsigned long long)q2.rx_pkts,
            (unsigned long long)q1.tx_pkts, (unsigned long long)q2.tx_pkts,
            (unsigned long long)(q1.rx_too_long + q2.rx_too_long),
            (unsigned long long)(q1.tx_invalid + q2.tx_invalid),
            (unsigned long long)(q1.kicks + q2.kicks));
    printf("summary forwarded=%llu seconds=%.3f\n",
           (unsigned long long)(q1.tx_pkts + q2.tx_pkts), elapsed);
    return 0;
}
