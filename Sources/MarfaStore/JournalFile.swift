import Foundation

/// The staging journal's file (`Staging` decides what goes in it; StagingJournal.swift has its
/// records): where its records end, the zeros it is grown in ahead of them, its identity, and the
/// holes punched where records of committed files were.
///
/// Format 2 begins with `MFSJ`, the format, and a random 64-bit identity the store names with the
/// ranges of records it has made dead (`Staging.Dead`): a journal started over is another one, and
/// ranges named for an earlier one do not apply to it. Format 1 (`MFSJ`, 1: an older build's) has
/// no identity: it is read and appended to, never punched.
///
/// It also knows where each staged file's records are (`owned`: from the generation the store
/// names on; a save over an item takes its source's), which a commit in place makes dead.
///
/// Not thread-safe: `Staging` holds it under its lock.
struct JournalFile {
    private(set) var path: String
    private(set) var fd: Int32 = -1
    /// Where the records end (only this value writes the file, always there). Zeros follow, up to
    /// `allocated`, the file's size.
    private(set) var end: off_t = 0
    private var allocated: off_t = 0
    /// The identity in a format 2 header; nil for format 1, or a file not yet read.
    private(set) var id: UInt64?
    /// Where each staged file's records are.
    var owned: [StagedKey: [Range<off_t>]] = [:]
    /// The records the store names dead in this journal (commits in place), and those whose
    /// blocks are still to be given back (their commit was not yet durable).
    var dead: Staging.Dead?
    private var unpunched: [Range<off_t>] = []
    /// Whether the file is grown in zeros ahead of its records: not while a full disk's room is
    /// owed (`trimGrowth`), where those zeros are room the store needs.
    var growsAhead = true
    /// Where the generation the store names begins (its `begin` record): the records before it
    /// are history to a replay (their files are in the store).
    var namedFrom: off_t = 0
    /// The history before `namedFrom`, if the store does not name it dead yet (a commit in place
    /// names it: a journal that filled the disk holds the records of files committed before).
    var history: [Range<off_t>] {
        guard id != nil else { return [] }
        let r = Self.headerLength..<max(Self.headerLength, namedFrom)
        if r.isEmpty || (dead?.ranges.contains { $0.lowerBound <= r.lowerBound && $0.upperBound >= r.upperBound } ?? false) { return [] }
        return [r]
    }

    init(path: String) { self.path = path }

    var isOpen: Bool { fd >= 0 }

    /// The length of a format 2 header.
    static let headerLength: off_t = 16

    /// The header of a new journal with identity `id`.
    static func header(id: UInt64) -> [UInt8] {
        var h = Array("MFSJ".utf8)
        Record.putU32(&h, 2)
        withUnsafeBytes(of: id.littleEndian) { h += $0 }
        return h
    }

    /// A journal's header: its length and identity (nil for format 1); nil if `bytes` do not
    /// begin with one.
    static func readHeader(_ bytes: ArraySlice<UInt8>) -> (length: Int, id: UInt64?)? {
        let b = Array(bytes.prefix(Int(headerLength)))
        guard b.count >= 8, Array(b[0..<4]) == Array("MFSJ".utf8) else { return nil }
        var r = Record.Reader(bytes: b, at: 4)
        switch try? r.u32() {
        case 1: return (8, nil)
        case 2:
            guard let id = try? r.i64() else { return nil }
            return (Int(headerLength), UInt64(bitPattern: id))
        default: return nil
        }
    }

