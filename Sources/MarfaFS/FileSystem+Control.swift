import Foundation
import MarfaModel
import MarfaStore

extension FileSystem {
    /// When a control file's text is made anew for a reader.
    enum SnapshotUse {
        /// A stat: anew unless this reader's text is under a second old. A reader's `fstat` and
        /// the stat the kernel makes again before its `read` then report one length, so a program
        /// that reads `st_size` bytes never gets a text cut short (the age of the oldest mutation
        /// changes its length from one millisecond to the next).
        case stat
        /// A read: this reader's text of the last five seconds.
        case read
        /// Always anew (`.marfafs/flush` once the queue is sent).
        case anew
    }

    /// A control file's text for the reader of the current request (`currentReader`).
    /// Called with the lock held.
    /// Each reader (by the thread id of its request) has its own snapshot, so two programs reading
    /// `.marfafs/status` at once never get bytes cut to the other's length.
    func controlSnapshot(_ name: String, _ use: SnapshotUse) -> String {
        let key = name + "#" + String(currentReader)
        let now = Date()
        if let s = controlSnapshots[key] {
            let age = now.timeIntervalSince(s.at)
            if (use == .stat && age < 1) || (use == .read && age < 5) { return s.text }
        }
        let text = controlContent(name)
        if controlSnapshots.count > 64 { controlSnapshots = controlSnapshots.filter { now.timeIntervalSince($0.value.at) < 5 } }
        controlSnapshots[key] = (text, now)
        return text
    }

    /// A read of a control file's bytes. `.marfafs/flush` with a server returns once the queue is
    /// sent (or paused), waiting outside the lock so the mount and the sync engine carry on
    /// meanwhile; `requests` has one length always and is counted anew at every read from its start.
    /// `cancelled`: the request was interrupted (its caller killed) or the mount is going away,
    /// asked while `flush` waits.
    func controlRead(_ name: String, offset: Int64, size: Int, reader: Int32, cancelled: () -> Bool = { false }) throws -> [UInt8] {
        var use = SnapshotUse.read
        if name == ControlFile.flush.rawValue, offset == 0, syncStatus != nil {
            guard waitForEmptyQueue(cancelled: cancelled) else { throw FSError(.interrupted, "the wait for the queue was interrupted") }
            use = .anew
        } else if name == ControlFile.requests.rawValue, offset == 0 {
            use = .anew
        }
        return Self.slice(Array(locked { currentReader = reader; return controlSnapshot(name, use) }.utf8), offset: offset, size: size)
    }

    /// The text of a control file (§7). Called with the lock held.
    func controlContent(_ name: String) -> String {
        let file = ControlFile(rawValue: name)
        // The queue and the status describe settled files; the counts of requests need nothing settled.
        if file != .requests {
            do { try settleNow() } catch { log.error("settling failed", metadata: ["error": "\(error)"]) }
        }
        switch file {
        case .status?: return statusJSON() + "\n"
        case .pending?: return pendingText()
        case .pendingJSON?: return pendingJSON()
        case .transfers?: return transfersText()
        case .conflicts?: return conflictsText()
        case .events?: return syncEvents?() ?? ""
        case .flush?: return flushAnswer()
        case .unresolved?: return unresolvedText()
        case .requests?: return requestCounts?() ?? ""
        case nil: return ""
        }
    }

    /// `.marfafs/status` as the daemon's own threads read it (a service manager's status line).
    public func currentStatus() -> String { locked { statusJSON() } }

