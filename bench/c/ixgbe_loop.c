/* weft-ixgbe-loop: the C twin of weft's ixgbe driver loop on the 82599
 * model, for weft-bench packet's "model" section.
 *
 *   weft-ixgbe-loop [--batch N (1..256)] [--seconds S]
 *
 * It does, per packet, the work the Haskell loop of bench/Bench/Packet.hs
 * (modelForwardLoop) does with Weft.Packet.Internal.Ixgbe and
 * Weft.Packet.Internal.Ixgbe.Model: two model ports with one RX and one TX queue
 * each (512-descriptor rings, a pool of 4096 2 KiB buffers per port);
 * port 0's wire is a source of 60-byte test packets, port 1's a sink. One
 * thread repeats: a DMA step of each model (transmit descriptors up to
 * TDT to the wire with a DD write-back; received frames copied into the
 * buffers of descriptors up to RDT, written back with length and
 * DD|EOP), rx_batch on port 0 (a replacement buffer per packet, RDT set
 * to the last descriptor re-armed), a touch of each packet's second byte,
 * tx_batch on port 1 (cleaning in runs of 32, one descriptor per packet,
 * TDT once), and a free of what did not fit. Registers are reached
 * through read/write functions, as a driver's MMIO accessors would.
 *
 * Prints one line: summary forwarded=N seconds=S. Exits 1 if the
 * buffer accounting does not add up at the end. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define RING 512
#define POOL 4096
#define BUF_SIZE 2048
#define DATA_OFF 64
#define MAX_BATCH 256
#define MAX_FRAME 1518
#define CLEAN_BATCH 32

/* registers (byte offsets); only the hot ones are used after init */
#define RDBAL 0x01000
#define RDBAH 0x01004
#define RDLEN 0x01008
#define RDH 0x01010
#define RDT 0x01018
#define RXDCTL 0x01028
#define TDBAL 0x06000
#define TDBAH 0x06004
#define TDLEN 0x06008
#define TDH 0x06010
#define TDT 0x06018
#define TXDCTL 0x06028
#define RXCTRL 0x03000
#define DMATXCTL 0x04A80
#define GPRC 0x04074
#define GPTC 0x04080
#define REG_WORDS (0x10014 / 4)
#define QUEUE_ENABLE (1u << 25)

#define RXD_DD 1u
#define RXD_EOP 2u
#define TXD_DD 1u
#define TXD_CMD (1u << 24 | 1u << 25 | 1u << 27 | 1u << 29 | 3u << 20)

/* A buffer: header (iova of the data, pool id, index, length), data at 64. */
struct buf {
    uint64_t iova;
    uint32_t pool;
    uint32_t index;
    uint32_t length;
    uint8_t pad[DATA_OFF - 20];
    uint8_t data[BUF_SIZE - DATA_OFF];
};

struct pool {
    struct buf *base;
    uint32_t id;
    uint32_t top;
    uint32_t stack[POOL];
};

static void *map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
        perror("weft-ixgbe-loop: mmap");
        exit(2);
    }
    (void)mlock(p, len);
    return p;
}

static void pool_init(struct pool *p, uint32_t id)
{
    p->base = map((size_t)POOL * BUF_SIZE);
    p->id = id;
    for (uint32_t i = 0; i < POOL; i++) {
        struct buf *b = &p->base[i];
        b->iova = (uint64_t)(uintptr_t)b->data;
        b->pool = id;
        b->index = i;
        b->length = 0;
        p->stack[POOL - 1 - i] = i;
    }
    p->top = POOL;
}

static uint32_t pool_alloc(struct pool *p, struct buf **out, uint32_t n)
{
    uint32_t k = n < p->top ? n : p->top;
    for (uint32_t j = 0; j < k; j++)
        out[j] = &p->base[p->stack[p->top - 1 - j]];
    p->top -= k;
    return k;
}

static void pool_free(struct pool *p, struct buf **bufs, uint32_t n)
{
    for (uint32_t j = 0; j < n; j++)
        p->stack[p->top + j] = bufs[j]->index;
    p->top += n;
}

static struct pool *pools[3];

