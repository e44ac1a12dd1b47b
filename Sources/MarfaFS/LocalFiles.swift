import Foundation
import MarfaStore

/// Local-only files (FS-32): a tool's directory in the vault's tree (`.git/`, and the other names
/// `LocalRules` gives) lives on the local disk beside the store, in `<store>-local/`, at the same
/// vault-relative path. It is never an item, never queued, never in `types/` or `tags/`; the
/// mount passes every operation on it through to that directory (a system call each, no store).
///
/// Lock order: `FileSystem`'s lock, then `lock` here. Nothing here calls back into `FileSystem`.
/// Names: a `rel` is a vault-relative path ("notes/.git/HEAD"); `real(rel)` is where it lives.
final class LocalFiles: @unchecked Sendable {
    /// Local inodes are numbered from here (items use their rowid, other nodes `1 << 40` on).
    static let base: UInt64 = 1 << 52
    static func owns(_ ino: UInt64) -> Bool { ino >= base && ino < base << 1 }

    let root: String
    private let lock = NSLock()
    /// The disk's inode number → ours (hard links share one, as on the disk), and ours → the paths
    /// known to name it, the latest first.
    private var byDisk: [UInt64: UInt64] = [:]
    private var paths: [UInt64: [String]] = [:]
    private var next = base
    /// Open descriptors by inode, most recently used last (reads and writes come without an
    /// open: the mount answers with zero-message opens).
    private var fds: [UInt64: Int32] = [:]
    private var fdOrder: [UInt64] = []
    private static let maxFds = 256
    /// Folders found missing here (most tree folders have no local side), so a name looked up or
    /// made in one, and the folder's own attributes, ask the disk nothing. Only this class makes
    /// anything here: each call that does ends with `madeNames`, which forgets them all; an
    /// answer found before a `madeNames` (an older `generation`) is not kept.
    private var absentFolders: Set<String> = []
    private var generation: UInt64 = 0

    init(store: String) { root = store + "-local" }

    func real(_ rel: String) -> String { rel.isEmpty ? root : root + "/" + rel }

    private func locked<T>(_ body: () throws -> T) rethrows -> T { lock.lock(); defer { lock.unlock() }; return try body() }

    // MARK: names and numbers

    /// The number of the file `st` describes, found at `rel`.
    private func number(_ st: Glibc.stat, _ rel: String) -> UInt64 {
        locked {
            let key = UInt64(st.st_ino)
            let i: UInt64
            if let known = byDisk[key] { i = known } else { i = next; next += 1; byDisk[key] = i }
            var p = paths[i] ?? []
            if p.first != rel {
                p.removeAll { $0 == rel }
                p.insert(rel, at: 0)
                if p.count > 8 { p.removeLast() }
                paths[i] = p
            }
            return i
        }
    }

    func rel(_ ino: UInt64) throws -> String {
        guard let r = locked({ paths[ino]?.first }) else { throw FSError(.stale, "local inode \(ino) is not known") }
        return r
    }

    /// `rel` no longer names the file `st` described; the number goes with the file's last name
    /// (the disk may give its inode to the next file: that file gets a number of its own).
    private func unnamed(_ rel: String, _ st: Glibc.stat) {
        locked {
            let key = UInt64(st.st_ino)
            guard let i = byDisk[key] else { return }
            paths[i]?.removeAll { $0 == rel }
            if st.st_nlink <= 1 || (st.st_mode & S_IFMT) == S_IFDIR || paths[i]?.isEmpty == true {
                byDisk[key] = nil
                paths[i] = nil
            }
        }
    }

    /// After a directory moved from `from` to `to`: the paths under it follow.
    private func moved(from: String, to: String) {
        locked {
            let prefix = from + "/"
            for (i, ps) in paths where ps.contains(where: { $0 == from || $0.hasPrefix(prefix) }) {
                paths[i] = ps.map { $0 == from || $0.hasPrefix(prefix) ? to + $0.dropFirst(from.count) : $0 }
            }
        }
    }

    private func lstatOrNil(_ rel: String) -> Glibc.stat? {
        atOrNil(rel) { dir, name in
            var st = Glibc.stat()
            return fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st : nil
        }
    }

    /// Whether `rel` exists here.
    func exists(_ rel: String) -> Bool {
        if !rel.isEmpty, isAbsent(VaultIndex.parent(rel)) { return false }
        return lstatOrNil(rel) != nil
    }

