import Foundation

/// The process behind a request of the mount (its thread group id; 0: not known, as for `import`)
/// and when it started (clock ticks since boot, `/proc/<pid>/stat`; 0: not known). A save's base
/// is kept per writer (FS-29): the threads of one program (an editor whose reads and writes run on
/// a pool of threads) are one writer, and a later program given the same id (ids are reused) is
/// another.
public struct Writer: Hashable, Sendable {
    public let process: Int32
    public let started: UInt64
    public init(process: Int32, started: UInt64 = 0) { self.process = process; self.started = started }
    public static let unknown = Writer(process: 0)
}

/// What each writer last saw of each text item, and the base of each save in progress (FS-29).
/// In memory, for the life of the mount; bounded (the least recently used records go first). A
/// remount starts with none: a save then merges against what the mount showed before the last
/// remote change no local save has followed (`items.shown_base`), else the item as it is.
///
/// Guarantees: every method is safe from any thread (one lock of its own, never held while
/// anything else is taken); nothing here touches the database.
///
/// Lock order: `SaveBases.lock` is a leaf (taken last, released before returning).
final class SaveBases: @unchecked Sendable {
    /// A save under way: the bytes its writer last saw (the merge's ancestor), and the item's
    /// bytes when it began (the other side: remote changes wait while an item has unsettled bytes,
    /// so the item is still that when the save settles).
    struct Save {
        var writer: Writer
        var base: [UInt8]
        var before: [UInt8]
        /// Begun by a truncate to nothing (a save in place): the writer's next calls write the
        /// text, and the settler waits for them longer (`Store.settleGivingWay`).
        var inPlace = false
        /// When it began (wall clock, nanoseconds).
        var beganNs: Int64 = 0
    }

    private struct Key: Hashable { var rowid: Int64; var writer: Writer }
    private struct Seen { var bytes: [UInt8]; var tick: UInt64 }

    private let lock = NSLock()
    /// (item, writer) → the bytes the writer last read or wrote.
    private var seen: [Key: Seen] = [:]
    /// Item → the bytes the mount last showed anyone (read by, or written by, any writer).
    private var shown: [Int64: Seen] = [:]
    /// Item → the save under way (its bytes written, not yet settled).
    private var saves: [Int64: Save] = [:]
    /// (item, writer) → the conflicted copy made of that writer's save: its later overlapping
    /// saves go on in that copy, so one concurrent edit makes one copy however often it is saved.
    private var copies: [Key: String] = [:]
    private var tick: UInt64 = 0
    private var bytes = 0

    static let maxRecords = 4096
    static let maxBytes = 64 << 20

    /// Where a read of `rowid` from the store begins: pass it to `noteRead` with the bytes read.
    func readBegins(_ rowid: Int64) -> UInt64 {
        lock.lock(); defer { lock.unlock() }
        return shown[rowid]?.tick ?? 0
    }

    /// A writer read `b`, the item's bytes. They become what the mount showed unless something
    /// else was recorded as shown since the read began (`since`, from `readBegins`): a read of the
    /// store's snapshot that ends after a save settled must not make its older bytes the base of
    /// the next save. nil: read under the lock that orders every change (a staged file).
    func noteRead(_ rowid: Int64, by w: Writer, _ b: [UInt8], since: UInt64? = nil) {
        lock.lock(); defer { lock.unlock() }
        if w != .unknown { put(&seen, Key(rowid: rowid, writer: w), b) }
        if since == nil || since == (shown[rowid]?.tick ?? 0) { put(&shown, rowid, b) }
        bound()
    }

    /// The save under way on `rowid` settles with bytes `b`, which the file shows from now on (its
    /// row held them unsettled) and which its writer saw: taken and recorded as both in one step,
    /// so a save that begins meanwhile never gets an older base than the bytes it replaces.
    /// Returns the save (nil: none was recorded) and a mark for `settled(_:shows:mark:)`.
    func settles(_ rowid: Int64, wrote b: [UInt8]) -> (save: Save?, mark: UInt64) {
        lock.lock(); defer { lock.unlock() }
        let save = saves.removeValue(forKey: rowid)
        if let w = save?.writer, w != .unknown { put(&seen, Key(rowid: rowid, writer: w), b) }
        put(&shown, rowid, b)
        let mark = tick
        bound()
        return (save, mark)
    }

