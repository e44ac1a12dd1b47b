import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// The queue as the sync engine drains it (W-5): oldest first; a mutation being sent is marked
/// `sending`, so a local change made meanwhile is queued after it instead of folded into it;
/// after a crash `sending` rows are sent again, under the same idempotency key.
extension Store {
    /// The oldest mutations waiting to be sent (`pending`, or `sending` left by a crash).
    public func nextMutations(limit: Int = 50) throws -> [Mutation] {
        try pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM mutations WHERE state IN ('pending', 'sending') ORDER BY seq LIMIT ?", arguments: [limit])
                .map(Mutation.init(row:))
        }
    }

    /// Marks mutations as being sent, in one transaction, and returns them as they are once marked,
    /// oldest first (the others are no longer waiting: settled meanwhile). What is sent is what
    /// this returns, never what an earlier read saw: a local change may have folded into a pending
    /// mutation since (a create absorbs later writes and tags), and a payload read before that
    /// would be sent without it while the acknowledgement drops the row that held it.
    public func markSending(seqs: [Int64]) throws -> [Mutation] {
        try pool.write { db in
            var out: [Mutation] = []
            for seq in seqs {
                try db.run("UPDATE mutations SET state = 'sending' WHERE seq = ? AND state = 'pending'", [seq])
                if let m = try db.row("SELECT * FROM mutations WHERE seq = ? AND state = 'sending'", [seq]).map(Mutation.init(row:)) { out.append(m) }
            }
            return out.sorted { $0.seq < $1.seq }
        }
    }

    /// The server took these mutations: they leave the queue, in order, in one transaction. Each
    /// item takes the version the server answered with, and is `synced` once nothing of it is left
    /// to send.
    public func acknowledge(_ acks: [Acknowledgement]) throws -> StoreChanges {
        try published {
            try write { db in
                var out = StoreChanges()
                for a in acks { out.formUnion(try acknowledge(db, a)) }
                return out
            }
        }
    }

    /// Server changes held back while their items had local bytes or changes to send
    /// (`holdRemote`) whose items have none left: taken now. Their own answer takes them
    /// (`acknowledge`), but a save that settles with nothing to send (the same bytes written
    /// again, a `git checkout` of what the file holds) gets no answer: without this, the item
    /// kept its older bytes until its next change on the server. Cheap when nothing is held.
    /// `publishing`: false once the mount is going away (at unmount, after the last settle): the
    /// store takes them, for the next mount to show, and tells no one (held ones are in memory only).
    public func applyHeldRemotes(publishing: Bool = true) throws -> StoreChanges {
        let ids = heldRemote.withLock { Array($0.keys) }
        if ids.isEmpty { return StoreChanges() }
        // Looked at first without the writer: an item still being written stays held for a while.
        let ready = try pool.read { db in
            try ids.contains { id in try db.row("SELECT rowid, unsettled FROM items WHERE id = ?", [id]).map { try !keepsLocal(db, $0, id) } ?? true }
        }
        guard ready else { return StoreChanges() }
        return publishing ? try published { try write(takeHeld) } : try write(takeHeld)
    }

    private func takeHeld(_ db: Database) throws -> StoreChanges {
        var out = StoreChanges()
        for id in heldRemote.withLock({ Array($0.keys) }) {
            guard let r = try db.row("SELECT rowid, unsettled FROM items WHERE id = ?", [id]) else {
                heldRemote.withLock { _ = $0.removeValue(forKey: id) }
                continue
            }
            if try keepsLocal(db, r, id) { continue }
            guard let held = heldRemote.withLock({ $0.removeValue(forKey: id) }) else { continue }
            try applyRemote(db, held, blobSizes: [:], mode: .ifNewer, into: &out)
        }
        return out
    }

    /// `answer`: the item as the server now has it; once nothing of the item is left to send, it
    /// is applied, so a change the server merged in (or one whose event came while ours waited)
    /// shows here.
    func acknowledge(_ db: Database, _ a: Acknowledgement) throws -> StoreChanges {
        // The mount sees the item again only if the answer changed what it shows (names, bytes,
        // state); a version and `user.marfa.sync` are read from the store.
        var out = StoreChanges()
        try db.run("DELETE FROM mutations WHERE seq = ?", [a.seq])
        if let v = a.serverVersion { try db.run("UPDATE items SET version = max(version, ?) WHERE id = ?", [v, a.itemID]) }
        let left = try db.exists("SELECT 1 FROM mutations WHERE item_id = ? AND state != 'rejected'", [a.itemID])
        if !left { try db.run("UPDATE items SET sync = 'synced', sync_error = NULL WHERE id = ? AND sync = 'pending'", [a.itemID]) }
        if let answer = a.answer { try applyRemote(db, answer, blobSizes: [:], mode: .asServerHolds, into: &out) }
        // A newer server change skipped while ours waited (its event came before this answer) is
        // taken now, if it is still newer than what the answer left.
        if !left, let held = heldRemote.withLock({ $0.removeValue(forKey: a.itemID) }) {
            try applyRemote(db, held, blobSizes: [:], mode: .ifNewer, into: &out)
        }
        return out
    }

    /// Not sent this time (network, 5xx, 429): it stays first in line, with the reason. It stays
    /// `sending` too: the server may have applied it before the answer was lost, so it is never
    /// changed again and its retry replays under the same key.
    public func retryLater(seq: Int64, error: String) throws {
        try pool.write { db in
            try db.run("UPDATE mutations SET attempts = attempts + 1, last_error = ? WHERE seq = ?", [error, seq])
        }
    }

    /// The server refused it for good (FS-10): it stays in the queue as `rejected`, the item keeps
    /// its bytes and shows `user.marfa.sync=rejected` with the reason: the first one, while the
    /// item stays rejected (a refusal that follows from an earlier one says less).
    ///
    /// A file the server never took (its bytes' upload or its create refused, no version of it
    /// acknowledged): every later change of it in the queue would name an item the server does
    /// not have, so each is refused with it, and says why, rather than sent for a 404 of its own.
    /// Returns how many were.
    @discardableResult
    public func reject(seq: Int64, itemID: String, error: String) throws -> Int {
        try pool.write { db in
            try db.run("UPDATE mutations SET state = 'rejected', attempts = attempts + 1, last_error = ? WHERE seq = ?", [error, seq])
            try db.run("UPDATE items SET sync = 'rejected', sync_error = CASE WHEN sync = 'rejected' AND sync_error IS NOT NULL THEN sync_error ELSE ? END WHERE id = ?",
                       [error, itemID])
            let kind = try String.fetchOne(db, sql: "SELECT kind FROM mutations WHERE seq = ?", arguments: [seq]).flatMap(MutationKind.init(rawValue:))
            guard kind == .create || kind == .uploadBlob,
                  (try Int64.fetchOne(db, sql: "SELECT version FROM items WHERE id = ?", arguments: [itemID]) ?? 0) == 0 else { return 0 }
            let what = kind == .create ? "its create" : "its bytes"
            try db.run("UPDATE mutations SET state = 'rejected', last_error = ? WHERE item_id = ? AND seq > ? AND state != 'rejected'",
                       ["not sent: the server refused \(what): \(error)", itemID, seq])
            return db.changesCount
        }
    }

    /// The item's version as the server last acknowledged it (0: never).
    public func serverVersion(itemID: String) throws -> Int64 {
        try pool.read { db in try Int64.fetchOne(db, sql: "SELECT version FROM items WHERE id = ?", arguments: [itemID]) ?? 0 }
    }

    /// A cached blob's bytes, by hash.
    /// An item whose bytes are blob `hash` (an active one first), and the size the store knows
    /// for it: what a download's progress is measured against.
    public func blobItem(hash: String) throws -> (id: String, size: Int64)? {
        try pool.read { db in
            try db.row("SELECT id, size FROM items WHERE blob_ref = ? ORDER BY state = 'active' DESC, rowid LIMIT 1", [hash])
                .map { ($0["id"], $0["size"] ?? 0) }
        }
    }

    public func blobBytes(hash: String) throws -> [UInt8]? {
        try pool.read { db in try Data.fetchOne(db, sql: "SELECT data FROM sqlar WHERE name = ?", arguments: [hash]).map { Array($0) } }
    }

    /// Mutations waiting to be sent (not `rejected`).
    public func unsentCount() throws -> Int {
        try pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM mutations WHERE state IN ('pending', 'sending')") ?? 0 }
    }
}

