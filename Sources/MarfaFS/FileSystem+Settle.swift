import Foundation
import MarfaModel
import MarfaStore

/// Settling (FS-14): writes commit their bytes at once; a file whose last write is older than
/// `settleWindow` is parsed and queued by a background thread, in batches. Any operation whose
/// queued mutation must follow the file's create or update settles everything first.
extension FileSystem {
    /// Records a lean write in the catalog: size and time change, names do not.
    func wroteUnsettled(_ r: Int64, size: Int64, mtimeNs: Int64) {
        guard var s = catalog.items[r] else { return }
        s.size = size; s.mtimeNs = mtimeNs
        if TypeSchema.isBlobType(s.type) { s.blobRef = nil }
        catalog.items[r] = s
        settler.noteWrite()
    }

    /// Which blob files being written (spool files) a `settleNow` takes into the cache.
    enum SpoolScope {
        /// All of them but trashed items' (an explicit sync, an unmount).
        case all
        /// None: a removal (it must work on a full disk, FS-28), or an operation that names no file.
        case none
        /// Only those of these nodes: an operation queues a mutation about them, which must follow
        /// their own upload and update. Copying every other large file being written into the cache
        /// for each `mkdir` or `rename` nearby made writing a large file quadratic.
        case of([Node?])
    }

    /// Settles every unsettled text file now, and the spool files `spools` names, and brings the
    /// catalog up to date. Call with the lock held (the invalidations go to the notifier thread,
    /// which never takes the lock).
    func settleNow(spools: SpoolScope = .all) throws {
        let spoolRows: [Int64]
        switch spools {
        case .all: spoolRows = spoolsToSettle()
        case .none: spoolRows = []
        case .of(let nodes):
            spoolRows = nodes.compactMap { n -> Int64? in
                if case .item(let r)? = n, store.spool.has(r) { return r }
                return nil
            }
        }
        // A removal's mutation needs only the files written before it settled first: with none
        // written since everything last settled, the rest (links naming a name that came or went,
        // folders' times) waits for the settler's pass. Each `unlink` of `rm -rf` did it all.
        let removal: Bool
        if case .none = spools { removal = true } else { removal = false }
        guard (removal ? settler.mayHaveWrittenFiles : settler.mayHaveWork || store.hasPending) || !spoolRows.isEmpty || !settledUnseen.isEmpty else { return }
        try wrap { try store.commitStaged() }
        // What every read of `.marfafs/*` (`sync --wait`, `status`) and an unmount wait for:
        // removals and folders recorded beside the store too (written by the commit's own
        // transaction if it made one; else one of their own). A removal's own settling leaves them.
        if !removal { try wrap { try store.flushPending() } }
        let rows = try wrap { try store.settle() } + settledUnseen
        settledUnseen = []
        let spooled = spoolRows.isEmpty ? [] : try wrap { try store.settleSpools(spoolRows) }
        // Spool files left waiting keep the background thread awake for them.
        if spoolsToSettle().isEmpty { settler.settledAll(roomOwed: store.owesRoom) }
        saveDirTimes()
        notify(try settled(rows + spooled))
    }

    /// After rows settled (with the lock held): the permission bits new files were given are
    /// stored, the catalog takes the rows as they are now, and what the store announced is
    /// followed; returns what the kernel must forget. `read`: the rows' facts read before the
    /// lock was taken, taken if the store has not been written since.
    func settled(_ rows: [Int64], read: Store.FactsRead? = nil) throws -> [Invalidation] {
        applyStagedModes()
        var inv: [Invalidation] = []
        // Read in one transaction: nothing the loop does changes another item's row, tags or links.
        let facts = try wrap { try read.map(store.facts) ?? store.facts(rowids: rows) }
        for r in rows { inv += try refreshItem(r, facts: facts) }
        return inv + followStore(store.takeAnnouncements()) + resolvePendingLinks()
    }

