#ifndef MARFAFS_CFUSE_SHIM_H
#define MARFAFS_CFUSE_SHIM_H
#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>

/* The CPUs this process may run on (its affinity mask, as taskset(1) and cgroups' cpusets set it). */
static inline int marfafs_cpus_allowed(void) {
    unsigned long mask[64];
    long bytes = syscall(SYS_sched_getaffinity, 0, sizeof mask, mask);
    if (bytes <= 0) return 1;
    int n = 0;
    for (long i = 0; i < bytes / (long)sizeof(unsigned long); i++) n += __builtin_popcountl(mask[i]);
    return n;
}

/* The request loop (FuseMount.run), in place of libfuse's fuse_session_loop_mt.
 *
 * Leader and followers: one worker at a time reads /dev/fuse (the leader, holding `leader`);
 * once it has a request it lets the next worker lead and answers its request. A new leader first
 * looks for a request without sleeping, for up to `spin_ns` (poll(2) with no timeout, giving its
 * CPU to any task waiting for one between looks), then sleeps in read(2) as libfuse's workers do.
 * A program that makes one request after another (ls -l, cp, rsync, git) finds a worker awake:
 * on a virtual machine, waking a sleeping thread and the CPU it sleeps on costs as much as the
 * request's own work, twice per request without this.
 *
 * A leader looks only while requests have been following answers within `spin_ns` (`gap_ns`):
 * a program that makes a request now and then is not waited for awake. */
struct marfafs_loop {
    struct fuse_session *se;
    pthread_mutex_t leader;
    long spin_ns;
    /* When a worker last answered, and the mean time from an answer to the next request read
     * (the mean weighs 7/8, the newest 1/8; each capped at 10 × spin_ns); kept only while
     * `spin_ns` > 0. Written by workers without the leader lock: an approximate value will do. */
    _Atomic long answered_ns;
    _Atomic long gap_ns;
};

static inline long marfafs_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void *marfafs_loop_worker(void *arg) {
    struct marfafs_loop *l = (struct marfafs_loop *)arg;
    struct fuse_buf buf;
    memset(&buf, 0, sizeof buf);
    struct pollfd p = { .fd = fuse_session_fd(l->se), .events = POLLIN };
    while (!fuse_session_exited(l->se)) {
        pthread_mutex_lock(&l->leader);
        if (l->spin_ns > 0 && l->gap_ns < l->spin_ns && !fuse_session_exited(l->se)) {
            long end = marfafs_now_ns() + l->spin_ns;
            while (poll(&p, 1, 0) == 0 && marfafs_now_ns() < end) sched_yield();
        }
        /* 0 once the session has ended (unmounted, or `fuse_session_exit`). */
        int res = fuse_session_exited(l->se) ? 0 : fuse_session_receive_buf(l->se, &buf);
        if (l->spin_ns > 0 && res > 0) {
            long gap = marfafs_now_ns() - l->answered_ns;
            gap = gap < 0 ? 0 : gap > 10 * l->spin_ns ? 10 * l->spin_ns : gap;
            l->gap_ns = (7 * l->gap_ns + gap) / 8;
        }
        pthread_mutex_unlock(&l->leader);
        if (res == -EINTR) continue; /* a request taken back by its caller */
        if (res <= 0) { if (res < 0) fuse_session_exit(l->se); break; }
        fuse_session_process_buf(l->se, &buf);
        if (l->spin_ns > 0) l->answered_ns = marfafs_now_ns();
    }
    free(buf.mem);
    return NULL;
}

/* Runs `threads` workers until the session ends; 0, or -1 if no worker could start. Workers
 * block the signals that end a mount (as libfuse's do): they are for the thread that waits. */
static inline int marfafs_session_loop(struct fuse_session *se, unsigned threads, long spin_ns) {
    struct marfafs_loop l = { .se = se, .spin_ns = spin_ns };
    pthread_mutex_init(&l.leader, NULL);
    pthread_t *t = (pthread_t *)calloc(threads, sizeof(pthread_t));
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM); sigaddset(&block, SIGINT); sigaddset(&block, SIGHUP); sigaddset(&block, SIGQUIT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    unsigned started = 0;
    for (unsigned i = 0; t && i < threads; i++) {
        if (pthread_create(&t[i], NULL, marfafs_loop_worker, &l) != 0) break;
        started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    for (unsigned i = 0; i < started; i++) pthread_join(t[i], NULL);
    free(t);
    pthread_mutex_destroy(&l.leader);
    return started ? 0 : -1;
}

/* The calling thread's id (what fuse_req_ctx()->pid names for a request it makes). */
static inline int marfafs_gettid(void) { return (int)syscall(SYS_gettid); }

static inline void marfafs_fi_set_cache(struct fuse_file_info *fi, int dir) {
    fi->keep_cache = 1;
    if (dir) fi->cache_readdir = 1;
}
#endif