    /// `.marfafs/status` and `marfafs status --json`. Called with the lock held.
    func statusJSON() -> String {
        let muts = (try? store.mutations()) ?? []
        let oldest = muts.first.flatMap { Timestamp.parse($0.createdAt) }.map { Date().timeIntervalSince1970 - $0 }
        let invalid = (try? store.invalidItems()) ?? []
        var obj: [String: JSONValue] = [
            "mode": "local",
            "server": .null,
            "connection": "none",
            "last_event_id": .null,
            "store": .string(store.path),
            "items": .int(Int64(catalog.items.count)),
            "queue_depth": .int(Int64(muts.count)),
            "oldest_pending_age_seconds": oldest.map { .double(($0 * 1000).rounded() / 1000) } ?? .null,
            "conflicts": .int(Int64(muts.filter { $0.state == .conflict }.count + ((try? store.conflictedCopies().count) ?? 0))),
            "rejected": .int(Int64(muts.filter { $0.state == .rejected }.count)),
            "invalid": .array(invalid.map { .object(["id": .string($0.0), "path": shownPath($0.0).map(JSONValue.string) ?? .null,
                                                     "error": $0.1.map(JSONValue.string) ?? .null]) }),
            "last_error": lastError.map { .string("\(Timestamp.format($0.at)) \($0.message)") } ?? .null,
        ]
        if let sync = syncStatus?() { obj.merge(sync.json) { _, engine in engine } }
        return JSONCoding.encode(obj)
    }

    /// Where a person finds an item: its path in `vault/` when it has one there, else its path
    /// in `types/`, `archive/` or `trash/` (from the mount root).
    func shownPath(_ id: String) -> String? {
        guard let r = catalog.byID[id] else { return nil }
        if (try? ensureVault()) != nil, let v = catalog.vault, let f = v.folderOf[r], let name = v.trees[f]?.nameOf[r] {
            return "vault/" + VaultIndex.join(f, name)
        }
        return try? canonicalPath(r)
    }

    /// `.marfafs/conflicts` (FS-21): `<copy> <TAB> <original>` per conflicted copy (paths from
    /// the mount root), then `held <TAB> <item> <TAB> <reason>` per conflict left for a save, then
    /// `rejected <TAB> <item> <TAB> <kind>: <reason>` per change the server refused for good.
    func conflictsText() -> String {
        var out = ""
        for (copy, original) in (try? store.conflictedCopies()) ?? [] {
            let c = (try? canonicalPath(copy.rowid)) ?? copy.id
            let o = original.flatMap { catalog.byID[$0] }.flatMap { try? canonicalPath($0) } ?? original ?? "-"
            out += "\(c)\t\(o)\n"
        }
        for m in (try? store.mutations()) ?? [] where m.state == .conflict {
            let path = catalog.byID[m.itemID].flatMap { try? canonicalPath($0) } ?? m.itemID
            out += "held\t\(path)\t\(m.lastError?.split(separator: "\n").first.map(String.init) ?? "")\n"
        }
        // A change the server refused for good is never dropped: the item keeps its bytes, and
        // is listed here until it is edited again or removed (FS-33).
        for m in (try? store.mutations()) ?? [] where m.state == .rejected {
            let path = catalog.byID[m.itemID].flatMap { try? canonicalPath($0) } ?? m.itemID
            out += "rejected\t\(path)\t\(m.kind.rawValue): \(m.lastError?.split(separator: "\n").first.map(String.init) ?? "")\n"
        }
        return out
    }

    /// One queued mutation as people read it (FS-33): where its item is, what it does, how long
    /// it has waited, and where it stands.
    struct PendingLine {
        var mutation: Mutation
        var path: String?
        var target: String?
        var ageSeconds: Double
        var state: String
        var why: String?

        /// `<path> TAB <kind> TAB <age> TAB <state>[: why]`.
        var text: String {
            let where_ = path ?? "(gone) \(mutation.itemID)"
            let what = target.map { "\(mutation.kind.rawValue) → \($0)" } ?? mutation.kind.rawValue
            return "\(where_)\t\(what)\t\(Self.age(ageSeconds))\t\(state)\(why.map { ": " + $0 } ?? "")\n"
        }

        var json: JSONValue {
            .object(["id": .string(mutation.id), "item": .string(mutation.itemID), "path": path.map(JSONValue.string) ?? .null,
                     "target": target.map(JSONValue.string) ?? .null, "kind": .string(mutation.kind.rawValue),
                     "created_at": .string(mutation.createdAt), "age_seconds": .double((ageSeconds * 1000).rounded() / 1000),
                     "state": .string(state), "attempts": .int(Int64(mutation.attempts)),
                     "reason": why.map(JSONValue.string) ?? .null])
        }

