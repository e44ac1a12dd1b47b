import Foundation
import MarfaModel

/// Files made through the mount start out staged (FS-14, FS-15): their bytes live in memory and
/// every change is appended to a journal file next to the store (`<store>-staged`) before the
/// request is answered, so a killed daemon loses nothing that was written. A staged file reaches
/// SQLite when the mount is quiet (the settle window), when it grows past `maxFileBytes`, or
/// when anything else must see it (a rename, an attribute, the queue): `Store.commitStaged`
/// writes every staged file in one transaction and starts a new journal generation. A burst of
/// new files, or an editor's temporary file, thus costs one append per request instead of a
/// transaction.
///
/// The journal: a header (`MFSJ`, its format, its identity: JournalFile.swift), then records of
/// `length u32, checksum u32 (FNV-1a of the payload), payload`. A record whose length or checksum
/// does not hold ends the journal (a write torn by the kill). Each commit appends a record that
/// begins the next generation (truncating the file first only once it has grown past
/// `compactBytes`: a truncate costs as much as an fsync); the store's `meta` row
/// `staging_generation` names the generation not yet committed. Recovery replays every
/// generation from that one on: older ones were committed, and a later one follows a commit a
/// power cut may have undone.
///
/// A disk short of room (FS-28) has no room for the files twice (in the journal and in the
/// store), nor for the journal written again: commits are then made in place, a batch that fits
/// at a time, with no new generation; the store names the batch's records dead (`Dead`) as it
/// stores its files, and their blocks are punched out of the journal, for the next batch.
///
/// The file is grown ahead of its records in written zeros (`growth` at a time), so an `fsync`
/// writes the new records, not the file's size and blocks too. A zero length ends the records as
/// a torn one does: recovery finds their end by what the file holds, not by its size. Live
/// changes and recovery apply records the same way (`apply(_:to:)`).
///
/// Thread-safe on its own (one lock; `hasOverlay` has its own, for the sync engine's reads inside
/// a store transaction). Reached only through the store (Store+Staging), which decides what is
/// staged and when it is committed; the journal's record format is in StagingJournal.swift.
///
/// The settler's commit writes the store with no lock held (`beginCommit`, `finishCommit`): the
/// files it commits are *committing* meanwhile. They stay staged (reads get their bytes), but
/// whatever would change one, or decide on a change by asking whether it is staged (`contains`,
/// `isNew`, `generation(ifStaged:)`), waits until the commit is over; then it is in the store.
/// Every other file is changed, made and dropped as usual. Lock order: the filesystem's lock,
/// then this one, then the store's writer; a wait for committing files is never made inside a
/// store transaction (the commit it waits for needs the writer).
final class Staging: @unchecked Sendable {
    typealias Key = StagedKey
    typealias File = StagedFile

    let path: String
    /// Guards everything below but `overlays`. Taken before the store's writer (a full commit
    /// holds it through its transaction), never while a transaction is open. Signalled when a
    /// commit in flight ends.
    private let lock = NSCondition()
    /// The files of the commit in flight (`beginCommit`), if any.
    private var committing: Set<Key> = []
    /// The file, and where each staged file's records are in it.
    private var journalFile: JournalFile
    private var generationValue: Int64 = 0
    /// Whether an `fsync` made records of this generation durable: files that stay through a
    /// partial commit are then made durable again in the next one.
    private var syncedThisGeneration = false
    private var ready = false
    /// The generation a failed reset still owes, and whether it starts the journal over.
    private var resetTo: (generation: Int64, startingOver: Bool)?
    /// What a full disk left owed (`FullDiskDebt.journal`): the journal's committed records are
    /// dropped at the next chance whatever its size (`compactBytes`).
    let debt: FullDiskDebt
    private var compactOwed: Bool {
        get { debt.journal.load(ordering: .relaxed) }
        set { debt.journal.store(newValue, ordering: .relaxed) }
    }
    private var files: [Key: File] = [:]
    /// When each staged file was first staged and last changed (wall clock, nanoseconds; not
    /// journaled: a file's mtime may be anything `touch -d` set). A partial commit takes the files
    /// quiet since a time, or staged for long enough.
    private var changedNs: [Key: (first: Int64, last: Int64)] = [:]
    private var totalBytesValue = 0
    /// Items with staged new bytes, for the sync engine's reads inside a transaction (own lock).
    private let overlayLock = NSLock()
    private var overlays: Set<Int64> = []