    /// The settle left the item other bytes than the save's (the save conflicted: the item keeps
    /// its text): they are what the mount shows, unless something newer was recorded since `mark`.
    /// (A merge result nobody has read yet was shown to no one: not recorded.)
    func settled(_ rowid: Int64, shows b: [UInt8], mark: UInt64) {
        lock.lock(); defer { lock.unlock() }
        if shown[rowid]?.tick == mark { put(&shown, rowid, b) }
        bound()
    }

    /// What `w` last read or wrote of `rowid`; nil: no record.
    func seen(_ rowid: Int64, by w: Writer) -> [UInt8]? {
        lock.lock(); defer { lock.unlock() }
        return w == .unknown ? nil : seen[Key(rowid: rowid, writer: w)]?.bytes
    }

    /// What the mount last showed anyone of `rowid`; nil: no record.
    func shown(_ rowid: Int64) -> [UInt8]? {
        lock.lock(); defer { lock.unlock() }
        return shown[rowid]?.bytes
    }

    /// Records a save that begins; a save already under way (more writes before it settled) keeps
    /// the base it began with. Returns whether this one began.
    @discardableResult
    func begin(_ rowid: Int64, _ save: Save) -> Bool {
        lock.lock(); defer { lock.unlock() }
        if saves[rowid] != nil { return false }
        saves[rowid] = save
        return true
    }

    func isSaving(_ rowid: Int64) -> Bool { lock.lock(); defer { lock.unlock() }; return saves[rowid] != nil }

    /// The items with a save in place under way, and when each began.
    func savingInPlace() -> [(rowid: Int64, beganNs: Int64)] {
        lock.lock(); defer { lock.unlock() }
        return saves.filter(\.value.inPlace).map { ($0.key, $0.value.beganNs) }
    }

    /// `w` changed the bytes of `rowid` while it is staged (a write, or a save over it): no save
    /// begins there (it settles as it is committed), so the records of what the mount showed
    /// before, and of what `w` saw, are dropped here, as a settling save replaces them
    /// (`settles`). Kept, the next save by a program with no record of its own (`mv` of a new
    /// file over it) took those older bytes for its base against the item's newer ones: a
    /// conflict with the item's own earlier save. Dropped, not replaced: a file appended to while
    /// something reads it would be copied whole at every write.
    func wroteStaged(_ rowid: Int64, by w: Writer) {
        lock.lock(); defer { lock.unlock() }
        if let s = shown.removeValue(forKey: rowid) { bytes -= s.bytes.count }
        if w != .unknown, let s = seen.removeValue(forKey: Key(rowid: rowid, writer: w)) { bytes -= s.bytes.count }
    }

    /// Forgets what concerns an item that is gone.
    func forget(_ rowid: Int64) {
        lock.lock(); defer { lock.unlock() }
        saves[rowid] = nil
        if let s = shown.removeValue(forKey: rowid) { bytes -= s.bytes.count }
        for k in seen.keys where k.rowid == rowid { bytes -= seen.removeValue(forKey: k)!.bytes.count }
        for k in copies.keys where k.rowid == rowid { copies[k] = nil }
    }

    func copy(of rowid: Int64, by w: Writer) -> String? {
        lock.lock(); defer { lock.unlock() }
        return w == .unknown ? nil : copies[Key(rowid: rowid, writer: w)]
    }

    func setCopy(_ id: String, of rowid: Int64, by w: Writer) {
        lock.lock(); defer { lock.unlock() }
        if w != .unknown { copies[Key(rowid: rowid, writer: w)] = id }
    }

    // MARK: bounds (lock held)

    private func put<K: Hashable>(_ table: inout [K: Seen], _ k: K, _ b: [UInt8]) {
        tick += 1
        bytes += b.count - (table[k]?.bytes.count ?? 0)
        table[k] = Seen(bytes: b, tick: tick)
    }

    /// Keeps the records within bounds; call after `put`, never inside it (it is given one of them).
    private func bound() {
        if seen.count + shown.count > Self.maxRecords || bytes > Self.maxBytes { evict() }
    }

    /// Drops the older half of the records.
    private func evict() {
        let ticks = (seen.values.map(\.tick) + shown.values.map(\.tick)).sorted()
        let cut = ticks[ticks.count / 2]
        for (k, v) in seen where v.tick < cut { seen[k] = nil; bytes -= v.bytes.count }
        for (k, v) in shown where v.tick < cut { shown[k] = nil; bytes -= v.bytes.count }
        if copies.count > Self.maxRecords { copies.removeAll() }
    }
}
