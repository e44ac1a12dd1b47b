#ifndef MARFAFS_CFUSE_SHIM_H
#define MARFAFS_CFUSE_SHIM_H
#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#endif