    init(path: String, debt: FullDiskDebt = FullDiskDebt()) { self.path = path; self.debt = debt; journalFile = JournalFile(path: path) }

    deinit { journalFile.close() }

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock(); defer { lock.unlock() }
        return try body()
    }

    /// Waits (the lock held, released while waiting) until none of `keys` is being committed.
    private func awaitCommitted(_ keys: [Key]) {
        while !committing.isEmpty, keys.contains(where: committing.contains) { lock.wait() }
    }

    /// Whether item `rowid` has staged new bytes (safe inside a store transaction).
    func hasOverlay(_ rowid: Int64) -> Bool {
        overlayLock.lock(); defer { overlayLock.unlock() }
        return overlays.contains(rowid)
    }

    var generation: Int64 { locked { generationValue } }
    var totalBytes: Int { locked { totalBytesValue } }
    var isEmpty: Bool { locked { files.isEmpty } }
    var count: Int { locked { files.count } }
    /// A staged file as it is now, to read (a committing one too: the same bytes as its row's).
    func file(_ key: Key) -> File? { locked { files[key] } }
    func list() -> [File] { locked { all } }
    /// Whether `key` is staged, once a commit in flight that holds it is over.
    func contains(_ key: Key) -> Bool { locked { awaitCommitted([key]); return files[key] != nil } }
    /// The generation the journal is in, if `key` is staged (one look: a commit may come between two).
    func generation(ifStaged key: Key) -> Int64? { locked { awaitCommitted([key]); return files[key] != nil ? generationValue : nil } }
    /// Whether a staged file is a new one (no row yet), not new bytes of an existing item.
    func isNew(_ key: Key) -> Bool {
        locked {
            awaitCommitted([key])
            if let f = files[key], case .overlay = f.origin { return false }
            return files[key] != nil
        }
    }
    private var all: [File] { Self.ordered(files) }

    // MARK: changes (each appended to the journal before it is applied in memory)

    /// A new item (`item.id` already minted); its bytes come by `write`.
    func createItem(_ item: NewItem, rowid: Int64) throws -> File {
        let now = Store.ns(Date())
        var n = item
        n.content = []
        return try record(.create(File(key: Key(.item, rowid), origin: .item(n, createdNs: now), bytes: [], mtimeNs: now)))
    }

    func createScratch(dir: String, name: String, rowid: Int64) throws -> File {
        try record(.create(File(key: Key(.scratch, rowid), origin: .scratch(dir: dir, name: name), bytes: [], mtimeNs: Store.ns(Date()))))
    }

    /// Writes `data` at `offset` (zeros fill a gap); the caller checks the size limits.
    func write(_ key: Key, offset: Int64, data: [UInt8]) throws -> File {
        try record(.write(key, offset: offset, data: data, mtimeNs: Store.ns(Date())))
    }

    func truncate(_ key: Key, size: Int64) throws -> File {
        try record(.truncate(key, size: size, mtimeNs: Store.ns(Date())))
    }

    /// Sets a staged file's mtime (`touch -d`, `rsync -a`): a truncate to its own size.
    func setMtime(_ key: Key, ns: Int64) throws -> File {
        try locked {
            awaitCommitted([key])
            guard let f = files[key] else { throw StoreError.notFound("staged file \(key.rowid)") }
            return try recordLocked(.truncate(key, size: f.size, mtimeNs: ns))
        }
    }

    /// An editor's save (FS-13): item `target` takes the bytes of new staged file `source`, which
    /// is gone; the item's file is staged until the next commit. Returns the item's staged file.
    func saveOver(_ target: Int64, from source: Key) throws -> File {
        try locked {
            awaitCommitted([source, Key(.item, target)])
            // The file keeps its time, as a rename keeps a file's (rsync sets it before the rename).
            let f = try recordLocked(.saveOver(source, into: target, mtimeNs: files[source]?.mtimeNs ?? Store.ns(Date())))
            if case .overlay = f.origin { overlayLock.lock(); overlays.insert(target); overlayLock.unlock() }
            return f
        }
    }

    /// Renames or moves a new item that has no row yet (`rsync`'s temporary file renamed to its
    /// name); nil if `key` is not such an item (committed meanwhile, or new bytes of a stored item).
    func move(_ key: Key, type: String, fileName: String, tags: [String]) throws -> File? {
        try locked {
            awaitCommitted([key])
            guard let f = files[key], case .item = f.origin else { return nil }
            return try recordLocked(.move(key, type: type, fileName: fileName, tags: tags))
        }
    }

    /// Forgets a staged file (a scratch file removed before it was ever committed).
    func drop(_ key: Key) throws {
        try locked {
            awaitCommitted([key])
            guard files[key] != nil else { return }
            _ = try recordLocked(.drop(key))
        }
    }

    /// Makes every appended record durable (FS-15 `fsync` of a staged file). The lock is not held
    /// through the sync: writes go on meanwhile.
    func sync() throws {
        let fd = try locked { try journalFile.open(); syncedThisGeneration = true; return journalFile.fd }
        guard fdatasync(fd) == 0 else { throw StoreError.io("cannot sync \(path): \(String(cString: strerror(errno)))") }
    }

    /// Appends a change to the journal, then applies it in memory; returns the file it leaves
    /// changed (for a save over an item, the item's).
    @discardableResult
    private func record(_ rec: Record) throws -> File {
        try locked { try recordLocked(rec) }
    }

    private func recordLocked(_ rec: Record) throws -> File {
        awaitCommitted(rec.touched)
        if let k = rec.key, files[k] == nil { throw StoreError.notFound("staged file \(k.rowid)") }
        try append(rec)
        let touched = rec.touched
        totalBytesValue -= touched.reduce(0) { $0 + (files[$1]?.bytes.count ?? 0) }
        Self.apply(rec, to: &files)
        totalBytesValue += touched.reduce(0) { $0 + (files[$1]?.bytes.count ?? 0) }
        let now = Store.ns(Date())
        for k in touched { changedNs[k] = files[k] == nil ? nil : (changedNs[k]?.first ?? now, now) }
        // What a drop leaves is nothing; its caller does not look.
        return touched.last.flatMap { files[$0] } ?? File(key: rec.key ?? Key(.item, 0), origin: .overlay, bytes: [], mtimeNs: 0)
    }

    // MARK: commit and recovery (Store+Staging)

    /// Commits every staged file: `write` puts them in the store (one transaction, naming
    /// generation `g + 1` as the one not yet committed), then they are forgotten and the journal
    /// starts generation `g + 1`. The lock is held throughout, so no change falls between what
    /// was written and what is forgotten; a commit in flight ends first. `durable` makes the
    /// store's commit durable, called when the journal starts over (its records are gone then).
    func commit(_ write: Write, durable: () throws -> Void) throws {
        try locked {
            while !committing.isEmpty { lock.wait() }
            let list = all
            if list.isEmpty { return }
            let g = generationValue
            try journalFile.open()   // where the records end (a journal just recovered is not open yet)
            try write(list, g, nil)
            files.removeAll()
            journalFile.owned.removeAll()
            changedNs.removeAll()
            syncedThisGeneration = false
            totalBytesValue = 0
            overlayLock.lock(); overlays.removeAll(); overlayLock.unlock()
            // Starting the journal over drops records an fsync may have made durable: the commit
            // that holds their files is made durable first, else they stay (owed). The store has
            // the files now: a generation not begun here is begun before the next record.
            let wanted = journalFile.end > Self.compactBytes || compactOwed
            let compact = wanted && (try? durable()) != nil
            compactOwed = wanted && !compact
            try? startGenerationLocked(g + 1, startingOver: compact)
        }
    }

    /// Begins the settler's commit (the lock held only for this step): the files that have not
    /// changed since `quiet.since`, or were staged before `quiet.stagedBefore`, and new bytes of
    /// stored items (overlays) whatever their time. A file being written (rsync's temporary file
    /// between its create and its rename) stays staged, so its next change, its mode and its rename
    /// cost no transaction, while one written on and on is committed all the same. The journal
    /// begins generation `g + 1` with the files that stay, written whole; every change from now
    /// on is recorded there. The returned files are committing until `finishCommit`; nil if
    /// nothing is to be committed. One commit is in flight at a time.
    ///
    /// `room`: the disk is short of room (FS-28), this many bytes to spare: the commit is made in
    /// place (`beginInPlace`), unless the journal cannot be punched (an older build's format).
    func beginCommit(quiet: (since: Int64, stagedBefore: Int64), room: Int? = nil) throws -> PendingCommit? {
        try locked {
            while !committing.isEmpty { lock.wait() }
            let list = all
            let stays = list.filter { staysStaged($0, quiet) }
            if stays.count == list.count { return nil }
            if let room, journalFile.id != nil { return beginInPlace(list.filter { !staysStaged($0, quiet) }, room: room, quiet: quiet) }
            let g = generationValue
            let mark = journalFile.end, ownedBefore = journalFile.owned
            do {
                try append(.begin(g + 1))
                generationValue = g + 1
                // The records that stay are durable again, if they were: later commits sync too.
                for rec in Self.records(of: stays) { try append(rec) }
                if syncedThisGeneration, !stays.isEmpty { try journalFile.sync() } else { syncedThisGeneration = false }
            } catch {
                // A full disk midway: the journal is cut back to where it was, all in generation
                // `g`. Left as it was, a replay would take the new generation's half (a file's
                // create without its bytes) after the file's whole records, and empty the file.
                cutBack(to: mark)
                journalFile.owned = ownedBefore
                generationValue = g
                throw error
            }
            let staying = Set(stays.map(\.key))
            let committed = list.filter { !staying.contains($0.key) }
            committing = Set(committed.map(\.key))
            return PendingCommit(files: committed, generation: g, quiet: quietOnes(committed, quiet), nextGeneration: mark, dead: nil)
        }
    }

    /// A commit in place (the lock held): the first of `candidates` that fit in half of `room`, or
    /// one that fits in it (none: it waits for room), in the journal's generation: the store names
    /// their records dead (`Dead`, with their rows), given back once it is durable (`finishCommit`).
    private func beginInPlace(_ candidates: [File], room: Int, quiet: (since: Int64, stagedBefore: Int64)) -> PendingCommit? {
        var chosen: [File] = [], bytes = 0
        for f in candidates where bytes + f.bytes.count <= (chosen.isEmpty ? room : room / 2) {
            chosen.append(f)
            bytes += f.bytes.count
        }
        guard !chosen.isEmpty else { return nil }
        let made = chosen.flatMap { journalFile.owned[$0.key] ?? [] } + journalFile.history
        committing = Set(chosen.map(\.key))
        return PendingCommit(files: chosen, generation: generationValue, quiet: quietOnes(chosen, quiet), nextGeneration: journalFile.end,
                             dead: journalFile.dead(adding: made), madeDead: made)
    }

    private func quietOnes(_ files: [File], _ quiet: (since: Int64, stagedBefore: Int64)) -> Set<Key> {
        Set(files.filter { changedNs[$0.key].map { $0.last <= quiet.since } ?? false }.map(\.key))
    }

    /// Ends a commit begun by `beginCommit`: `write` puts its files in the store (naming
    /// generation `g + 1`) with no lock held, then they are forgotten here. A crash before the
    /// store's commit replays both generations; after it, `g + 1` alone, which holds every file
    /// that stayed and every change since the commit began. If `write` fails, the files stay
    /// staged (their records are in generation `g`, which the store still names).
    /// A commit in place syncs the journal first: what the store names dead is then on disk, and
    /// no record appended after a crash falls inside it.
    func finishCommit(_ c: PendingCommit, _ write: Write, durable: () throws -> Void) throws {
        defer { locked { committing.removeAll(); lock.broadcast() } }
        if c.dead != nil { try locked { try journalFile.sync() } }
        try write(c.files, c.generation, c.dead)
        let compact: Bool = locked {
            for f in c.files {
                files.removeValue(forKey: f.key); changedNs.removeValue(forKey: f.key); journalFile.owned.removeValue(forKey: f.key)
            }
            if let d = c.dead {
                journalFile.named(d, madeDead: c.madeDead)
            } else {
                // The store names `g + 1`: records before it are history to a replay.
                journalFile.owned = journalFile.owned.mapValues { $0.filter { $0.lowerBound >= c.nextGeneration } }
                journalFile.namedFrom = c.nextGeneration
            }
            totalBytesValue = files.values.reduce(0) { $0 + $1.bytes.count }
            let done = c.files.compactMap { f -> Int64? in if case .overlay = f.origin { return f.key.rowid }; return nil }
            overlayLock.lock(); overlays.subtract(done); overlayLock.unlock()
            return c.dead != nil || journalFile.end > Self.compactBytes || compactOwed
        }
        guard compact else { return }
        // The records of generation `g` go only once the store's commit is durable (synced without
        // the lock: changes go on being appended, and no other commit begins meanwhile). Failing
        // that (a full disk), the journal stays whole for a later commit (or `compactIfOwed`) to
        // compact. It keeps every file still staged (those that stayed, and those made since).
        // A commit in place gives back the blocks of what it made dead.
        let isDurable = (try? durable()) != nil
        locked {
            if c.dead != nil {
                if isDurable { journalFile.punchDead() }
                // The WAL holds the batch: cut (`Store.reclaimAfterFullDisk`), its room is the next one's.
                compactOwed = true
                debt.wal.store(true, ordering: .relaxed)
            } else if isDurable, (try? startOver(generation: c.generation + 1)) != nil { compactOwed = false } else { compactOwed = true }
        }
    }

    /// Whether a commit with `quiet` leaves `f` staged (the lock held): a new file changed since
    /// `quiet.since` and staged after `quiet.stagedBefore`.
    private func staysStaged(_ f: File, _ quiet: (since: Int64, stagedBefore: Int64)) -> Bool {
        if case .overlay = f.origin { return false }
        guard let t = changedNs[f.key] else { return false }
        return t.last > quiet.since && t.first > quiet.stagedBefore
    }

    /// Replaces the journal by one that holds generation `g` with `files` only (the lock held):
    /// written beside it, made durable, renamed over it. A crash leaves one or the other, whole.
    private func rewrite(generation g: Int64, _ files: [File]) throws {
        let old = journalFile
        do {
            journalFile = try JournalFile.new(at: path + ".new")
            journalFile.namedFrom = journalFile.end
            try append(.begin(g))
            for rec in Self.records(of: files) { try append(rec) }
            try journalFile.sync()
            guard journalFile.rename(over: path) else { throw Spool.error("cannot replace \(path)") }
        } catch {
            if journalFile.path != old.path { journalFile.close(); unlink(journalFile.path) }
            journalFile = old
            throw error
        }
        old.close()
        syncedThisGeneration = true
    }

    /// Appends go on in the recovered generation, its files staged (their commit met a full disk).
    func resume() throws { try locked { try journalFile.open(); resetTo = nil; ready = true; debt.met() } }

    /// Drops the journal's committed records if a full disk left them there (`compactOwed`, read
    /// before the lock is taken: the settler asks at every pass) and no commit is in flight
    /// (`durable` first, then `startOver`); failing, it stays owed. Meanwhile what commits in place
    /// made dead gives its blocks back, and the history (`JournalFile.history`) is named dead by
    /// `name` (the journal synced first) and given back: room a disk with none for a batch has.
    func compactIfOwed(durable: () throws -> Void, name: (Dead) throws -> Void) {
        guard compactOwed else { return }
        locked {
            guard compactOwed, committing.isEmpty, journalFile.isOpen, ready else { return }
            journalFile.trimGrowth()
            let history = journalFile.history
            if !history.isEmpty, let all = journalFile.dead(adding: history), (try? journalFile.sync()) != nil, (try? name(all)) != nil {
                journalFile.named(all, madeDead: history)
            }
            guard (try? durable()) != nil else { return }
            journalFile.punchDead()
            if (try? startOver(generation: generationValue)) != nil { compactOwed = false }
        }
    }

    /// Drops committed generations' records (the lock held, the store's commits durable): cut in
    /// place with nothing staged (a full disk has no room for a new file), else `rewrite`, if the
    /// disk has room for what stays twice over (else the attempt would take the room requests
    /// need, and fail: it waits until nothing is staged).
    private func startOver(generation g: Int64) throws {
        if files.isEmpty { return try startGenerationLocked(g, startingOver: true) }
        guard journalFile.freeBytes > 2 * (totalBytesValue + Int(Self.growth)) else { throw StoreError.noSpace("no room to write the staging journal again") }
        try rewrite(generation: g, all)
    }

    /// Renames the journal aside, whole (`<journal>.unrecovered-<time>`), and forgets what it
    /// staged (its records name rows the store does not have); returns the new name.
    func setAside() throws -> String {
        try locked {
            journalFile.close()
            journalFile = JournalFile(path: path)
            let aside = path + ".unrecovered-\(Int(Date().timeIntervalSince1970))"
            guard rename(path, aside) == 0 else { throw StoreError.io("cannot set \(path) aside: \(String(cString: strerror(errno)))") }
            files.removeAll(); changedNs.removeAll(); totalBytesValue = 0; ready = false
            overlayLock.withLock { overlays.removeAll() }
            return aside
        }
    }

    /// Puts recovered files back in memory (their records are in the journal already).
    func restore(_ list: [File], generation g: Int64) {
        locked {
            generationValue = g
            for f in list { files[f.key] = f; totalBytesValue += f.bytes.count }
            let restored = list.compactMap { f -> Int64? in if case .overlay = f.origin { return f.key.rowid }; return nil }
            overlayLock.lock(); overlays.formUnion(restored); overlayLock.unlock()
        }
    }

    /// Starts generation `g` (the store's `meta` already says `g`); the journal starts over
    /// when `fresh` (what it holds is history).
    func startGeneration(_ g: Int64, fresh: Bool = false) throws {
        try locked { try startGenerationLocked(g, startingOver: fresh) }
    }

    /// `startingOver`: the journal is emptied first (the caller made the commit of what it holds
    /// durable); else the generation's record is appended.
    private func startGenerationLocked(_ g: Int64, startingOver: Bool) throws {
        ready = false
        resetTo = (g, startingOver)
        generationValue = g
        try journalFile.open()
        if startingOver || journalFile.end < 8 {
            try journalFile.startOver()
        }
        ready = true
        let at = journalFile.end
        try append(.begin(g))
        journalFile.namedFrom = at
    }

    /// The files the journal holds from generation `g` on (the ones the store has not committed),
    /// and the last generation it names; `dead`: the records the store names dead, skipped (if
    /// they are this journal's) and punched again, the store `durable` (a kill before the punch).
    func recover(generation g: Int64, dead named: Dead?, durable: () throws -> Void) throws -> (files: [File], last: Int64) {
        try locked {
            // A rewrite the kill cut short (`rewrite`): the journal it was to replace is whole.
            unlink(path + ".new")
            guard let data = FileManager.default.contents(atPath: path) else { return ([], g) }
            let bytes = [UInt8](data)
            let id = JournalFile.readHeader(bytes[...])?.id
            let skip = named.flatMap { $0.journal == id ? $0 : nil }
            guard let found = Self.read(bytes, from: g, skipping: skip?.ranges ?? []) else { return ([], g) }
            journalFile.dead = skip
            journalFile.owned = found.owned
            journalFile.namedFrom = off_t(found.from)
            if let skip { journalFile.named(skip, madeDead: skip.ranges); try durable(); try journalFile.open(); journalFile.punchDead() }
            // A record torn by the kill ends the journal: cut off (appended behind it, no record is read).
            if found.end < bytes.count {
                try journalFile.open()
                guard journalFile.cut(to: off_t(found.end)) else { throw Spool.error("cannot cut the torn end of \(path)") }
            }
            guard let current = found.current, current >= g else { return ([], max(g, found.current ?? g)) }
            return (Self.ordered(found.files), current)
        }
    }

    // MARK: the file (the lock held)

    /// Appends `rec` where the records end; the file it leaves changed owns its range.
    private func append(_ rec: Record) throws {
        // Until the store's generation is known (recovery), or after a failed reset, nothing may be
        // appended: the records would belong to a generation recovery ignores.
        if !ready, let r = resetTo { try startGenerationLocked(r.generation, startingOver: r.startingOver) }
        guard ready else { throw StoreError.io("the staging journal \(path) is not ready") }
        do {
            try journalFile.append(rec)
        } catch {
            if case StoreError.noSpace = error { debt.met() }
            throw error
        }
    }

    /// Ends the journal at `offset` (the lock held); the file grows again at the next record.
    private func cutBack(to offset: off_t) { journalFile.cut(to: offset) }
}