/// The server took a mutation: its answer (the item's version, and the item as it now is).
public struct Acknowledgement: Sendable {
    public var seq: Int64
    public var itemID: String
    public var serverVersion: Int64?
    public var answer: RemoteChange?
    public init(seq: Int64, itemID: String, serverVersion: Int64?, answer: RemoteChange?) {
        self.seq = seq; self.itemID = itemID; self.serverVersion = serverVersion; self.answer = answer
    }
}

extension Store {
    /// An item by id.
    public func item(id: String) throws -> StoredItem? {
        let seen = removals
        return try pool.read { db in try db.row("SELECT * FROM items WHERE id = ?", [id]).map(StoredItem.init(row:)) }.map { overlaid($0, seen) }
    }
}

/// Appending to the queue: one mutation per change, folded into the item's newest where it may be.
extension Store {
    // MARK: queue

    /// Queues a change of `item`'s properties. `row`: the item as its row now holds it, when the
    /// caller has it (a save has just written it): its form (`fileForm`) is made from it, else
    /// from the row read here.
    func enqueueItemChange(_ db: Database, _ item: Item, row: StoredItem? = nil) throws {
        if item.version == 0 {
            let tags = try Self.tags(db, item.id)
            let create = Self.createPayload(item, tags: tags)
            if let seq = try Self.pendingCreateSeq(db, item.id) {
                try db.run("UPDATE mutations SET payload = ? WHERE seq = ?", [queuedPayload(.create, create), seq])
                return try enqueueFileFormAfterCreate(db, itemID: item.id)
            }
            if !(try db.exists("SELECT 1 FROM mutations WHERE item_id = ? AND kind = 'create'", [item.id])) {
                try enqueueCreate(db, item, tags: tags)
                return
            }
        }
        try enqueue(db, kind: .update, itemID: item.id, payload: try updatePayload(db, item, row: row), coalesce: true)
    }