        /// `42s`, `7m`, `3h`, `2d`.
        static func age(_ s: Double) -> String {
            let n = max(0, Int(s))
            if n < 60 { return "\(n)s" }
            if n < 3600 { return "\(n / 60)m" }
            if n < 86_400 { return "\(n / 3600)h" }
            return "\(n / 86_400)d"
        }
    }

    /// The queue, oldest first, as `PendingLine`s. Called with the lock held.
    func pendingLines() -> [PendingLine] {
        let muts = (try? store.mutations()) ?? []
        let inFlight = syncStatus?().inFlight ?? []
        let now = Date().timeIntervalSince1970
        return muts.map { m in
            let firstLine = m.lastError?.split(separator: "\n").first.map(String.init)
            let state: String, why: String?
            switch m.state {
            case .conflict: (state, why) = ("held", firstLine ?? "a conflict waits for the next save")
            case .rejected: (state, why) = ("rejected", firstLine)
            case .pending, .sending:
                if inFlight.contains(m.seq) { (state, why) = ("in-flight", nil) }
                else if m.attempts > 0 { (state, why) = ("retrying \(m.attempts)", firstLine) }
                else { (state, why) = ("pending", nil) }
            }
            var target: String?
            if m.kind == .createEdge || m.kind == .deleteEdge, let t = m.payload["target_id"]?.stringValue {
                target = shownPath(t) ?? t
            }
            let age = Timestamp.parse(m.createdAt).map { now - $0 } ?? 0
            return PendingLine(mutation: m, path: shownPath(m.itemID), target: target, ageSeconds: age, state: state, why: why)
        }
    }

    func pendingText() -> String { pendingLines().map(\.text).joined() }

    /// `.marfafs/transfers` (FS-33): each blob transfer under way, oldest first:
    /// `<path> TAB upload|download TAB <done>/<total> TAB <percent>%` (the hash when no item has it).
    func transfersText() -> String {
        let all = syncStatus?().blobTransfers.values.sorted { $0.startedAt < $1.startedAt } ?? []
        return all.map { t in
            let pct = t.total > 0 ? Int(Double(t.done) * 100 / Double(t.total)) : 0
            return "\(t.path ?? t.hash)\t\(t.direction)\t\(t.done)/\(t.total)\t\(pct)%\(t.restarted ? "\trestarted" : "")\n"
        }.joined()
    }

    /// Where an item is in the mount, for the sync engine's events (takes the lock).
    public func pathOfItem(_ id: String) -> String? { locked { shownPath(id) } }

    func pendingJSON() -> String { JSONCoding.encode(.array(pendingLines().map(\.json))) + "\n" }

    /// `.marfafs/flush`: what is left to send. (Its read waits for the queue first; see `read`.)
    /// A text never grows while the queue drains, so the size a stat measured still covers it.
    func flushAnswer() -> String {
        let depth = (try? store.unsentCount()) ?? 0
        if depth == 0 { return "ok: the queue is empty\n" }
        if syncStatus?().connection == .unauthorized { return "paused: \(depth) mutations wait for a valid key\n" }
        if syncStatus != nil { return "sending: \(depth) mutations are waiting for the server\n" }
        return "local: \(depth) mutations are kept for a server; none is configured (mount --server)\n"
    }

    /// Blocks (without the lock) until every settled change is sent, or the queue is paused for a
    /// key; false if `cancelled` said so first (else a worker waiting for a server that never
    /// comes back would hold the unmount for ever).
    func waitForEmptyQueue(cancelled: () -> Bool) -> Bool {
        locked { do { try settleNow() } catch { log.error("settling failed", metadata: ["error": "\(error)"]) } }
        while ((try? store.unsentCount()) ?? 0) > 0 {
            if syncStatus?().connection == .unauthorized { return true }
            if cancelled() { return false }
            usleep(50_000)
        }
        return true
    }
}