    /// Settles what an operation on `nodes` needs settled before it queues a mutation about them
    /// (a file's rename): their staged bytes committed, their own rows settled (their create or
    /// update goes first) and their blob files taken into the cache. Other written files settle
    /// in their own time: a rename in the middle of `rsync -a` does not wait for every file
    /// written before it. Call with the lock held.
    func settleOnly(_ nodes: [Node?]) throws {
        let present = nodes.compactMap { $0 }
        let keys = present.compactMap(stagedKey)
        // New files among them are settled as they are committed, with the bits they were given.
        var atCommit: [Int64] = []
        if !keys.isEmpty {
            var modes: [Int64: UInt16] = [:]
            for k in keys where k.kind == .item { modes[k.rowid] = catalog.stagedModes[k.rowid] }
            atCommit = try wrap { try store.commitStaged(settling: keys, modes: modes) }
            for r in atCommit { catalog.stagedModes[r] = nil }
        }
        let rows = present.compactMap { n -> Int64? in
            switch n {
            case .item(let r), .tagEntry(_, let r): return r
            default: return nil
            }
        }
        guard !rows.isEmpty || !atCommit.isEmpty else { return }
        let unseen = rows.filter { settledUnseen.remove($0) != nil }
        // With no file written since everything last settled, none of them has bytes to settle:
        // the store is not asked (after any commit, its reading connection maps the file anew).
        let done = settler.mayHaveWrittenFiles ? try wrap { try store.settle(rowids: rows) } : []
        let spooled = try wrap { try store.settleSpools(rows.filter { store.spool.has($0) }) }
        // Nothing settled here: the rest (other writers' changes, links naming new names) is the
        // settler's. Each attribute `cp -a` reads of a settled file did it all again.
        let now = atCommit + done + spooled + unseen
        if !now.isEmpty { notify(try settled(now)) }
    }

    /// The staging key of a file that is staged (not yet in the store), to act on: a file the
    /// settler is committing is waited for (it is in the store after).
    func stagedKey(_ n: Node) -> StagedKey? {
        guard let k = Self.stagingKey(n) else { return nil }
        return store.isStaged(k) ? k : nil
    }

    /// A staged file as it is now, to read: one being committed too (no wait).
    func stagedToRead(_ n: Node) -> StagedFile? {
        Self.stagingKey(n).flatMap(store.stagedFile)
    }

    private static func stagingKey(_ n: Node) -> StagedKey? {
        switch n {
        case .item(let r): return StagedKey(.item, r)
        case .scratch(let s): return StagedKey(.scratch, s)
        default: return nil
        }
    }

    /// Starts the background settler; `stop` (at unmount) settles what is left.
    public func startSettling() {
        settler.start { [weak self] first in self?.settleQuietFiles(firstOfRound: first) ?? false }
    }

    public func stopSettling() {
        settler.stop()
        do {
            try locked { try settleNow(); saveDirTimes(); saveTreeDirs(); try wrap { try store.saveItemNumbers() } }
            try store.flushPending()
        } catch {
            log.error("settling at unmount failed; the next mount settles", metadata: ["error": "\(error)"])
        }
    }

    /// Blob files being written (FS-28) settle once they have had no write for `spoolWindow`
    /// seconds: hashed and copied into the cache outside the lock, then made the item's bytes
    /// under it (unless a write came meanwhile).
    func settleQuietSpools() {
        if store.spool.rowids.isEmpty { return }
        let quietSince = Int64((Date().timeIntervalSince1970 - settler.spoolWindow) * 1e9)
        for r in locked({ spoolsToSettle() }) {
            do {
                guard let (_, mtime) = try? store.spool.attributes(r), mtime <= quietSince,
                      let cached = try store.cacheSpool(r) else { continue }
                let inv: [Invalidation] = try locked {
                    guard try wrap({ try store.finishSpool(cached) }) else { return [] }
                    return try refreshItem(r)
                }
                notify(inv)
            } catch {
                noteError(error)
                log.error("settling a blob failed; retried in a few seconds", metadata: ["item": "\(r)", "error": "\(error)"])
                settler.retryAfter(5)
            }
        }
        // Blob files still waiting: looked at again once their window has passed.
        if !locked({ spoolsToSettle() }).isEmpty { settler.retryAfter(settler.spoolWindow / 2) }
    }

    /// Blob files being written that settle in the background: not those of trashed items (they
    /// settle if restored; a purge removes them). Call with the lock held.
    func spoolsToSettle() -> [Int64] {
        store.spool.rowids.filter { catalog.items[$0]?.state != .trashed }
    }

