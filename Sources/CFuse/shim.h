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
 * A leader and its followers. One worker at a time leads: it reads /dev/fuse, answers what it
 * read, and reads again, so a program that makes one request after another (cp, rsync, git, ls -l)
 * is answered by one thread with no hand-over between requests. Before it sleeps in read(2) a
 * leader looks for a request without sleeping, for up to `spin_ns` (poll(2) with no timeout,
 * giving its CPU to any task waiting for one between looks): on a virtual machine, waking a
 * sleeping thread and the CPU it sleeps on costs as much as the request's own work. It looks only
 * while requests have been following answers within `spin_ns` (`gap_ns`): a program that makes a
 * request now and then is not waited for awake.
 *
 * The lead passes on when requests wait: a leader that finds another request waiting once it has
 * read one hands the lead to a follower before it answers (requests made in parallel are answered
 * in parallel); and one follower, the watcher, looks every `watch_ns` while the leader answers, and
 * takes the lead if a request is waiting (an answer that waits, for the core's lock, the store's
 * writer, a blob, or for a request an invalidation needs answered, holds no other request back for
 * longer). The watcher sleeps while the leader sleeps in read(2) and no request is being answered.
 * A worker that lost the lead while answering joins the followers. */
struct marfafs_loop {
    struct fuse_session *se;
    long spin_ns, watch_ns;
    /* Guards what follows, up to the two running values. */
    pthread_mutex_t m;
    pthread_cond_t followers, watch;
    /* A worker leads; the lead's generation, changed whenever it passes on. */
    int led;
    unsigned gen;
    /* When the leader began answering the request it read; 0 while it reads. */
    long busy_since;
    /* The leader sleeps in read(2); a follower watches. */
    int leader_asleep, watching;
    /* When a worker last answered, and the mean time from an answer to the next request read
     * (the mean weighs 7/8, the newest 1/8; each capped at 10 × spin_ns); kept only while
     * `spin_ns` > 0. Written without the lock: an approximate value will do. */
    _Atomic long answered_ns;
    _Atomic long gap_ns;
};

static inline long marfafs_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* Passes the lead on (the lock held): a follower, or the watcher, takes it. */
static inline void marfafs_pass_lead(struct marfafs_loop *l) {
    l->led = 0;
    l->gen++;
    l->busy_since = 0;
    pthread_cond_signal(&l->followers);
    pthread_cond_signal(&l->watch);
}

