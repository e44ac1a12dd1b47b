import CFuse
import Foundation
import Logging
import MarfaFS

// C trampolines. They capture nothing (libfuse calls them as C function pointers from its worker
// threads) and are free functions of a library module, so they are not main-actor isolated.

/// The thread id of the process that made the request.
@inline(__always)
private func reader(_ req: fuse_req_t?) -> Int32 {
    fuse_req_ctx(req).map { Int32($0.pointee.pid) } ?? 0
}

/// Whether the thread that made a request has gone, asked while its answer waits
/// (`.marfafs/flush`). A read of a file's first bytes goes through the page cache: the kernel
/// sends it as read-ahead, in the background, and a signal to the reader never interrupts it; a
/// reader killed while it waited would leave that page locked, every later reader of the file
/// stuck uninterruptibly until the answer came. Its `/proc/<tid>/stat` tells: gone, a zombie, or
/// a thread started at another time (the number used again). A value on the request's stack:
/// nothing is read or allocated unless an answer waits.
struct RequestOrigin {
    let tid: Int32
    private var started: Substring?

    init(_ tid: Int32) { self.tid = tid }

    mutating func isGone() -> Bool {
        guard tid > 0 else { return false }
        guard let stat = try? String(contentsOfFile: "/proc/\(tid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return true }
        // After the name: state, then 18 fields to the start time (proc(5): fields 3 and 22).
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 19, fields[0] != "Z", fields[0] != "X" else { return true }
        if started == nil { started = fields[19] }
        return started != fields[19]
    }
}

@inline(__always)
private func owner(_ req: fuse_req_t?) -> FuseMount {
    Unmanaged<FuseMount>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
}

/// Runs an operation and answers its errno if it throws. Unexpected errors are EIO and one log line.
/// Counted in `.marfafs/requests` with the time it took.
@inline(__always)
private func guarded(_ req: fuse_req_t?, _ op: RequestCounts.Op, _ body: (FuseMount) throws -> Void) {
    let m = owner(req)
    let start = RequestCounts.now()
    defer { m.requests.add(op, ns: RequestCounts.now() &- start) }
    do { try body(m) } catch let e as FSError {
        if e.code == .io { m.log.error("operation failed", metadata: ["op": "\(op)", "error": "\(e.message)"]) }
        fuse_reply_err(req, e.errno)
    } catch {
        m.log.error("operation failed", metadata: ["op": "\(op)", "error": "\(error)"])
        fuse_reply_err(req, EIO)
    }
}

/// The mount's user and group, read once: a file with no owner of its own is theirs (FS-31).
private let mountUser = (uid: getuid(), gid: getgid())

private func fill(_ st: inout stat, _ a: FileAttr) {
    st = stat()
    st.st_ino = UInt(a.ino)
    switch a.kind {
    // A directory counts its own two links and one per directory in it (`FileSystem.subdirectoryCount`).
    case .directory: st.st_mode = S_IFDIR; st.st_nlink = nlink_t(max(2, a.nlink))
    case .file: st.st_mode = a.special != 0 ? a.special : S_IFREG; st.st_nlink = nlink_t(a.nlink); st.st_rdev = UInt(a.rdev)
    case .symlink: st.st_mode = S_IFLNK; st.st_nlink = 1
    }
    st.st_mode |= mode_t(a.permissions)
    st.st_uid = a.uid ?? mountUser.uid; st.st_gid = a.gid ?? mountUser.gid
    st.st_size = Int(a.size)
    st.st_blksize = 4096
    st.st_blocks = Int((a.size + 511) / 512)
    func ts(_ ns: Int64) -> timespec { timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000)) }
    st.st_mtim = ts(a.mtimeNs); st.st_ctim = ts(a.ctimeNs ?? a.mtimeNs); st.st_atim = ts(a.atimeNs ?? a.mtimeNs)
}

/// A file or directory just made with permission bits other than its kind's default: they are set
/// (FS-31), as `create(2)` and `mkdir(2)` ask (the kernel has applied the umask).
private func withMode(_ m: FuseMount, _ a: FileAttr, _ mode: mode_t, _ reader: Int32) throws -> FileAttr {
    let bits = UInt16(truncatingIfNeeded: mode & 0o7777)
    guard bits != a.permissions else { return a }
    return try m.fs.setattr(a.ino, FileSystem.AttrChange(mode: bits), reader: reader)
}