    /// An update of `item`'s properties over its `version`, as a save and a merge after a 409
    /// (`resolveConflict`) send it: with the file's name and head (`fileForm`) and its time
    /// (`fs.stat`): a time the server holds from before (an import's, a `touch -d`, the other
    /// mount's last save) would otherwise come back with the server's answer and go to every mount
    /// as the time of these new bytes. No extensions from a store no server has seen.
    func updatePayload(_ db: Database, _ item: Item, row: StoredItem? = nil) throws -> [String: JSONValue] {
        var payload: [String: JSONValue] = [
            "properties": .object(item.properties), "tier": .string(item.tier.rawValue),
            "base_version": .int(Int64(item.version)),
        ]
        if !isLocalOnly, var cur = try row ?? db.row("SELECT * FROM items WHERE id = ?", [item.id]).map(StoredItem.init(row:)) {
            cur.item.properties = item.properties
            var ext = fileForm(cur)
            ext[Self.statExtension] = Self.statValue(mode: cur.mode, mtimeNs: cur.mtimeNs)
            payload["extensions"] = .object(ext)
        }
        return payload
    }

    /// Queues an item's create, and the whole path of a long folder after it (FS-31), and the
    /// file's form (`row`: the item's row, when the caller has it).
    func enqueueCreate(_ db: Database, _ item: Item, tags: [String], row: StoredItem? = nil) throws {
        try enqueue(db, kind: .create, itemID: item.id, payload: Self.createPayload(item, tags: tags), coalesce: false)
        try enqueueFolderExtension(db, itemID: item.id, tags: tags, version: 0)
        try enqueueFileFormAfterCreate(db, itemID: item.id, row: row)
    }