/* Frees bufs to their own pools, one pool_free per run of one pool. */
static void free_to_owners(struct buf **bufs, uint32_t n)
{
    uint32_t i = 0;
    while (i < n) {
        uint32_t id = bufs[i]->pool, j = i + 1;
        while (j < n && bufs[j]->pool == id)
            j++;
        pool_free(pools[id], bufs + i, j - i);
        i = j;
    }
}

/* ---- the model ---- */

enum wire_kind { SOURCE, SINK };

struct model {
    uint32_t regs[REG_WORDS];
    uint64_t stat_rx, stat_tx, rx_bytes, tx_bytes;
    enum wire_kind wire;
    uint8_t frame[60];
    uint64_t sink_frames, sink_bytes;
};

static uint32_t reg_read(struct model *m, uint32_t off)
{
    if (off == GPRC) { uint32_t v = (uint32_t)m->stat_rx; m->stat_rx = 0; return v; }
    if (off == GPTC) { uint32_t v = (uint32_t)m->stat_tx; m->stat_tx = 0; return v; }
    return m->regs[off >> 2];
}

static void reg_write(struct model *m, uint32_t off, uint32_t v)
{
    m->regs[off >> 2] = v;
}

static uint8_t *ring_base(struct model *m, uint32_t lo, uint32_t hi)
{
    return (uint8_t *)(uintptr_t)((uint64_t)m->regs[hi >> 2] << 32 | m->regs[lo >> 2]);
}

static int wire_receive(struct model *m, uint8_t *dst)
{
    if (m->wire != SOURCE)
        return 0;
    memcpy(dst, m->frame, sizeof m->frame);
    return (int)sizeof m->frame;
}

static void wire_transmit(struct model *m, const uint8_t *src, int len)
{
    (void)src;
    if (m->wire == SINK) {
        m->sink_frames++;
        m->sink_bytes += (uint64_t)len;
    }
}

static int model_step(struct model *m)
{
    int done = 0;
    if ((m->regs[TXDCTL >> 2] & QUEUE_ENABLE) && (m->regs[DMATXCTL >> 2] & 1)) {
        uint8_t *base = ring_base(m, TDBAL, TDBAH);
        uint32_t size = m->regs[TDLEN >> 2] / 16, h = m->regs[TDH >> 2], t = m->regs[TDT >> 2];
        uint64_t bytes = 0;
        int n = 0;
        while (h != t) {
            uint8_t *d = base + h * 16;
            uint64_t addr;
            uint32_t cmd;
            memcpy(&addr, d, 8);
            memcpy(&cmd, d + 8, 4);
            int len = (int)(cmd & 0xffff);
            if (!(cmd & (1u << 24)) || len == 0 || len > MAX_FRAME) {
                m->regs[TXDCTL >> 2] &= ~QUEUE_ENABLE;
                break;
            }
            wire_transmit(m, (const uint8_t *)(uintptr_t)addr, len);
            uint32_t dd = TXD_DD;
            memcpy(d + 12, &dd, 4);
            h = h + 1 == size ? 0 : h + 1;
            n++;
            bytes += (uint64_t)len;
        }
        m->regs[TDH >> 2] = h;
        m->stat_tx += (uint64_t)n;
        m->tx_bytes += bytes;
        done += n;
    }
    if ((m->regs[RXDCTL >> 2] & QUEUE_ENABLE) && (m->regs[RXCTRL >> 2] & 1)) {
        uint8_t *base = ring_base(m, RDBAL, RDBAH);
        uint32_t size = m->regs[RDLEN >> 2] / 16, h = m->regs[RDH >> 2], t = m->regs[RDT >> 2];
        uint64_t bytes = 0;
        int n = 0;
        while (h != t) {
            uint8_t *d = base + h * 16;
            uint64_t addr;
            memcpy(&addr, d, 8);
            int len = wire_receive(m, (uint8_t *)(uintptr_t)addr);
            if (len <= 0)
                break;
            uint16_t l16 = (uint16_t)len;
            uint32_t status = RXD_DD | RXD_EOP;
            memcpy(d + 12, &l16, 2);
            memcpy(d + 8, &status, 4);
            h = h + 1 == size ? 0 : h + 1;
            n++;
            bytes += (uint64_t)len;
        }
        m->regs[RDH >> 2] = h;
        m->stat_rx += (uint64_t)n;
        m->rx_bytes += bytes;
        done += n;
    }
    return done;
}