/// A file, folder, symlink or node just made is its maker's, with their group (FS-31), as on a
/// disk: another user than the mount's (a mount with `--allow-other`), or the mount's own when the
/// name took back the identity of a file just removed (an editor's delete and create, FS-13),
/// whose owner was another. A local-only file the daemon may not give away (a mount by a user
/// other than root) stays the daemon's.
private func withOwner(_ m: FuseMount, _ a: FileAttr, _ req: fuse_req_t?) throws -> FileAttr {
    // Already the maker's (nil: the mount's user and group).
    guard let ctx = fuse_req_ctx(req)?.pointee, (a.uid ?? mountUser.uid, a.gid ?? mountUser.gid) != (ctx.uid, ctx.gid) else { return a }
    let change = FileSystem.AttrChange(uid: ctx.uid, gid: ctx.gid)
    if FileSystem.isLocalInode(a.ino) { return (try? m.fs.setattr(a.ino, change, reader: reader(req))) ?? a }
    return try m.fs.setattr(a.ino, change, reader: reader(req))
}

/// Answers with an inode, counted as a reference the kernel holds until it forgets it (FS-31).
private func replyEntry(_ m: FuseMount, _ req: fuse_req_t?, _ e: inout fuse_entry_param) {
    m.fs.kernelLooked(e.ino)
    if fuse_reply_entry(req, &e) != 0 { m.fs.kernelForgot(e.ino, 1) }
}

private func entryParam(_ a: FileAttr) -> fuse_entry_param {
    var e = fuse_entry_param()
    e.ino = a.ino
    e.generation = 1
    fill(&e.attr, a)
    e.attr_timeout = a.timeout
    e.entry_timeout = a.entryTimeout ?? a.timeout
    return e
}

/// A name from the kernel; names that are not UTF-8 are refused (EINVAL), never repaired.
private func name(_ p: UnsafePointer<CChar>?) throws -> String {
    guard let p, let s = String(validatingCString: p) else { throw FSError(.badName, "a name that is not UTF-8") }
    return s
}

/// Negative lookups are cached briefly: editors and shells probe for missing names often.
private let negativeTimeout = 1.0

