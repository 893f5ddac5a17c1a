/* Set-up calls for weft's AF_PACKET backend (Weft.Packet.Internal.AfPacket).
 *
 * Only what is awkward from Haskell lives here: building the sockopt
 * structs (tpacket_req, tpacket_req3, packet_mreq, sockaddr_ll) and the
 * socket/bind/mmap calls around them. The per-packet ring work (status
 * words, copies, the send kick) is in Haskell on purpose: the backend is
 * what the Haskell-vs-C forwarder benchmark compares.
 *
 * All functions return a non-negative result, or -errno.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>
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
#ifndef PACKET_FANOUT_FLAG_UNIQUEID
#define PACKET_FANOUT_FLAG_UNIQUEID 0x2000
#endif

/* A syscall's result, or -errno if it failed. A function, not a macro: a
 * macro would evaluate its argument twice, and NEG_ERRNO(close(fd)) once
 * closed fd twice, the second time possibly another thread's new fd. */
static inline long neg_errno(long r)
{
    return r < 0 ? -(long)errno : r;
}
#define NEG_ERRNO(r) neg_errno((long)(r))

/* The interface's index, or -errno (-ENODEV when there is none). */
long weft_afp_ifindex(const char *name)
{
    unsigned idx = if_nametoindex(name);
    return idx == 0 ? -(long)errno : (long)idx;
}

/* A packet socket that receives nothing until bound with a protocol. */
long weft_afp_socket(void)
{
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    return NEG_ERRNO(fd);
}

/* An int-valued SOL_PACKET option. */
long weft_afp_setopt(int fd, int opt, int val)
{
    int r = setsockopt(fd, SOL_PACKET, opt, &val, sizeof val);
    return NEG_ERRNO(r);
}

/* PACKET_RX_RING or PACKET_TX_RING (ring: 0 = RX, 1 = TX). With v3 set, a
 * tpacket_req3 with the block retire timeout (ms, 0 = kernel default). */
long weft_afp_ring(int fd, int ring, int v3, unsigned block_size, unsigned block_nr,
                   unsigned frame_size, unsigned retire_ms)
{
    int opt = ring ? PACKET_TX_RING : PACKET_RX_RING;
    int r;
    unsigned frame_nr = (block_size / frame_size) * block_nr;
    if (v3) {
        struct tpacket_req3 req;
        memset(&req, 0, sizeof req);
        req.tp_block_size = block_size;
        req.tp_block_nr = block_nr;
        req.tp_frame_size = frame_size;
        req.tp_frame_nr = frame_nr;
        req.tp_retire_blk_tov = retire_ms;
        req.tp_sizeof_priv = 0;
        req.tp_feature_req_word = 0;
        r = setsockopt(fd, SOL_PACKET, opt, &req, sizeof req);
    } else {
        struct tpacket_req req;
        req.tp_block_size = block_size;
        req.tp_block_nr = block_nr;
        req.tp_frame_size = frame_size;
        req.tp_frame_nr = frame_nr;
        r = setsockopt(fd, SOL_PACKET, opt, &req, sizeof req);
    }
    return NEG_ERRNO(r);
}

/* Maps the rings of a socket (RX first, then TX, as the kernel lays them
 * out). *out gets the address. */
long weft_afp_mmap(int fd, size_t len, void **out)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED)
        return -(long)errno;
    *out = p;
    return 0;
}

long weft_afp_munmap(void *p, size_t len)
{
    return NEG_ERRNO(munmap(p, len));
}

/* Binds to an interface; proto 0 binds for sending only. */
long weft_afp_bind(int fd, int ifindex, int all)
{
    struct sockaddr_ll sll;
    memset(&sll, 0, sizeof sll);
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = all ? htons(ETH_P_ALL) : 0;
    sll.sll_ifindex = ifindex;
    return NEG_ERRNO(bind(fd, (struct sockaddr *)&sll, sizeof sll));
}

/* Joins a PACKET_FANOUT_HASH group. id < 0 makes a new group with a
 * kernel-chosen unique id. Returns the group's id. */
long weft_afp_fanout(int fd, int id)
{
    int val;
    if (id < 0)
        val = (PACKET_FANOUT_HASH | PACKET_FANOUT_FLAG_UNIQUEID) << 16;
    else
        val = (PACKET_FANOUT_HASH << 16) | (id & 0xffff);
    if (setsockopt(fd, SOL_PACKET, PACKET_FANOUT, &val, sizeof val) < 0)
        return -(long)errno;
    if (id >= 0)
        return id & 0xffff;
    socklen_t len = sizeof val;
    if (getsockopt(fd, SOL_PACKET, PACKET_FANOUT, &val, &len) < 0)
        return -(long)errno;
    return val & 0xffff;
}

/* PACKET_STATISTICS: packets seen and dropped since the last call (the
 * kernel clears them on read). Works for V2 and V3 sockets. */
long weft_afp_stats(int fd, uint64_t *packets, uint64_t *drops)
{
    struct tpacket_stats_v3 st;
    socklen_t len = sizeof st;
    memset(&st, 0, sizeof st);
    if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) < 0)
        return -(long)errno;
    *packets = st.tp_packets;
    *drops = st.tp_drops;
    return 0;
}

/* Promiscuous mode as a socket membership: it ends with the socket. */
long weft_afp_promisc(int fd, int ifindex, int on)
{
    struct packet_mreq mr;
    memset(&mr, 0, sizeof mr);
    mr.mr_ifindex = ifindex;
    mr.mr_type = PACKET_MR_PROMISC;
    int r = setsockopt(fd, SOL_PACKET, on ? PACKET_ADD_MEMBERSHIP : PACKET_DROP_MEMBERSHIP,
                       &mr, sizeof mr);
    return NEG_ERRNO(r);
}

/* The interface's hardware address (6 bytes into out). */
long weft_afp_hwaddr(int fd, const char *name, uint8_t *out)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
    if (ioctl(fd, SIOCGIFHWADDR, &ifr) < 0)
        return -(long)errno;
    memcpy(out, ifr.ifr_hwaddr.sa_data, 6);
    return 0;
}

/* The interface's MTU. */
long weft_afp_mtu(int fd, const char *name)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
    if (ioctl(fd, SIOCGIFMTU, &ifr) < 0)
        return -(long)errno;
    return ifr.ifr_mtu;
}

long weft_afp_close(int fd)
{
    return NEG_ERRNO(close(fd));
}