/* ---- the driver ---- */

struct port {
    struct model *m;
    struct pool *pool;
    uint8_t *rx_ring, *tx_ring;
    struct buf *rx_bufs[RING], *tx_bufs[RING];
    uint32_t rx_index, tx_index, clean_index;
    struct buf *spares[MAX_BATCH];
};

static void port_init(struct port *p, struct model *m, struct pool *pool)
{
    memset(p, 0, sizeof *p);
    p->m = m;
    p->pool = pool;
    p->rx_ring = map(RING * 16);
    p->tx_ring = map(RING * 16);
    uint64_t rx = (uint64_t)(uintptr_t)p->rx_ring, tx = (uint64_t)(uintptr_t)p->tx_ring;
    reg_write(m, RDBAL, (uint32_t)rx);
    reg_write(m, RDBAH, (uint32_t)(rx >> 32));
    reg_write(m, RDLEN, RING * 16);
    if (pool_alloc(pool, p->rx_bufs, RING) != RING) {
        fprintf(stderr, "weft-ixgbe-loop: the pool cannot fill the ring\n");
        exit(2);
    }
    for (uint32_t i = 0; i < RING; i++) {
        uint64_t zero = 0;
        memcpy(p->rx_ring + i * 16, &p->rx_bufs[i]->iova, 8);
        memcpy(p->rx_ring + i * 16 + 8, &zero, 8);
    }
    reg_write(m, RDH, 0);
    reg_write(m, RDT, RING - 1);
    reg_write(m, TDBAL, (uint32_t)tx);
    reg_write(m, TDBAH, (uint32_t)(tx >> 32));
    reg_write(m, TDLEN, RING * 16);
    reg_write(m, TDH, 0);
    reg_write(m, TDT, 0);
    reg_write(m, DMATXCTL, 1);
    reg_write(m, RXDCTL, reg_read(m, RXDCTL) | QUEUE_ENABLE);
    reg_write(m, TXDCTL, reg_read(m, TXDCTL) | QUEUE_ENABLE);
    reg_write(m, RXCTRL, 1);
}

static uint32_t rx_batch(struct port *p, struct buf **out, uint32_t n)
{
    uint32_t have = pool_alloc(p->pool, p->spares, n);
    uint32_t idx = p->rx_index, i = 0;
    while (i < have) {
        uint8_t *d = p->rx_ring + idx * 16;
        uint32_t status;
        memcpy(&status, d + 8, 4);
        if (!(status & RXD_DD))
            break;
        if (!(status & RXD_EOP)) {
            fprintf(stderr, "weft-ixgbe-loop: descriptor %u without EOP\n", idx);
            exit(1);
        }
        uint16_t len;
        memcpy(&len, d + 12, 2);
        struct buf *got = p->rx_bufs[idx], *fresh = p->spares[i];
        got->length = len;
        uint64_t zero = 0;
        memcpy(d, &fresh->iova, 8);
        memcpy(d + 8, &zero, 8);
        p->rx_bufs[idx] = fresh;
        out[i++] = got;
        idx = idx + 1 == RING ? 0 : idx + 1;
    }
    if (have > i)
        pool_free(p->pool, p->spares + i, have - i);
    if (i > 0) {
        p->rx_index = idx;
        reg_write(p->m, RDT, idx == 0 ? RING - 1 : idx - 1);
    }
    return i;
}