    static func createPayload(_ item: Item, tags: [String]) -> [String: JSONValue] {
        [
            "id": .string(item.id), "type": .string(item.type), "properties": .object(item.properties),
            "tier": .string(item.tier.rawValue), "state": .string(item.state.rawValue),
            "tags": .array(wireTags(tags).tags.map(JSONValue.string)),
        ]
    }

    static func pendingCreate(_ db: Database, _ itemID: String) throws -> Bool {
        try pendingCreateSeq(db, itemID) != nil
    }

    /// The item's create, when it is still waiting and nothing but extensions (the file's form,
    /// `fs.stat`, a long folder) follows it: later changes of its properties and tags fold into it.
    static func pendingCreateSeq(_ db: Database, _ itemID: String) throws -> Int64? {
        let rows = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT seq, kind, state, json_extract(payload, '$.properties') IS NULL AND json_extract(payload, '$.tier') IS NULL
            FROM mutations WHERE item_id = ? ORDER BY seq DESC LIMIT 4
            """), arguments: [itemID])
        for r in rows {
            let kind = MutationKind(rawValue: r[1]), pending = MutationState(rawValue: r[2]) == .pending
            if kind == .create { return pending ? r[0] : nil }
            guard kind == .update, pending, r[3] as Bool else { return nil }
        }
        return nil
    }

    /// The newest mutation of an item without its payload: (seq, kind, state).
    static func lastMutationHead(_ db: Database, _ itemID: String) throws -> (seq: Int64, kind: MutationKind, state: MutationState)? {
        guard let r = try db.row("SELECT seq, kind, state FROM mutations WHERE item_id = ? ORDER BY seq DESC LIMIT 1", [itemID]) else { return nil }
        return (r[0], MutationKind(rawValue: r[1]) ?? .update, MutationState(rawValue: r[2]) ?? .pending)
    }

    /// Appends a mutation with a fresh idempotency key, or folds it into the item's newest mutation
    /// when that one is still pending and of the same kind (`coalesce`).
    func enqueue(_ db: Database, kind: MutationKind, itemID: String, payload: [String: JSONValue], coalesce: Bool) throws {
        // A save after a conflict held for the user (`--conflict manual`) settles it: this update replaces it.
        if kind == .update { try db.run("DELETE FROM mutations WHERE item_id = ? AND kind = 'update' AND state = 'conflict'", [itemID]) }
        if coalesce, !isLocalOnly, let head = try Self.lastMutationHead(db, itemID), head.kind == kind, head.state == .pending,
           let last = try db.row("SELECT * FROM mutations WHERE seq = ?", [head.seq]).map(Mutation.init(row:)) {
            var merged = last.payload
            for (k, v) in payload where k != "base_version" || merged[k] == nil {
                // Extensions fold by namespace: a later `fs.stat` keeps an earlier `fs.xattr`.
                if k == "extensions", case .object(let old)? = merged[k], case .object(let new) = v {
                    merged[k] = .object(old.merging(new) { _, n in n })
                } else {
                    merged[k] = v
                }
            }
            try db.run("UPDATE mutations SET payload = ? WHERE seq = ?", [JSONCoding.encode(merged), last.seq])
            return
        }
        // A local-only store keeps one row per item and kind: nothing will read more.
        if isLocalOnly, try db.exists("SELECT 1 FROM mutations WHERE item_id = ? AND kind = ? AND state = 'pending'", [itemID, kind.rawValue]) { return }
        try db.run("INSERT INTO mutations(id, idempotency_key, kind, item_id, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                       [ItemID.make(), ItemID.make(), kind.rawValue, itemID, queuedPayload(kind, payload), Timestamp.now()])
    }
}