    /// Whether local folder `folder` is missing (asked of the disk once until something is made).
    private func isAbsent(_ folder: String) -> Bool {
        let seen: UInt64? = locked { absentFolders.contains(folder) ? nil : generation }
        guard let seen else { return true }
        guard lstatOrNil(folder) == nil else { return false }
        locked { if generation == seen { if absentFolders.count >= 4096 { absentFolders.removeAll() }; absentFolders.insert(folder) } }
        return true
    }

    /// Something was made or moved here: no folder is known missing any more.
    func madeNames() {
        locked { generation &+= 1; absentFolders.removeAll(keepingCapacity: true) }
    }

    /// `opendir` of local folder `rel`.
    private func openDirectory(_ rel: String) -> OpaquePointer? { atOrNil(rel) { Self.openDirectory($0, $1) } }

    /// Whether a tree folder holds local entries (a folder with `.git` in it is not empty).
    func hasEntries(_ folder: String) -> Bool {
        guard !isAbsent(folder), let d = openDirectory(folder) else { return false }
        defer { closedir(d) }
        while let e = readdir(d) {
            let name = Self.name(e)
            if name != "." && name != ".." { return true }
        }
        return false
    }

    /// The names of the directories in local folder `rel` (none when it has no local side).
    func subdirectories(_ rel: String) -> [String] {
        // Its link count says whether it holds any (a disk that stops counting says 1: listed).
        guard !isAbsent(rel), let st = lstatOrNil(rel), st.st_nlink != 2, let d = openDirectory(rel) else { return [] }
        defer { closedir(d) }
        var out: [String] = []
        while let e = readdir(d) {
            let name = Self.name(e)
            guard name != "." && name != ".." else { continue }
            if e.pointee.d_type == UInt8(DT_DIR) || (e.pointee.d_type == UInt8(DT_UNKNOWN) && isDirectory(rel.isEmpty ? name : rel + "/" + name)) {
                out.append(name)
            }
        }
        return out
    }

    private func isDirectory(_ rel: String) -> Bool { lstatOrNil(rel).map { $0.st_mode & S_IFMT == S_IFDIR } ?? false }