static uint32_t tx_batch(struct port *p, struct buf **bufs, uint32_t n)
{
    uint32_t c = p->clean_index;
    for (;;) {
        uint32_t in_flight = (p->tx_index - c + RING) % RING;
        if (in_flight < CLEAN_BATCH)
            break;
        uint32_t last = (c + CLEAN_BATCH - 1) % RING, status;
        memcpy(&status, p->tx_ring + last * 16 + 12, 4);
        if (!(status & TXD_DD))
            break;
        free_to_owners(p->tx_bufs + c, CLEAN_BATCH);
        c = c + CLEAN_BATCH == RING ? 0 : c + CLEAN_BATCH;
    }
    p->clean_index = c;
    uint32_t idx = p->tx_index, i = 0;
    while (i < n) {
        uint32_t next = idx + 1 == RING ? 0 : idx + 1;
        if (next == c)
            break;
        struct buf *b = bufs[i];
        uint8_t *d = p->tx_ring + idx * 16;
        uint32_t cmd = TXD_CMD | b->length, olinfo = b->length << 14;
        memcpy(d, &b->iova, 8);
        memcpy(d + 8, &cmd, 4);
        memcpy(d + 12, &olinfo, 4);
        p->tx_bufs[idx] = b;
        idx = next;
        i++;
    }
    if (i > 0) {
        p->tx_index = idx;
        reg_write(p->m, TDT, idx);
    }
    return i;
}

/* ixy's test packet: 60 bytes, IPv4 10.0.0.1 -> 10.0.0.2, UDP 42 -> 1337. */
static void test_packet(uint8_t *f)
{
    static const uint8_t head[42] = {
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x08, 0x00,
        0x45, 0x00, 0x00, 46, 0x00, 0x00, 0x00, 0x00, 64, 17, 0x00, 0x00,
        10, 0, 0, 1, 10, 0, 0, 2,
        0x00, 42, 0x05, 0x39, 0x00, 26, 0x00, 0x00 };
    memset(f, 0, 60);
    memcpy(f, head, sizeof head);
    uint32_t sum = 0;
    for (int i = 14; i < 34; i += 2)
        sum += (uint32_t)(f[i] << 8 | f[i + 1]);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    f[24] = (uint8_t)(~sum >> 8);
    f[25] = (uint8_t)~sum;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void usage(void)
{
    fprintf(stderr, "usage: weft-ixgbe-loop [--batch N (1..256)] [--seconds S]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long batch = 32;
    double seconds = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = strtod(argv[++i], NULL);
        else
            usage();
    }
    if (batch < 1 || batch > MAX_BATCH || !(seconds > 0))
        usage();

    static struct pool pool0, pool1;
    static struct model m0, m1;
    static struct port p0, p1;
    pool_init(&pool0, 1);
    pool_init(&pool1, 2);
    pools[1] = &pool0;
    pools[2] = &pool1;
    m0.wire = SOURCE;
    test_packet(m0.frame);
    m1.wire = SINK;
    port_init(&p0, &m0, &pool0);
    port_init(&p1, &m1, &pool1);

    struct buf *bufs[MAX_BATCH];
    uint64_t forwarded = 0, iter = 1;
    uint64_t start = now_ns(), deadline = start + (uint64_t)(seconds * 1e9), end;
    for (;;) {
        model_step(&m0);
        model_step(&m1);
        uint32_t n = rx_batch(&p0, bufs, (uint32_t)batch);
        for (uint32_t i = 0; i < n; i++)
            bufs[i]->data[1]++;
        uint32_t k = tx_batch(&p1, bufs, n);
        if (k < n)
            pool_free(&pool0, bufs + k, n - k);
        forwarded += k;
        if ((iter++ & 63) == 0 && (end = now_ns()) >= deadline)
            break;
    }
    printf("summary forwarded=%llu seconds=%.3f\n", (unsigned long long)forwarded, (double)(end - start) / 1e9);

    /* Every buffer of port 0's pool is in its RX ring, its pool, P1's TX
     * ring (not yet cleaned), or nowhere: the last would be a leak. */
    uint32_t in_flight = (p1.tx_index - p1.clean_index + RING) % RING;
    uint64_t sent = m1.sink_frames + ((p1.tx_index - reg_read(&m1, TDH) + RING) % RING);
    if (pool0.top + RING + in_flight != POOL || sent != forwarded) {
        fprintf(stderr, "weft-ixgbe-loop: accounting broken: free %u + ring %u + in flight %u != %u, "
                "or sink %llu + queued != forwarded %llu\n", pool0.top, RING, in_flight, POOL,
                (unsigned long long)m1.sink_frames, (unsigned long long)forwarded);
        return 1;
    }
    return 0;
}