    /// One batch of files quiet for the settle window; true if more may be waiting. The store
    /// work runs outside the lock (requests go on); only the catalog update takes it.
    /// `firstOfRound`: the first pass of a round of passes (`Settler.commitTurn`).
    func settleQuietFiles(firstOfRound: Bool) -> Bool {
        let before = Int64((Date().timeIntervalSince1970 - settler.window) * 1e9)
        // A batch's transaction holds the store's writer while it parses; it gives way to a
        // request that must write (a `chmod` of a file already committed, a `mkdir`), which
        // waits with the core's lock held, after the file it is settling.
        let batch = 16
        // The room a full disk left taken (the journal's committed records, the WAL), given back
        // once there is room for it (FS-28); a pass that fails for want of room is what needs it.
        defer {
            store.reclaimAfterFullDisk()
            // Not all given back (a reader held the log at the moment of its cut, or the disk is
            // still full): another pass in a second, not only at the next write.
            if store.owesRoom { settler.retryAfter(1); settler.wake() }
        }
        do {
            // Folders made and numbered since the last pass.
            try store.flushPending()
            locked { saveTreeDirs() }
            // Staged files quiet for the window first (by their last change, not their mtime,
            // which `rsync -a` sets to the source's), in one transaction; a new file still being
            // written stays staged (`rsync`'s temporary file until its rename), one staged for
            // `maxDelay` is committed anyway. Only choosing them takes the lock: the store's
            // transaction runs without it, and a request waits for it only if it touches one of
            // the files being committed (`Store.beginQuietCommit`).
            let quiet = (since: before, stagedBefore: Int64((Date().timeIntervalSince1970 - settler.maxDelay) * 1e9))
            if settler.commitTurn(firstOfRound: firstOfRound), let c = try locked({ try store.beginQuietCommit(quiet) }) {
                // New files quiet for the window are settled by the commit itself; the catalog
                // takes them below, a batch at a time, as it takes the settled ones.
                let settledByCommit = try store.finishQuietCommit(c)
                if !settledByCommit.isEmpty { locked { settledUnseen.formUnion(settledByCommit) } }
            }
            let unseen: [Int64] = locked { Array(settledUnseen.prefix(batch)) }
            // (Not while a full disk's room is owed and short: `Store.roomToSettle`.)
            let (settledNow, moreToSettle, held) = !unseen.isEmpty ? ([], true, false)
                : store.roomToSettle ? try store.settleGivingWay(writtenBefore: before, limit: batch) : ([], false, false)
            let rows = unseen + settledNow
            // The rows as the store has them now are read before the lock is taken (the modes of
            // files committed since their `chmod` are stored first, as `settled` would): under
            // it, the catalog takes them, unless the store was written meanwhile.
            var read: Store.FactsRead?
            if !rows.isEmpty {
                locked { applyStagedModes() }
                read = try store.readFacts(rowids: rows)
            }
            let (inv, more): ([Invalidation], Bool) = try locked {
                // Rows a request has brought up to date meanwhile (`settleNow`, `settleOnly`) are
                // left out; the rest are seen now.
                let rows = settledNow + unseen.filter { settledUnseen.remove($0) != nil }
                let more = moreToSettle || !settledUnseen.isEmpty
                let inv = try settled(rows, read: read)
                if !more, store.stagingIsEmpty, try !store.hasUnsettled(), spoolsToSettle().isEmpty,
                   !store.hasPending, !inodes.hasUnsaved {
                    settler.settledAll(roomOwed: store.owesRoom)
                    saveDirTimes()
                } else if !more, !store.stagingIsEmpty || held {
                    // New files waiting for their own quiet window, or a save in place for its
                    // writer (`Store.settleGivingWay`): looked at again in a while.
                    settler.retryAfter(held ? max(settler.window, 0.25) : settler.window)
                }
                return (inv, more)
            }
            notify(inv)
            settleQuietSpools()
            return more
        } catch {
            noteError(error)
            if settler.failed("\(error)") {
                log.error("settling failed; retried every second (said again if the error changes, else once a minute)", metadata: ["error": "\(error)"])
            }
            return false
        }
    }
}

/// The background thread that settles quiet files. It waits for the mount to be quiet for the
/// window (a burst of writes, an editor's save, `cp -r`, settles once it is over), but never lets
/// a written file wait more than `maxDelay` seconds.
final class Settler: @unchecked Sendable {
    /// Seconds a file must be left alone before it settles.
    let window: Double
    /// Seconds a blob being written (a spool file) must be left alone: longer, since settling
    /// one copies it whole into the cache.
    let spoolWindow: Double = 1
    let maxDelay: Double
    private let cond = NSCondition()
    private var dirty = true
    /// A file was written since everything last settled (`noteWrite`, `settledAll`).
    private var written = true
    private var running = false
    private var lastWrite = Date().timeIntervalSince1970
    private var firstPending: Double? = Date().timeIntervalSince1970
    /// No pass before this time (work that waits for a window of its own, or a failure).
    private var notBefore: Double = 0