    private static func name(_ e: UnsafeMutablePointer<dirent>) -> String {
        withUnsafePointer(to: e.pointee.d_name) { p in p.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) } }
    }

    private static func fail(_ what: String) -> FSError { FSError.system(errno, what) }

    // MARK: attributes

    /// A local inode's attributes: by its path, or, once removed, by the descriptor still open on it.
    func attr(ino: UInt64) throws -> FileAttr {
        if let rel = locked({ paths[ino]?.first }), let a = try? attr(rel), a.ino == ino { return a }
        guard let f = locked({ fds[ino] }) else { throw FSError(.stale, "local inode \(ino) is gone") }
        var st = Glibc.stat()
        guard fstat(f, &st) == 0 else { throw Self.fail("fstat") }
        return Self.attr(st, ino: ino)
    }

    func attr(_ rel: String) throws -> FileAttr {
        var st = Glibc.stat()
        guard try at(rel, { fstatat($0, $1, &st, AT_SYMLINK_NOFOLLOW) }) == 0 else { throw Self.fail("lstat \(rel)") }
        return Self.attr(st, ino: number(st, rel))
    }

    static func attr(_ st: Glibc.stat, ino: UInt64) -> FileAttr {
        let type = st.st_mode & S_IFMT
        let kind: Node.Kind = type == S_IFDIR ? .directory : type == S_IFLNK ? .symlink : .file
        func ns(_ t: timespec) -> Int64 { Int64(t.tv_sec) * 1_000_000_000 + Int64(t.tv_nsec) }
        var a = FileAttr(ino: ino, kind: kind, size: Int64(st.st_size), mtimeNs: ns(st.st_mtim), nlink: UInt32(st.st_nlink), timeout: 1)
        let bits = UInt16(st.st_mode & 0o7777)
        a.mode = bits == 0 ? Store.noPermissionsMark : bits
        a.atimeNs = ns(st.st_atim)
        a.ctimeNs = ns(st.st_ctim)
        a.uid = st.st_uid; a.gid = st.st_gid
        if type == S_IFIFO || type == S_IFSOCK || type == S_IFCHR || type == S_IFBLK {
            a.special = type
            a.rdev = UInt64(st.st_rdev)
        }
        return a
    }

    /// The entries of a local directory, with their attributes.
    func list(_ rel: String) throws -> [DirEntry] {
        guard let d = openDirectory(rel) else { throw Self.fail("opendir \(rel)") }
        defer { closedir(d) }
        var out: [DirEntry] = []
        while let e = readdir(d) {
            let name = Self.name(e)
            if name == "." || name == ".." { continue }
            let child = rel.isEmpty ? name : rel + "/" + name
            if let a = try? attr(child) { out.append(DirEntry(name: name, attr: a)) }
        }
        return out
    }

    // MARK: bytes

    /// A descriptor on the file (`O_RDWR`, or read-only where writing is not allowed).
    private func fd(_ ino: UInt64) throws -> Int32 {
        if let f = locked({ fds[ino] }) { touch(ino); return f }
        let rel = try rel(ino)
        let f = try at(rel) { dir, name in
            let f = openat(dir, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
            return f < 0 && (errno == EACCES || errno == EROFS || errno == EISDIR) ? openat(dir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : f
        }
        guard f >= 0 else { throw Self.fail("open \(rel)") }
        return keep(f, for: ino)
    }

    /// Caches descriptor `f` for `ino` (one already cached wins), closing the least recently used
    /// beyond `maxFds`; returns the descriptor to use.
    private func keep(_ f: Int32, for ino: UInt64) -> Int32 {
        var use = f
        let closing: [Int32] = locked {
            if let old = fds[ino] { use = old; return [f] }
            fds[ino] = f; fdOrder.append(ino)
            var out: [Int32] = []
            while fdOrder.count > Self.maxFds { let o = fdOrder.removeFirst(); if let d = fds.removeValue(forKey: o) { out.append(d) } }
            return out
        }
        closing.forEach { close($0) }
        return use
    }

    private func touch(_ ino: UInt64) {
        locked { if let i = fdOrder.lastIndex(of: ino), i != fdOrder.count - 1 { fdOrder.remove(at: i); fdOrder.append(ino) } }
    }

    /// Lets go of a file's descriptor (the kernel forgot the inode).
    func forget(_ ino: UInt64) {
        let f: Int32? = locked {
            fdOrder.removeAll { $0 == ino }
            return fds.removeValue(forKey: ino)
        }
        if let f { close(f) }
    }

    func read(_ ino: UInt64, offset: Int64, size: Int) throws -> [UInt8] {
        let f = try fd(ino)
        var buf = [UInt8](repeating: 0, count: size)
        let n = buf.withUnsafeMutableBytes { pread(f, $0.baseAddress, size, off_t(offset)) }
        guard n >= 0 else { throw Self.fail("read") }
        buf.removeSubrange(n...)
        return buf
    }

    func write(_ ino: UInt64, offset: Int64, data: [UInt8]) throws -> Int {
        let f = try fd(ino)
        let n = data.withUnsafeBytes { pwrite(f, $0.baseAddress, data.count, off_t(offset)) }
        guard n >= 0 else { throw Self.fail("write") }
        return n
    }

    func fsync(_ ino: UInt64) throws {
        let rel = try rel(ino)
        if let st = lstatOrNil(rel), (st.st_mode & S_IFMT) == S_IFDIR {
            let d = try at(rel) { openat($0, $1, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
            guard d >= 0 else { throw Self.fail("open \(rel)") }
            defer { close(d) }
            if Glibc.fsync(d) != 0 { throw Self.fail("fsync") }
            return
        }
        if Glibc.fsync(try fd(ino)) != 0 { throw Self.fail("fsync") }
    }

    func fallocate(_ ino: UInt64, mode: Int32, offset: Int64, length: Int64) throws {
        if marfafs_fallocate(try fd(ino), mode, offset, length) != 0 { throw Self.fail("fallocate") }
    }

    // MARK: names

    /// Makes the folder that holds local entries of tree folder `folder` (and its parents).
    func makeContainer(_ folder: String) throws {
        try makeFolders(folder)
    }

    func create(_ rel: String, mode: UInt16) throws -> FileAttr {
        defer { madeNames() }
        let f = try at(rel) { openat($0, $1, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode_t(mode)) }
        guard f >= 0 else { throw Self.fail("create \(rel)") }
        let made: FileAttr
        do { made = try attr(rel) } catch { close(f); throw error }
        _ = keep(f, for: made.ino)
        return made
    }

    func mkdir(_ rel: String, mode: UInt16) throws -> FileAttr {
        defer { madeNames() }
        guard try at(rel, { mkdirat($0, $1, mode_t(mode)) }) == 0 else { throw Self.fail("mkdir \(rel)") }
        return try attr(rel)
    }

    /// A FIFO, socket or device node (`mode`: its type and permission bits, the umask applied).
    func mknod(_ rel: String, mode: UInt32, rdev: UInt64) throws -> FileAttr {
        defer { madeNames() }
        try at(rel) { dir, name in
            guard mknodat(dir, name, mode_t(mode), dev_t(rdev)) == 0 else { throw Self.fail("mknod \(rel)") }
            // The daemon's own umask must not narrow what the caller asked for.
            _ = fchmodat(dir, name, mode_t(mode & 0o7777), 0)
        }
        return try attr(rel)
    }

    func symlink(_ target: String, _ rel: String) throws -> FileAttr {
        defer { madeNames() }
        guard try at(rel, { symlinkat(target, $0, $1) }) == 0 else { throw Self.fail("symlink \(rel)") }
        return try attr(rel)
    }

    func readlink(_ ino: UInt64) throws -> String {
        var buf = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = try at(try rel(ino)) { readlinkat($0, $1, &buf, Int(PATH_MAX)) }
        guard n >= 0 else { throw Self.fail("readlink") }
        return String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    func unlink(_ rel: String) throws {
        let st = lstatOrNil(rel)
        guard try at(rel, { unlinkat($0, $1, 0) }) == 0 else { throw Self.fail("unlink \(rel)") }
        if let st { unnamed(rel, st) }
    }

    func rmdir(_ rel: String) throws {
        let st = lstatOrNil(rel)
        guard try at(rel, { unlinkat($0, $1, AT_REMOVEDIR) }) == 0 else { throw Self.fail("rmdir \(rel)") }
        if let st { unnamed(rel, st) }
    }

    /// `rename(2)` between two local paths, with its flags (no-replace, exchange).
    func rename(_ from: String, _ to: String, noReplace: Bool, exchange: Bool) throws {
        defer { madeNames() }
        let flags: UInt32 = (noReplace ? 1 : 0) | (exchange ? 2 : 0)
        let replaced = exchange ? nil : lstatOrNil(to)
        let rc = try renameAt(from, to, flags: flags)
        guard rc == 0 else { throw Self.fail("rename \(from)") }
        if let replaced, let now = lstatOrNil(to), now.st_ino != replaced.st_ino { unnamed(to, replaced) }
        if exchange {
            // Two names swapped: what is under them is looked up again (rare: never git's).
            locked {
                for (i, ps) in paths where ps.contains(where: { $0 == from || $0 == to || $0.hasPrefix(from + "/") || $0.hasPrefix(to + "/") }) {
                    paths[i] = ps.filter { !($0 == from || $0 == to || $0.hasPrefix(from + "/") || $0.hasPrefix(to + "/")) }
                }
            }
            for path in [from, to] { if let st = lstatOrNil(path) { _ = number(st, path) } }
            return
        }
        guard let st = lstatOrNil(to) else { return }
        locked { if let i = byDisk[UInt64(st.st_ino)] { paths[i]?.removeAll { $0 == from } } }
        _ = number(st, to)
        if (st.st_mode & S_IFMT) == S_IFDIR { moved(from: from, to: to) }
    }

    /// `renameat2(2)` of two local paths.
    private func renameAt(_ from: String, _ to: String, flags: UInt32) throws -> Int32 {
        try at(from) { d1, n1 in try at(to) { marfafs_renameat2(d1, n1, $0, $1, flags) } }
    }

    /// `truncate(2)` of (`dir`, `name`) from `at`.
    private static func truncate(_ dir: Int32, _ name: String, _ size: Int64) -> Int32 {
        let f = openat(dir, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW)
        guard f >= 0 else { return -1 }
        defer { close(f) }
        return ftruncate(f, off_t(size))
    }

    /// A tree folder was renamed: its local entries (and its sub-folders') go along.
    func moveFolder(from: String, to: String) throws {
        defer { madeNames() }
        guard exists(from) else { return }
        if exists(to), !hasEntries(to) { try? rmdir(to) }
        if !VaultIndex.parent(to).isEmpty { try makeContainer(VaultIndex.parent(to)) }
        guard try renameAt(from, to, flags: 0) == 0 else { throw Self.fail("moving the local files of \(from)") }
        moved(from: from, to: to)
    }

    /// A tree folder was removed: its (empty) container goes too.
    func dropContainer(_ folder: String) {
        if !folder.isEmpty, exists(folder), !hasEntries(folder) { try? rmdir(folder) }
    }

    func link(_ ino: UInt64, to rel: String) throws -> FileAttr {
        defer { madeNames() }
        let from = try self.rel(ino)
        guard try at(from, { d1, n1 in try at(rel) { linkat(d1, n1, $0, $1, 0) } }) == 0 else { throw Self.fail("link \(rel)") }
        return try attr(rel)
    }

    // MARK: attributes set

    func setattr(_ ino: UInt64, _ c: FileSystem.AttrChange) throws -> FileAttr {
        let rel = try rel(ino)
        let open = locked { fds[ino] }
        try at(rel) { dir, name in
            if let size = c.size {
                let rc = open.map { ftruncate($0, off_t(size)) } ?? Self.truncate(dir, name, size)
                if rc != 0 { throw Self.fail("truncate \(rel)") }
            }
            if let m = c.mode, fchmodat(dir, name, mode_t(m), 0) != 0 { throw Self.fail("chmod \(rel)") }
            if c.uid != nil || c.gid != nil {
                let u = c.uid.map { uid_t($0) } ?? uid_t.max, g = c.gid.map { gid_t($0) } ?? gid_t.max
                if fchownat(dir, name, u, g, AT_SYMLINK_NOFOLLOW) != 0 { throw Self.fail("chown \(rel)") }
            }
            if c.mtimeNs != nil || c.atimeNs != nil {
                func ts(_ ns: Int64?) -> timespec {
                    guard let ns else { return timespec(tv_sec: 0, tv_nsec: (1 << 30) - 2) }
                    return timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000))
                }
                let times = [ts(c.atimeNs), ts(c.mtimeNs)]
                if utimensat(dir, name, times, AT_SYMLINK_NOFOLLOW) != 0 { throw Self.fail("utimensat \(rel)") }
            }
        }
        return try attr(rel)
    }

    // MARK: extended attributes (user.* as on the disk below)

    func getxattr(_ ino: UInt64, _ name: String) throws -> [UInt8] {
        try at(try rel(ino)) { dir, file in
            let path = Self.xattrPath(dir, file)
            let n = lgetxattr(path, name, nil, 0)
            guard n >= 0 else { throw Self.fail("getxattr") }
            var buf = [UInt8](repeating: 0, count: n)
            let m = buf.withUnsafeMutableBytes { lgetxattr(path, name, $0.baseAddress, n) }
            guard m >= 0 else { throw Self.fail("getxattr") }
            return Array(buf.prefix(m))
        }
    }

    func setxattr(_ ino: UInt64, _ name: String, _ value: [UInt8], flags: Int32) throws {
        let rc = try at(try rel(ino)) { dir, file in
            value.withUnsafeBytes { lsetxattr(Self.xattrPath(dir, file), name, $0.baseAddress, value.count, flags) }
        }
        if rc != 0 { throw Self.fail("setxattr") }
    }

    func listxattr(_ ino: UInt64) throws -> [String] {
        try at(try rel(ino)) { dir, file in
            let path = Self.xattrPath(dir, file)
            let n = llistxattr(path, nil, 0)
            guard n >= 0 else { throw Self.fail("listxattr") }
            var buf = [CChar](repeating: 0, count: n)
            let m = llistxattr(path, &buf, n)
            guard m >= 0 else { throw Self.fail("listxattr") }
            return buf.prefix(m).split(separator: 0).map { String(decoding: $0.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        }
    }

    func removexattr(_ ino: UInt64, _ name: String) throws {
        if try at(try rel(ino), { lremovexattr(Self.xattrPath($0, $1), name) }) != 0 { throw Self.fail("removexattr") }
    }
}

/// glibc's `fallocate(2)` and `renameat2(2)` wrappers (Swift's Glibc module leaves them out).
@_silgen_name("fallocate64") private func marfafs_fallocate(_ fd: Int32, _ mode: Int32, _ offset: Int64, _ length: Int64) -> Int32
@_silgen_name("renameat2") private func marfafs_renameat2(_ olddirfd: Int32, _ oldpath: UnsafePointer<CChar>, _ newdirfd: Int32,
                                                        _ newpath: UnsafePointer<CChar>, _ flags: UInt32) -> Int32
/// <sys/xattr.h>, which Swift's Glibc module leaves out.
@_silgen_name("lgetxattr") private func lgetxattr(_ path: UnsafePointer<CChar>, _ name: UnsafePointer<CChar>, _ value: UnsafeMutableRawPointer?, _ size: Int) -> Int
@_silgen_name("lsetxattr") private func lsetxattr(_ path: UnsafePointer<CChar>, _ name: UnsafePointer<CChar>, _ value: UnsafeRawPointer?, _ size: Int, _ flags: Int32) -> Int32
@_silgen_name("llistxattr") private func llistxattr(_ path: UnsafePointer<CChar>, _ list: UnsafeMutablePointer<CChar>?, _ size: Int) -> Int
@_silgen_name("lremovexattr") private func lremovexattr(_ path: UnsafePointer<CChar>, _ name: UnsafePointer<CChar>) -> Int32
