import Foundation
import GRDB
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

    public func markSending(seq: Int64) throws {
        try pool.write { db in
            try db.run("UPDATE mutations SET state = 'sending' WHERE seq = ? AND state = 'pending'", [seq])
        }
    }

    /// The server took the mutation: it leaves the queue. `serverVersion` is the item's version
    /// the server answered with; the item is `synced` once nothing of it is left to send.
    public func acknowledge(seq: Int64, itemID: String, serverVersion: Int64?) throws {
        try pool.write { db in
            try db.run("DELETE FROM mutations WHERE seq = ?", [seq])
            if let v = serverVersion { try db.run("UPDATE items SET version = max(version, ?) WHERE id = ?", [v, itemID]) }
            let left = try db.exists("SELECT 1 FROM mutations WHERE item_id = ? AND state != 'rejected'", [itemID])
            if !left { try db.run("UPDATE items SET sync = 'synced', sync_error = NULL WHERE id = ? AND sync = 'pending'", [itemID]) }
        }
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
    /// its bytes and shows `user.marfa.sync=rejected` with the reason.
    public func reject(seq: Int64, itemID: String, error: String) throws {
        try pool.write { db in
            try db.run("UPDATE mutations SET state = 'rejected', attempts = attempts + 1, last_error = ? WHERE seq = ?", [error, seq])
            try db.run("UPDATE items SET sync = 'rejected', sync_error = ? WHERE id = ?", [error, itemID])
        }
    }

    /// The item's version as the server last acknowledged it (0: never).
    public func serverVersion(itemID: String) throws -> Int64 {
        try pool.read { db in try Int64.fetchOne(db, sql: "SELECT version FROM items WHERE id = ?", arguments: [itemID]) ?? 0 }
    }

    /// A cached blob's bytes, by hash.
    public func blobBytes(hash: String) throws -> [UInt8]? {
        try pool.read { db in try Data.fetchOne(db, sql: "SELECT data FROM sqlar WHERE name = ?", arguments: [hash]).map { Array($0) } }
    }

    /// Mutations waiting to be sent (not `rejected`).
    public func unsentCount() throws -> Int {
        try pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM mutations WHERE state IN ('pending', 'sending')") ?? 0 }
    }
}

extension Store {
    /// A 409 (W-7): the mutation stays, as `conflict`, with the server's three-way context, and the
    /// item shows `user.marfa.sync=conflicted`; nothing local is dropped.
    public func markConflict(seq: Int64, itemID: String, error: String, context: String) throws {
        try pool.write { db in
            try db.run("UPDATE mutations SET state = 'conflict', attempts = attempts + 1, last_error = ? WHERE seq = ?", [error + "\n" + context, seq])
            try db.run("UPDATE items SET sync = 'conflicted', sync_error = ? WHERE id = ?", [error, itemID])
        }
    }
}
