/* weft-uring-stale: an io_uring poll request can report readiness that is
 * already gone, where epoll cannot (Note [Stale readiness on a ring] in
 * Weft.Event.Internal.Backend.Uring). No weft code is involved.
 *
 * A reader on core 0 waits for a non-blocking pipe with one-shot polls and
 * reads one byte per report; a writer on core 1 writes one byte whenever
 * the reader has taken the last one. Two threads on core 1 alternate short
 * bursts of work and sleeps, so the writer is often preempted, sometimes
 * after it has put its byte in the pipe and before it wakes the pipe's
 * waiters. The reader can then take the byte (its next poll finds it at
 * once), arm a new poll on the empty pipe, and receive the late wake-up:
 * io_uring completes the request with the wake-up's POLLIN without looking
 * at the pipe again, and the read that follows says EAGAIN. epoll looks
 * at the pipe before it reports.
 *
 *   weft-uring-stale [WAITS] [uring|epoll]    exit status 1 if a report was stale
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>
#include <liburing.h>

static int pipefd[2];
static atomic_long taken, written;
static atomic_int done;
static volatile unsigned long busy;   /* the interrupters' work */

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Work a little, sleep a little: every wake-up may preempt the writer. */
static void *interrupter(void *arg)
{
    (void) arg;
    pin(1);
    struct timespec nap = { 0, 20000 };
    while (!atomic_load(&done)) {
        for (int k = 0; k < 20000; k++) busy++;
        nanosleep(&nap, NULL);
    }
    return NULL;
}

static void *writer(void *arg)
{
    (void) arg;
    pin(1);
    char c = 'x';
    for (;;) {
        while (atomic_load(&taken) != atomic_load(&written))
            if (atomic_load(&done)) return NULL;
        if (atomic_load(&done)) return NULL;
        atomic_fetch_add(&written, 1);
        if (write(pipefd[1], &c, 1) != 1) { perror("write"); exit(2); }
    }
}

int main(int argc, char **argv)
{
    long waits = argc > 1 ? atol(argv[1]) : 300000;
    int use_epoll = argc > 2 && strcmp(argv[2], "epoll") == 0;
    if (pipe2(pipefd, O_NONBLOCK)) { perror("pipe2"); return 2; }
    struct io_uring ring;
    int ep = -1;
    if (use_epoll) {
        ep = epoll_create1(0);
        struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.fd = pipefd[0] };
        if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, pipefd[0], &ev)) { perror("epoll"); return 2; }
    } else {
        int r = io_uring_queue_init(64, &ring, 0);
        if (r) { fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-r)); return 2; }
    }
    pin(0);
    pthread_t w, i1, i2;
    pthread_create(&w, NULL, writer, NULL);
    pthread_create(&i1, NULL, interrupter, NULL);
    pthread_create(&i2, NULL, interrupter, NULL);
    long reports = 0, stale = 0;
    char c;
    for (long n = 0; n < waits; n++) {
        unsigned events;
        if (use_epoll) {
            struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.fd = pipefd[0] };
            epoll_ctl(ep, EPOLL_CTL_MOD, pipefd[0], &ev);
            struct epoll_event got;
            while (epoll_wait(ep, &got, 1, -1) != 1) ;
            events = got.events;
        } else {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
            io_uring_prep_poll_add(sqe, pipefd[0], POLLIN);
            struct io_uring_cqe *cqe;
            io_uring_submit_and_wait(&ring, 1);
            if (io_uring_wait_cqe(&ring, &cqe)) { perror("io_uring_wait_cqe"); return 2; }
            events = cqe->res < 0 ? 0 : (unsigned) cqe->res;
            io_uring_cqe_seen(&ring, cqe);
        }
        if (!(events & POLLIN)) continue;
        reports++;
        if (read(pipefd[0], &c, 1) == 1) atomic_fetch_add(&taken, 1);
        else if (errno == EAGAIN) stale++;
        else { perror("read"); return 2; }
    }
    atomic_store(&done, 1);
    pthread_join(w, NULL);
    pthread_join(i1, NULL);
    pthread_join(i2, NULL);
    printf("%s: %ld waits, %ld reported readable, %ld of them found the pipe empty\n",
           use_epoll ? "epoll" : "io_uring poll", waits, reports, stale);
    return stale ? 1 : 0;
}
