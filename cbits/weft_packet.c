/* Memory for weft's packet buffer pools (Weft.Packet.Internal.MemPool).
 *
 * A pool is one mapping. With huge pages configured (vm.nr_hugepages > 0)
 * it is backed by 2 MiB pages, as ixy's hugetlbfs pools are; otherwise by
 * anonymous memory, locked so that it is never paged out (which a device
 * doing DMA into it would require). */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <sys/mman.h>

#define WEFT_HUGE_PAGE (2u << 20)

/* Huge pages and pre-faulting are Linux's; elsewhere a pool is plain
 * anonymous memory, locked. */
#ifndef MAP_POPULATE
#define MAP_POPULATE 0
#endif
#if !defined(WEFT_LINUX) || !defined(MAP_HUGETLB)
#undef MAP_HUGETLB
#define MAP_HUGETLB 0
#define WEFT_NO_HUGE_PAGES 1
#endif

/* Maps len bytes. *backing is set to 1 for huge pages, 2 for locked
 * anonymous memory, 3 for anonymous memory that could not be locked.
 * Returns NULL with errno set when nothing could be mapped. */
void *weft_pkt_map(size_t len, int want_huge, int *backing)
{
    void *p;
#ifdef WEFT_NO_HUGE_PAGES
    want_huge = 0;
#endif
    if (want_huge) {
        size_t huge_len = (len + WEFT_HUGE_PAGE - 1) & ~((size_t)WEFT_HUGE_PAGE - 1);
        p = mmap(NULL, huge_len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
        if (p != MAP_FAILED) {
            *backing = 1;
            return p;
        }
    }
    p = mmap(NULL, len, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    *backing = mlock(p, len) == 0 ? 2 : 3;
    return p;
}

/* Unmaps what weft_pkt_map returned (the same len and backing). */
int weft_pkt_unmap(void *p, size_t len, int backing)
{
    if (backing == 1)
        len = (len + WEFT_HUGE_PAGE - 1) & ~((size_t)WEFT_HUGE_PAGE - 1);
    return munmap(p, len);
}