/* A request waits to be read. */
static inline int marfafs_waiting(struct marfafs_loop *l) {
    struct pollfd p = { .fd = fuse_session_fd(l->se), .events = POLLIN };
    return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

/* Whether the request in `b` is one no program waits for (the kernel's FORGET, BATCH_FORGET,
 * RELEASE, RELEASEDIR and INTERRUPT, linux/fuse.h): the one `close(2)` leaves behind it, read
 * with the program's next request waiting. Answering it first keeps the lead, as the next
 * request is the same program's. */
static inline int marfafs_unwaited(const struct fuse_buf *b) {
    if ((b->flags & FUSE_BUF_IS_FD) || b->size < 8 || !b->mem) return 0;
    uint32_t opcode;
    memcpy(&opcode, (const char *)b->mem + 4, sizeof opcode);
    return opcode == 2 || opcode == 18 || opcode == 29 || opcode == 36 || opcode == 42;
}

/* The watcher (the lock held): returns once the lead is free, taken from a leader that answered
 * for a while with a request waiting, or the session has ended. */
static inline void marfafs_watch(struct marfafs_loop *l) {
    l->watching = 1;
    while (l->led && !fuse_session_exited(l->se)) {
        if (l->busy_since == 0 && l->leader_asleep) { pthread_cond_wait(&l->watch, &l->m); continue; }
        if (l->busy_since != 0 && marfafs_now_ns() - l->busy_since >= l->watch_ns) {
            unsigned gen = l->gen;
            pthread_mutex_unlock(&l->m);
            int waiting = marfafs_waiting(l);
            pthread_mutex_lock(&l->m);
            if (waiting && l->led && l->gen == gen && l->busy_since != 0) { marfafs_pass_lead(l); break; }
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long ns = until.tv_nsec + l->watch_ns;
        until.tv_sec += ns / 1000000000L;
        until.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&l->watch, &l->m, &until);
    }
    l->watching = 0;
    /* Another follower watches the next leader. */
    pthread_cond_signal(&l->followers);
}

static void *marfafs_loop_worker(void *arg) {
    struct marfafs_loop *l = (struct marfafs_loop *)arg;
    struct fuse_buf buf;
    memset(&buf, 0, sizeof buf);
    pthread_mutex_lock(&l->m);
    int leading = 0;
    unsigned gen = 0;
    for (;;) {
        if (!leading) {
            while (l->led && !fuse_session_exited(l->se)) {
                if (!l->watching) marfafs_watch(l);
                else pthread_cond_wait(&l->followers, &l->m);
            }
            if (fuse_session_exited(l->se)) break;
            l->led = 1;
            l->busy_since = 0;
            gen = l->gen;
            leading = 1;
        }
        if (fuse_session_exited(l->se)) break;
        pthread_mutex_unlock(&l->m);
        int looked = 0;
        if (l->spin_ns > 0 && l->gap_ns < l->spin_ns) {
            long end = marfafs_now_ns() + l->spin_ns;
            while (!(looked = marfafs_waiting(l)) && marfafs_now_ns() < end) sched_yield();
        }
        if (!looked) {
            pthread_mutex_lock(&l->m);
            l->leader_asleep = 1;
            pthread_mutex_unlock(&l->m);
        }
        /* 0 once the session has ended (unmounted, or `fuse_session_exit`). */
        int res = fuse_session_exited(l->se) ? 0 : fuse_session_receive_buf(l->se, &buf);
        if (l->spin_ns > 0 && res > 0) {
            long gap = marfafs_now_ns() - l->answered_ns;
            gap = gap < 0 ? 0 : gap > 10 * l->spin_ns ? 10 * l->spin_ns : gap;
            l->gap_ns = (7 * l->gap_ns + gap) / 8;
        }
        pthread_mutex_lock(&l->m);
        if (!looked) {
            l->leader_asleep = 0;
            /* The watcher slept with the leader: it watches this answer. */
            if (l->watching) pthread_cond_signal(&l->watch);
        }
        if (res == -EINTR) continue; /* a request taken back by its caller */
        if (res <= 0) { if (res < 0) fuse_session_exit(l->se); break; }
        l->busy_since = marfafs_now_ns();
        pthread_mutex_unlock(&l->m);
        /* Requests made in parallel are answered in parallel. */
        if (!marfafs_unwaited(&buf) && marfafs_waiting(l)) {
            pthread_mutex_lock(&l->m);
            if (l->led && l->gen == gen) marfafs_pass_lead(l);
            pthread_mutex_unlock(&l->m);
        }
        fuse_session_process_buf(l->se, &buf);
        if (l->spin_ns > 0) l->answered_ns = marfafs_now_ns();
        pthread_mutex_lock(&l->m);
        if (l->led && l->gen == gen) l->busy_since = 0;
        else leading = 0;
    }
    /* The session has ended: every worker leaves. */
    if (leading && l->led && l->gen == gen) l->led = 0;
    pthread_cond_broadcast(&l->followers);
    pthread_cond_broadcast(&l->watch);
    pthread_mutex_unlock(&l->m);
    free(buf.mem);
    return NULL;
}

/* Runs `threads` workers until the session ends; 0, or -1 if no worker could start. Workers
 * block the signals that end a mount (as libfuse's do): they are for the thread that waits. */
static inline int marfafs_session_loop(struct fuse_session *se, unsigned threads, long spin_ns) {
    struct marfafs_loop l = { .se = se, .spin_ns = spin_ns, .watch_ns = 1000000 };
    pthread_mutex_init(&l.m, NULL);
    pthread_cond_init(&l.followers, NULL);
    pthread_cond_init(&l.watch, NULL);
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
    pthread_cond_destroy(&l.watch);
    pthread_cond_destroy(&l.followers);
    pthread_mutex_destroy(&l.m);
    return started ? 0 : -1;
}

/* The calling thread's id (what fuse_req_ctx()->pid names for a request it makes). */
static inline int marfafs_gettid(void) { return (int)syscall(SYS_gettid); }

static inline void marfafs_fi_set_cache(struct fuse_file_info *fi, int dir) {
    fi->keep_cache = 1;
    if (dir) fi->cache_readdir = 1;
}
#endif