extension FuseMount {
    func makeOperations() -> fuse_lowlevel_ops {
        var ops = fuse_lowlevel_ops()
        ops.`init` = { userdata, conn in
            guard let userdata, let conn else { return }
            let m = Unmanaged<FuseMount>.fromOpaque(userdata).takeUnretainedValue()
            let cap = conn.pointee.capable
            // Zero-message open: no OPEN/RELEASE round trips and the page cache is kept (performance.md).
            m.noOpen = (cap & UInt32(FUSE_CAP_NO_OPEN_SUPPORT)) != 0 && (cap & UInt32(FUSE_CAP_NO_OPENDIR_SUPPORT)) != 0
            conn.pointee.want &= ~UInt32(FUSE_CAP_WRITEBACK_CACHE)
            // O_TRUNC must reach the daemon as a SETATTR: with atomic O_TRUNC the kernel would fold it
            // into OPEN, which zero-message open never sends, and the old bytes past the new end would stay.
            conn.pointee.want &= ~UInt32(FUSE_CAP_ATOMIC_O_TRUNC)
            conn.pointee.want &= ~UInt32(FUSE_CAP_READDIRPLUS_AUTO)
            if (cap & UInt32(FUSE_CAP_READDIRPLUS)) != 0 { conn.pointee.want |= UInt32(FUSE_CAP_READDIRPLUS) }
            if (cap & UInt32(FUSE_CAP_AUTO_INVAL_DATA)) != 0 { conn.pointee.want |= UInt32(FUSE_CAP_AUTO_INVAL_DATA) }
            if (cap & UInt32(FUSE_CAP_PARALLEL_DIROPS)) != 0 { conn.pointee.want |= UInt32(FUSE_CAP_PARALLEL_DIROPS) }
            // The kernel caches ACLs (here: their absence), so `ls -l` stops asking for
            // system.posix_acl_access on every file.
            if (cap & UInt32(FUSE_CAP_POSIX_ACL)) != 0 { conn.pointee.want |= UInt32(FUSE_CAP_POSIX_ACL) }
            // The kernel keeps a symlink's target (the root's `vault`, followed by every absolute
            // path into the tree, asked for it at each one); a target that changes is dropped
            // (`Invalidation.target`).
            if (cap & UInt32(FUSE_CAP_CACHE_SYMLINKS)) != 0 { conn.pointee.want |= UInt32(FUSE_CAP_CACHE_SYMLINKS) }
            // Writes of up to 1 MiB per request (the kernel splits at 128 KiB otherwise).
            conn.pointee.max_write = 1 << 20
            m.log.info("fuse session ready", metadata: ["no_open": "\(m.noOpen)", "max_write": "\(conn.pointee.max_write)", "spin_us": "\(FuseMount.spinNs / 1000)"])
        }
        ops.lookup = { req, parent, cname in
            guarded(req, .lookup) { m in
                do {
                    var e = entryParam(try m.fs.lookup(parent: parent, name: try name(cname), reader: reader(req)))
                    replyEntry(m, req, &e)
                } catch let err as FSError where err.code == .notFound || err.code == .badName {
                    var e = fuse_entry_param()
                    e.entry_timeout = negativeTimeout
                    fuse_reply_entry(req, &e)
                }
            }
        }
        ops.forget = { req, ino, n in
            owner(req).requests.add(.forget, ns: 0)
            owner(req).fs.kernelForgot(ino, n)
            fuse_reply_none(req)
        }
        ops.forget_multi = { req, count, list in
            let m = owner(req)
            m.requests.add(.forget, ns: 0)
            for i in 0..<count { if let f = list?[i] { m.fs.kernelForgot(f.ino, f.nlookup) } }
            fuse_reply_none(req)
        }
        ops.getattr = { req, ino, _ in
            guarded(req, .getattr) { m in
                let a = try m.fs.getattr(ino, reader: reader(req))
                var st = stat(); fill(&st, a)
                fuse_reply_attr(req, &st, a.timeout)
            }
        }
        ops.setattr = { req, ino, attr, toSet, _ in
            guarded(req, .setattr) { m in
                // Size truncates; times, permission bits and owner are kept or refused (FS-28, FS-31).
                guard let st = attr?.pointee else { throw FSError(.invalid, "no attributes") }
                let set = { (flag: Int32) in (toSet & flag) != 0 }
                func ns(_ t: timespec) -> Int64 { Int64(t.tv_sec) * 1_000_000_000 + Int64(t.tv_nsec) }
                let now = Int64(Date().timeIntervalSince1970 * 1e9)
                var c = FileSystem.AttrChange()
                if set(FUSE_SET_ATTR_SIZE) { c.size = Int64(st.st_size) }
                if set(FUSE_SET_ATTR_MTIME_NOW) { c.mtimeNs = now } else if set(FUSE_SET_ATTR_MTIME) { c.mtimeNs = ns(st.st_mtim) }
                if set(FUSE_SET_ATTR_ATIME_NOW) { c.atimeNs = now } else if set(FUSE_SET_ATTR_ATIME) { c.atimeNs = ns(st.st_atim) }
                if set(FUSE_SET_ATTR_MODE) { c.mode = UInt16(truncatingIfNeeded: st.st_mode & 0o7777) }
                if set(FUSE_SET_ATTR_UID) { c.uid = st.st_uid }
                if set(FUSE_SET_ATTR_GID) { c.gid = st.st_gid }
                let a = try m.fs.setattr(ino, c, reader: reader(req))
                var out = stat(); fill(&out, a)
                fuse_reply_attr(req, &out, a.timeout)
            }
        }
        ops.readlink = { req, ino in
            guarded(req, .readlink) { m in
                let t = try m.fs.readlink(ino)
                _ = t.withCString { fuse_reply_readlink(req, $0) }
            }
        }
        ops.mknod = { req, parent, cname, mode, rdev in
            guarded(req, .mknod) { m in
                if (mode & S_IFMT) != S_IFREG && (mode & S_IFMT) != 0 {
                    // A FIFO, socket or device node: local-only in the tree (FS-32), EPERM elsewhere.
                    let a = try RequestScope.within { try m.fs.mknod(parent: parent, name: try name(cname), mode: UInt32(mode), rdev: UInt64(rdev)) }
                    var e = entryParam(try withOwner(m, a, req))
                    return replyEntry(m, req, &e)
                }
                let a = try RequestScope.within { try m.fs.create(parent: parent, name: try name(cname), reader: reader(req)) }
                var e = entryParam(try withOwner(m, try withMode(m, a, mode, reader(req)), req))
                replyEntry(m, req, &e)
            }
        }
        ops.mkdir = { req, parent, cname, mode in
            guarded(req, .mkdir) { m in
                let a = try RequestScope.within { try m.fs.mkdir(parent: parent, name: try name(cname), reader: reader(req)) }
                var e = entryParam(try withOwner(m, try withMode(m, a, mode, reader(req)), req))
                replyEntry(m, req, &e)
            }
        }
        ops.unlink = { req, parent, cname in
            guarded(req, .unlink) { m in
                try RequestScope.within { try m.fs.unlink(parent: parent, name: try name(cname), reader: reader(req)) }
                fuse_reply_err(req, 0)
            }
        }
        ops.rmdir = { req, parent, cname in
            guarded(req, .rmdir) { m in
                try RequestScope.within { try m.fs.rmdir(parent: parent, name: try name(cname), reader: reader(req)) }
                fuse_reply_err(req, 0)
            }
        }
        ops.symlink = { req, target, parent, cname in
            guarded(req, .symlink) { m in
                let a = try RequestScope.within { try m.fs.symlink(target: try name(target), parent: parent, name: try name(cname), reader: reader(req)) }
                var e = entryParam(try withOwner(m, a, req))
                replyEntry(m, req, &e)
            }
        }
        ops.rename = { req, parent, cname, newParent, newName, flags in
            guarded(req, .rename) { m in
                try RequestScope.within {
                    try m.fs.rename(parent: parent, name: try name(cname), newParent: newParent, newName: try name(newName),
                                    noReplace: (flags & 1) != 0, exchange: (flags & 2) != 0, reader: reader(req))
                }
                fuse_reply_err(req, 0)
            }
        }
        ops.link = { req, ino, newParent, newName in
            guarded(req, .link) { m in
                var e = entryParam(try RequestScope.within { try m.fs.link(ino: ino, newParent: newParent, newName: try name(newName)) })
                replyEntry(m, req, &e)
            }
        }
        ops.open = { req, ino, fi in
            let m = owner(req)
            if m.noOpen { fuse_reply_err(req, ENOSYS); return }
            marfafs_fi_set_cache(fi, 0)
            fuse_reply_open(req, fi)
        }
        ops.opendir = { req, ino, fi in
            let m = owner(req)
            if m.noOpen { fuse_reply_err(req, ENOSYS); return }
            marfafs_fi_set_cache(fi, 1)
            fuse_reply_open(req, fi)
        }
        ops.read = { req, ino, size, off, _ in
            guarded(req, .read) { m in
                var origin = RequestOrigin(reader(req))
                let bytes = try m.fs.read(ino, offset: Int64(off), size: size, reader: origin.tid) {
                    fuse_req_interrupted(req) != 0 || m.session.map { fuse_session_exited($0) != 0 } ?? true || origin.isGone()
                }
                _ = bytes.withUnsafeBytes { fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
            }
        }
        ops.write = { req, ino, buf, size, off, _ in
            guarded(req, .write) { m in
                let data = [UInt8](UnsafeRawBufferPointer(start: buf, count: size))
                let n = try m.fs.write(ino, offset: Int64(off), data: data, writer: reader(req))
                fuse_reply_write(req, n)
            }
        }
        ops.fallocate = { req, ino, mode, off, len, _ in
            guarded(req, .fallocate) { m in
                try m.fs.fallocate(ino, mode: mode, offset: Int64(off), length: Int64(len), writer: reader(req))
                fuse_reply_err(req, 0)
            }
        }
        ops.fsync = { req, ino, _, _ in
            guarded(req, .fsync) { m in try m.fs.fsync(ino); fuse_reply_err(req, 0) }
        }
        ops.fsyncdir = { req, ino, _, _ in
            guarded(req, .fsyncdir) { m in try m.fs.fsync(ino); fuse_reply_err(req, 0) }
        }
        ops.readdir = { req, ino, size, off, _ in
            guarded(req, .readdir) { m in try m.replyDir(req, ino, size, off, plus: false) }
        }
        ops.readdirplus = { req, ino, size, off, _ in
            guarded(req, .readdirplus) { m in try m.replyDir(req, ino, size, off, plus: true) }
        }
        ops.statfs = { req, _ in
            guarded(req, .statfs) { m in
                var sv = statvfs()
                let dir = (m.fs.store.path as NSString).deletingLastPathComponent
                if statvfs(dir.isEmpty ? "." : dir, &sv) != 0 { throw FSError(.io, "statvfs failed") }
                sv.f_namemax = 255
                fuse_reply_statfs(req, &sv)
            }
        }
        ops.setxattr = { req, ino, cname, value, size, flags in
            guarded(req, .setxattr) { m in
                let v = value.map { [UInt8](UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
                try RequestScope.within {
                    try m.fs.setxattr(ino, name: try name(cname), value: v, create: (Int(flags) & Int(XATTR_CREATE)) != 0,
                                      replace: (Int(flags) & Int(XATTR_REPLACE)) != 0)
                }
                fuse_reply_err(req, 0)
            }
        }
        ops.getxattr = { req, ino, cname, size in
            guarded(req, .getxattr) { m in
                let v = try m.fs.getxattr(ino, name: try name(cname))
                if size == 0 { fuse_reply_xattr(req, v.count); return }
                if size < v.count { throw FSError(.rangeError, "buffer too small") }
                _ = v.withUnsafeBytes { fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
            }
        }
        ops.listxattr = { req, ino, size in
            guarded(req, .listxattr) { m in
                var bytes: [UInt8] = []
                for n in try m.fs.listxattr(ino) { bytes += Array(n.utf8); bytes.append(0) }
                if size == 0 { fuse_reply_xattr(req, bytes.count); return }
                if size < bytes.count { throw FSError(.rangeError, "buffer too small") }
                _ = bytes.withUnsafeBytes { fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
            }
        }
        ops.removexattr = { req, ino, cname in
            guarded(req, .removexattr) { m in
                try RequestScope.within { try m.fs.removexattr(ino, name: try name(cname), reader: reader(req)) }
                fuse_reply_err(req, 0)
            }
        }
        ops.create = { req, parent, cname, mode, fi in
            guarded(req, .create) { m in
                guard (mode & S_IFMT) == S_IFREG || (mode & S_IFMT) == 0 else { throw FSError(.notPermitted, "only regular files") }
                let a = try RequestScope.within { try m.fs.create(parent: parent, name: try name(cname), reader: reader(req)) }
                var e = entryParam(try withOwner(m, try withMode(m, a, mode, reader(req)), req))
                marfafs_fi_set_cache(fi, 0)
                m.fs.kernelLooked(e.ino)
                if fuse_reply_create(req, &e, fi) != 0 { m.fs.kernelForgot(e.ino, 1) }
            }
        }
        return ops
    }

    func replyDir(_ req: fuse_req_t?, _ ino: fuse_ino_t, _ size: Int, _ off: off_t, plus: Bool) throws {
        let entries = try listings.entries(ino, offset: Int(off)) { try fs.readdir(ino) }
        var buf = [CChar](repeating: 0, count: size)
        var used = 0
        var i = Int(off)
        // Offsets: 1 = ".", 2 = "..", 3… = entries.
        while true {
            let entryName: String
            var a: FileAttr
            if i == 0 { entryName = "."; a = FileAttr(ino: ino, kind: .directory, size: 4096, mtimeNs: 0, nlink: 2, timeout: 0) }
            else if i == 1 { entryName = ".."; a = FileAttr(ino: ino, kind: .directory, size: 4096, mtimeNs: 0, nlink: 2, timeout: 0) }
            else if i - 2 < entries.count { entryName = entries[i - 2].name; a = entries[i - 2].attr }
            else { listings.done(ino); break }
            let n: Int = buf.withUnsafeMutableBufferPointer { p in
                let dst = p.baseAddress! + used
                let room = size - used
                if plus {
                    var e = entryParam(a)
                    // `.` and `..`, and an entry whose inode the kernel holds with attributes that
                    // last (kept true by invalidations), go without attributes: a `READDIRPLUS`
                    // entry with them makes the kernel drop the inode's cached POSIX ACL, and
                    // `ls -l` then asks for it again, file by file.
                    // (Node 0: the kernel takes the entry's name, number and type, and nothing else.)
                    if i < 2 || (a.timeout >= fs.cacheTimeout && fs.kernelHolds(a.ino)) { e.ino = 0 }
                    let n = fuse_add_direntry_plus(req, dst, room, entryName, &e, off_t(i + 1))
                    // An entry that fits is a reference the kernel takes (not `.` and `..`).
                    if e.ino != 0 && n <= room { fs.kernelLooked(e.ino) }
                    return n
                }
                var st = stat(); fill(&st, a)
                return fuse_add_direntry(req, dst, room, entryName, &st, off_t(i + 1))
            }
            if n > size - used { break }
            used += n
            i += 1
        }
        _ = buf.withUnsafeBufferPointer { fuse_reply_buf(req, $0.baseAddress, used) }
    }
}
