import Foundation

/// Blob files being written through the mount (FS-28): each lives as a plain file in a folder next
/// to the store (`<store>-spool/<rowid>`) from its first write past the staging limit until it
/// settles, when its bytes enter the `sqlar` cache once (`Store.settleSpooled`). A write is one
/// `pwrite(2)`, a read one `pread(2)`: writing N bytes costs O(N) time, N bytes of temporary
/// space, and no memory beyond the request. The spool file's size and mtime are the item's.
///
/// `kill -9` loses nothing written: the bytes are in the kernel's page cache, and the next open of
/// the store settles every spool file whose item is still unsettled (`Store.recoverSpools`).
/// `fsync` of the item is an `fdatasync` of its spool file.
///
/// Thread-safe. Each file counts its changes, so a settle that copied the bytes can tell whether
/// a write came in meanwhile.
public final class Spool: @unchecked Sendable {
    public let directory: String
    private let lock = NSLock()
    private var files: [Int64: Entry] = [:]

    struct Entry {
        var fd: Int32
        var changes: UInt64
    }

    init(directory: String) {
        self.directory = directory
    }

    deinit { for e in files.values { close(e.fd) } }

    func path(_ rowid: Int64) -> String { directory + "/" + String(rowid) }

    /// Whether item `rowid`'s bytes are in a spool file.
    public func has(_ rowid: Int64) -> Bool {
        lock.lock(); defer { lock.unlock() }
        return files[rowid] != nil
    }

    public var rowids: [Int64] {
        lock.lock(); defer { lock.unlock() }
        return Array(files.keys)
    }

    /// How many changes the file has had (a settle compares it before and after its copy).
    public func changes(_ rowid: Int64) -> UInt64? {
        lock.lock(); defer { lock.unlock() }
        return files[rowid]?.changes
    }

    /// Creates the spool file of `rowid`, filled by `fill` (which writes through the given
    /// descriptor), and registers it.
    func create(_ rowid: Int64, fill: (Int32) throws -> Void) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let p = path(rowid)
        let fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Self.error("cannot create \(p)") }
        do { try fill(fd) } catch { close(fd); unlink(p); throw error }
        lock.lock(); files[rowid] = Entry(fd: fd, changes: 0); lock.unlock()
    }

    /// Registers a spool file left by an earlier run.
    func adopt(_ rowid: Int64) throws {
        let fd = open(path(rowid), O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { throw Self.error("cannot open \(path(rowid))") }
        lock.lock(); files[rowid] = Entry(fd: fd, changes: 0); lock.unlock()
    }

    /// Writes at `offset`; returns the file's size and mtime (ns).
    public func write(_ rowid: Int64, offset: Int64, data: [UInt8]) throws -> (size: Int64, mtimeNs: Int64) {
        try withFile(rowid) { fd in try Self.pwriteAll(fd, data[...], at: offset, path: path(rowid)) }
    }

    public func truncate(_ rowid: Int64, size: Int64) throws -> (size: Int64, mtimeNs: Int64) {
        try withFile(rowid) { fd in
            guard ftruncate(fd, off_t(size)) == 0 else { throw Self.error("cannot truncate \(path(rowid))") }
        }
    }

    /// Sets the file's mtime (`touch -d`, `rsync -a`).
    public func setMtime(_ rowid: Int64, ns: Int64) throws -> (size: Int64, mtimeNs: Int64) {
        try withFile(rowid) { fd in
            var ts = [timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000)),
                      timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000))]
            guard futimens(fd, &ts) == 0 else { throw Self.error("cannot set the time of \(path(rowid))") }
        }
    }

    public func read(_ rowid: Int64, offset: Int64, count: Int) throws -> [UInt8] {
        lock.lock()
        guard let fd = files[rowid]?.fd else { lock.unlock(); throw StoreError.notFound("spool file \(rowid)") }
        lock.unlock()
        return try Self.pread(fd, offset: offset, count: count, path: path(rowid))
    }

    public func attributes(_ rowid: Int64) throws -> (size: Int64, mtimeNs: Int64) {
        lock.lock(); defer { lock.unlock() }
        guard let fd = files[rowid]?.fd else { throw StoreError.notFound("spool file \(rowid)") }
        return try Self.fstat(fd)
    }

    public func sync(_ rowid: Int64) throws {
        lock.lock()
        guard let fd = files[rowid]?.fd else { lock.unlock(); return }
        lock.unlock()
        guard fdatasync(fd) == 0 else { throw Self.error("cannot sync \(path(rowid))") }
    }

    /// Gives `from`'s file to `to` (an editor's or rsync's save of a large blob over an item).
    func move(_ from: Int64, to: Int64) throws {
        lock.lock(); defer { lock.unlock() }
        guard let e = files.removeValue(forKey: from) else { throw StoreError.notFound("spool file \(from)") }
        if let old = files.removeValue(forKey: to) { close(old.fd) }
        guard Foundation.rename(path(from), path(to)) == 0 else {
            files[from] = e
            throw Self.error("cannot rename \(path(from))")
        }
        files[to] = Entry(fd: e.fd, changes: e.changes + 1)
    }

    /// Removes the spool file of `rowid` (its bytes are in the store now, or the item is gone).
    func remove(_ rowid: Int64) {
        lock.lock()
        let e = files.removeValue(forKey: rowid)
        lock.unlock()
        if let e { close(e.fd) }
        unlink(path(rowid))
    }

    /// Spool files on disk (an earlier run's), by rowid.
    func onDisk() -> [Int64] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).compactMap { Int64($0) }
    }

    private func withFile(_ rowid: Int64, _ body: (Int32) throws -> Void) throws -> (size: Int64, mtimeNs: Int64) {
        lock.lock(); defer { lock.unlock() }
        guard var e = files[rowid] else { throw StoreError.notFound("spool file \(rowid)") }
        try body(e.fd)
        e.changes += 1
        files[rowid] = e
        return try Self.fstat(e.fd)
    }

    static func fstat(_ fd: Int32) throws -> (size: Int64, mtimeNs: Int64) {
        var st = Glibc.stat()
        guard Foundation.fstat(fd, &st) == 0 else { throw error("cannot stat a spool file") }
        return (Int64(st.st_size), Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec))
    }

    /// Writes all of `bytes` at `offset` (short writes and EINTR retried).
    static func pwriteAll(_ fd: Int32, _ bytes: ArraySlice<UInt8>, at offset: Int64, path: String) throws {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, $0.count - done, off_t(offset) + off_t(done)) }
            if n < 0 { if errno == EINTR { continue }; throw error("cannot write \(path)") }
            done += n
        }
    }

    static func pread(_ fd: Int32, offset: Int64, count: Int, path: String) throws -> [UInt8] {
        var buf = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = buf.withUnsafeMutableBytes { Foundation.pread(fd, $0.baseAddress! + done, count - done, off_t(offset) + off_t(done)) }
            if n < 0 { if errno == EINTR { continue }; throw error("cannot read \(path)") }
            if n == 0 { break }
            done += n
        }
        if done < count { buf.removeSubrange(done...) }
        return buf
    }

    /// A store error for a failed system call; a full disk is `noSpace`.
    static func error(_ what: String) -> StoreError {
        let e = errno
        if e == ENOSPC || e == EDQUOT { return .noSpace("\(what): \(String(cString: strerror(e)))") }
        return .io("\(what): \(String(cString: strerror(e)))")
    }
}