    /// Opens the file, whose records end where it does (recovery cut off what followed).
    mutating func open() throws {
        if fd >= 0 { return }
        fd = Foundation.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StoreError.io("cannot open \(path): \(String(cString: strerror(errno)))") }
        end = lseek(fd, 0, SEEK_END)
        allocated = end
        var head = [UInt8](repeating: 0, count: Int(Self.headerLength))
        let n = head.withUnsafeMutableBytes { pread(fd, $0.baseAddress!, $0.count, 0) }
        id = n > 0 ? Self.readHeader(head[0..<n])?.id : nil
    }

    func close() { if fd >= 0 { _ = Foundation.close(fd) } }

    /// Empties the file and writes a new header (a new identity).
    mutating func startOver() throws {
        try open()
        guard ftruncate(fd, 0) == 0 else { throw StoreError.io("cannot reset \(path): \(String(cString: strerror(errno)))") }
        end = 0; allocated = 0
        owned = [:]; dead = nil; unpunched = []; namedFrom = 0; growsAhead = true
        let fresh = UInt64.random(in: 1...UInt64.max)
        try write(Self.header(id: fresh))
        id = fresh
    }

    /// A new file at `path` (made or emptied), with a new header.
    static func new(at path: String) throws -> JournalFile {
        var f = JournalFile(path: path)
        f.fd = Foundation.open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard f.fd >= 0 else { throw StoreError.io("cannot open \(path): \(String(cString: strerror(errno)))") }
        do { try f.startOver() } catch { f.close(); unlink(path); throw error }
        return f
    }

    /// Takes `path` as its name (renamed over it); false if the rename failed.
    mutating func rename(over target: String) -> Bool {
        guard Foundation.rename(path, target) == 0 else { return false }
        path = target
        return true
    }

    /// The bytes its file system has free (0 if it cannot say).
    var freeBytes: Int {
        var sv = statvfs()
        guard fd >= 0, fstatvfs(fd, &sv) == 0 else { return 0 }
        return Int(sv.f_bavail) * Int(sv.f_frsize)
    }

    func sync() throws {
        guard fdatasync(fd) == 0 else { throw StoreError.io("cannot sync \(path): \(String(cString: strerror(errno)))") }
    }

    /// Appends `rec` where the records end (`length u32, checksum u32, payload`); the file it
    /// leaves changed owns its range. A record half written (a full disk) would end the journal
    /// for every later one: the file is cut back to the records before it.
    mutating func append(_ rec: Record) throws {
        var out = rec.encoded(headroom: 8)
        let payload = out.count - 8
        let sum = Record.checksum(out[8...])
        out.withUnsafeMutableBytes { b in
            b.storeBytes(of: UInt32(payload).littleEndian, toByteOffset: 0, as: UInt32.self)
            b.storeBytes(of: sum.littleEndian, toByteOffset: 4, as: UInt32.self)
        }
        let start = end
        do {
            try write(out)
        } catch {
            cut(to: start)
            throw error
        }
        Staging.own(rec, start..<end, &owned)
    }

    /// The records named dead with `more` named too (nil for a journal with no identity).
    func dead(adding more: [Range<off_t>]) -> Staging.Dead? {
        id.map { Staging.Dead(journal: $0, ranges: (dead?.ranges ?? []) + more) }
    }

    /// The store names `all` dead now, `made` among them (their blocks still taken).
    mutating func named(_ all: Staging.Dead, madeDead made: [Range<off_t>]) {
        dead = all
        unpunched += made
    }

    /// Gives back the zeros grown ahead of the records (they need no record named dead: nothing
    /// follows them) and grows no more ahead until `growsAhead` is set again.
    mutating func trimGrowth() {
        growsAhead = false
        if fd >= 0, allocated > end { cut(to: end) }
    }

    /// Gives back the blocks of records the store has made dead, its commit durable.
    mutating func punchDead() {
        if unpunched.isEmpty || punch(unpunched) { unpunched.removeAll() }
    }

    /// Ends the records at `offset`; the file grows again at the next write.
    @discardableResult
    mutating func cut(to offset: off_t) -> Bool {
        let done = ftruncate(fd, offset) == 0
        end = offset; allocated = offset
        return done
    }

    /// Writes `bytes` where the records end, growing the file first if they do not fit.
    mutating func write(_ bytes: [UInt8]) throws {
        if end + off_t(bytes.count) > allocated, growsAhead { grow(toHold: off_t(bytes.count)) }
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, $0.count - done, end) }
            if n < 0 {
                if errno == EINTR { continue }
                throw Spool.error("cannot write \(path)")
            }
            done += n
            end += off_t(n)
        }
        allocated = max(allocated, end)
    }

    /// Grows the file in zeros to hold `count` more bytes and `Staging.growth` beyond. Failing that
    /// (a full disk), it stays as it was: the record is written at its end all the same.
    private mutating func grow(toHold count: off_t) {
        let target = end + count + Staging.growth, zeros = [UInt8](repeating: 0, count: 64 << 10)
        var at = allocated
        while at < target {
            let n = zeros.withUnsafeBytes { pwrite(fd, $0.baseAddress!, min($0.count, Int(target - at)), at) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { _ = ftruncate(fd, allocated); return }
            at += off_t(n)
        }
        allocated = target
    }

    /// Gives the disk back the blocks of `ranges` (records the store has made dead), the file's
    /// size kept; false if the file system cannot (it then keeps them until the journal starts
    /// over). Only a journal with an identity is punched: its reader skips the ranges the store
    /// names, whatever they hold.
    func punch(_ ranges: [Range<off_t>]) -> Bool {
        guard id != nil, fd >= 0 else { return false }
        guard let fallocate = Self.fallocate else { return false }
        for r in ranges where !r.isEmpty {
            guard fallocate(fd, Self.punchHole | Self.keepSize, r.lowerBound, r.count) == 0 else { return false }
        }
        return true
    }

    /// glibc's `fallocate(2)` (Swift's Glibc leaves it out: it is a GNU extension), and the flags
    /// of linux/falloc.h.
    private static let fallocate: (@convention(c) (Int32, Int32, off_t, off_t) -> Int32)? = {
        guard let f = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "fallocate") else { return nil }
        return unsafeBitCast(f, to: (@convention(c) (Int32, Int32, off_t, off_t) -> Int32).self)
    }()
    private static let keepSize: Int32 = 0x01, punchHole: Int32 = 0x02
}