    init(window: Double, maxDelay: Double = 1) { self.window = window; self.maxDelay = maxDelay }

    var mayHaveWork: Bool { cond.lock(); defer { cond.unlock() }; return dirty }
    var mayHaveWrittenFiles: Bool { cond.lock(); defer { cond.unlock() }; return written }

    func noteWrite() { noteChange(written: true) }

    /// A removal recorded beside the store (`Store.trashLater`): written by a pass once the mount
    /// has been quiet for the window (at most `maxDelay` later), as a burst of writes is; not a
    /// pass, and a transaction, per `unlink` of `rm -rf`. No file was written for it.
    func noteRemoval() { noteChange(written: false) }

    private func noteChange(written file: Bool) {
        cond.lock()
        if file { written = true }
        lastWrite = Date().timeIntervalSince1970
        if firstPending == nil { firstPending = lastWrite }
        // Already dirty: the thread is waiting for a deadline and reads `lastWrite` when it wakes,
        // so a burst of writes does not wake it once per request.
        if !dirty {
            dirty = true
            cond.signal()
        }
        cond.unlock()
    }

    /// Work that is not a write (a folder's row, a folder's number to record): a pass soon,
    /// without putting off the files' window.
    func wake() {
        cond.lock()
        if !dirty { dirty = true; cond.signal() }
        cond.unlock()
    }

    /// The last failure said in the log, and when.
    private var lastFailure: (what: String, at: Double)?

    /// A pass failed (a full disk, mostly): the next waits a second, not a burst of passes one
    /// after the other. Whether to log it: a failure other than the last said, or a minute on.
    func failed(_ what: String) -> Bool {
        cond.lock(); defer { cond.unlock() }
        let now = Date().timeIntervalSince1970
        notBefore = max(notBefore, now + 1)
        if let l = lastFailure, l.what == what, now - l.at < 60 { return false }
        lastFailure = (what, now)
        return true
    }

    /// The next pass waits at least `seconds`.
    func retryAfter(_ seconds: Double) {
        cond.lock(); notBefore = max(notBefore, Date().timeIntervalSince1970 + seconds); cond.unlock()
    }

    /// Everything written is settled. `roomOwed`: room a full disk left taken is still to be given
    /// back (`Store.owesRoom`), which the passes do (`reclaimAfterFullDisk`): they go on. A read of
    /// `.marfafs/status` settles too (`settleNow`); once it cleared the flag, no pass came again
    /// until the next write, and the log was never cut (FS-28).
    func settledAll(roomOwed: Bool) {
        cond.lock()
        dirty = roomOwed; written = false; firstPending = nil; lastFailure = nil
        if roomOwed { cond.signal() }
        cond.unlock()
    }

    /// When a pass last committed the staged files.
    private var lastCommit: Double = 0

    /// Whether this pass commits the staged files first (a yes counts as the commit): the first
    /// pass of a round, then once the last commit is half of `maxDelay` old. Files that stay
    /// staged through a commit are written again, and a long copy keeps the passes coming back
    /// to back: committing before each of them wrote those files again every 20–30 ms.
    func commitTurn(firstOfRound: Bool) -> Bool {
        cond.lock(); defer { cond.unlock() }
        let now = Date().timeIntervalSince1970
        guard firstOfRound || now - lastCommit >= maxDelay / 2 else { return false }
        lastCommit = now
        return true
    }

    func start(_ pass: @escaping @Sendable (Bool) -> Bool) {
        cond.lock(); running = true; cond.unlock()
        let t = Thread { [self] in
            while true {
                cond.lock()
                while running && !dirty { cond.wait() }
                guard running else { cond.unlock(); return }
                let now = Date().timeIntervalSince1970
                let due = max(min(lastWrite + window, (firstPending ?? now) + maxDelay), notBefore)
                if due > now {
                    _ = cond.wait(until: Date(timeIntervalSince1970: due))
                    cond.unlock()
                    continue
                }
                // Quiet, or a file has waited too long: settle what has been quiet for the window.
                if let f = firstPending, now - f >= maxDelay { firstPending = now }
                cond.unlock()
                var first = true
                while pass(first) { first = false }
            }
        }
        t.name = "marfafs-settle"
        t.start()
    }

    func stop() {
        cond.lock(); running = false; cond.broadcast(); cond.unlock()
    }
}
