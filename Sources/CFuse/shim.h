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

/* The multi-threaded loop, whichever symbol this libfuse exports for it. */
static inline int marfafs_session_loop_mt(struct fuse_session *se, unsigned threads) {
    struct fuse_loop_config *c = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(c, threads);
    fuse_loop_cfg_set_idle_threads(c, threads);
    int r = fuse_session_loop_mt(se, c);
    fuse_loop_cfg_destroy(c);
    return r;
}

/* The calling thread's id (what fuse_req_ctx()->pid names for a request it makes). */
#include <sys/syscall.h>
static inline int marfafs_gettid(void) { return (int)syscall(SYS_gettid); }

static inline void marfafs_fi_set_cache(struct fuse_file_info *fi, int dir) {
    fi->keep_cache = 1;
    if (dir) fi->cache_readdir = 1;
}
#endif
