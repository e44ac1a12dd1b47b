import Foundation
import GRDB
import MarfaModel

/// Items an `unlink` moved to the trash (FS-4) before their row says so: the request does not
/// write the store. A transaction per `unlink` (the row, its queued transition, the WAL's pages,
/// now and then a checkpoint's syncs) was nine tenths of each `unlink` of `rm -rf`; the next
/// write transaction of the store writes them all (`Store.write`: `flush`), and the settler's
/// pass writes what no other write has (`Store.flushPending`).
///
/// Each removal is appended to `<store>-removals` at once (`rowid ns\n`, the time of the
/// `unlink`, in one `write(2)`), so a killed mount loses none; once the transaction that wrote
/// them has committed, the file holds only those still pending, rewritten aside and renamed over.
/// A line without its newline (torn by a power cut), or not two numbers, is skipped. A store
/// opened takes what the file holds as pending. Until then every read of an item's state sees it
/// in the trash (`Store.overlaid`), so the catalog, `user.marfa.state` and the sync engine never
/// see a removed file come back (a read takes the pending removals before it begins, `Removals`);
/// whatever writes the item (a restore, a purge, the same name made
/// again, a remote change) writes the removals first, in its own transaction, so the order of
/// their queued mutations is the order they were made in.
///
/// Lock order: the store's writer, then `lock` (nothing here takes the writer).
final class PendingRemovals: @unchecked Sendable {
    var path: String { file.path }
    private let lock = NSLock()
    /// rowid → the `unlink`'s time (nanoseconds since 1970).
    private var pending: [Int64: Int64]
    private var file: LineFile

    init(path: String) {
        file = LineFile(path: path)
        pending = Self.read(path)
    }

    deinit { file.close() }

    private func locked<T>(_ body: () throws -> T) rethrows -> T { lock.lock(); defer { lock.unlock() }; return try body() }

    var isEmpty: Bool { locked { pending.isEmpty } }

    /// When item `rowid` was removed, if its row does not say so yet.
    func removedAt(_ rowid: Int64) -> Int64? { locked { pending[rowid] } }

    /// The removals pending now (a copy made on write: taking it costs nothing).
    var all: [Int64: Int64] { locked { pending } }

    /// Records item `rowid` as removed at `ns`; it is in the file when this returns.
    func add(_ rowid: Int64, at ns: Int64) throws {
        try locked {
            if pending[rowid] != nil { return }
            try file.append("\(rowid) \(ns)\n", what: "the removal of item \(rowid)")
            pending[rowid] = ns
        }
    }

    /// Inside a write transaction (`Store.write`): `apply` writes each pending removal, oldest
    /// first; once the transaction commits they are no longer pending.
    func flush(_ db: Database, _ apply: (_ rowid: Int64, _ ns: Int64) throws -> Void) throws {
        let batch = locked { pending }
        if batch.isEmpty { return }
        for (r, ns) in batch.sorted(by: { ($0.value, $0.key) < ($1.value, $1.key) }) { try apply(r, ns) }
        db.afterNextTransaction(onCommit: { [self] _ in committed(batch) })
    }

    /// `done` is in the store: the file keeps the rest (rewritten aside, renamed over; on failure
    /// it keeps them all, which a later flush writes again to no effect: an item already in the
    /// trash is left as it is).
    private func committed(_ done: [Int64: Int64]) {
        locked {
            for (r, ns) in done where pending[r] == ns { pending[r] = nil }
            file.rewrite(pending.map { "\($0.key) \($0.value)\n" })
        }
    }

    /// The removals a file holds: whole lines of two numbers (the first for an item).
    private static func read(_ path: String) -> [Int64: Int64] {
        var out: [Int64: Int64] = [:]
        for l in LineFile.lines(path) {
            let f = String(decoding: l, as: UTF8.self).split(separator: " ")
            guard f.count == 2, let r = Int64(f[0]), let ns = Int64(f[1]), r > 0 else { continue }
            out[r] = min(out[r] ?? ns, ns)
        }
        return out
    }
}

/// The removals a read of the store shows its items under: those pending when it began, and those
/// pending when it is shown. The write that commits a removal may do so while the read runs: the
/// read's snapshot has the row as it was before, and the removal is no longer pending after the
/// commit, so the file would be shown back (a refresh read it so while the settler wrote, and a
/// removed note was back in `ls` until its next change).
struct Removals {
    let before: [Int64: Int64]
    let pending: PendingRemovals

    func at(_ rowid: Int64) -> Int64? { pending.removedAt(rowid) ?? before[rowid] }
}

extension Store {
    /// Taken before every read whose items are `overlaid`.
    var removals: Removals { Removals(before: pendingRemovals.all, pending: pendingRemovals) }

    /// Moves item `rowid` to the trash as `unlink` does, without waiting for the store's writer:
    /// recorded at once beside the store (`PendingRemovals`), its row written by the next write
    /// transaction (`flushRemovals`). Returns the time recorded (ns): from now on every read finds
    /// the item in the trash with that time (`overlaid`); nothing else of it changed, so the
    /// caller knows the rest (a read of its row and tags here was half of each `unlink`).
    @discardableResult public func trashLater(rowid: Int64) throws -> Int64 {
        let ns = Self.ns(Date())
        try pendingRemovals.add(rowid, at: ns)
        return ns
    }

    /// An item's summary as `trashLater` leaves it: in the trash, with the removal's time.
    public static func trashed(_ s: ItemSummary, at ns: Int64) -> ItemSummary {
        var s = s
        s.state = .trashed; s.mtimeNs = ns
        return s
    }

    /// Inside a write transaction (`write`): the removals `trashLater` recorded, each as it was
    /// made (its time, its queued transition); an item gone or already in the trash is left.
    func flushRemovals(_ db: Database) throws {
        try pendingRemovals.flush(db) { rowid, ns in
            guard let row = try db.row("SELECT id, state, version FROM items WHERE rowid = ?", [rowid]),
                  ItemState(rawValue: row[1]) != .trashed else { return }
            _ = try changeState(db, rowid: rowid, id: row[0], version: row[2], to: .trashed, at: Date(timeIntervalSince1970: Double(ns) / 1e9)) {
                guard let cur = try Self.fetchItem(db, rowid: rowid) else { throw StoreError.notFound("item \(rowid)") }
                return cur.item
            }
        }
    }

    /// An item as a read of the store found it, in the trash if an `unlink` put it there and its
    /// row did not say so when the read began (`trashLater`; `seen`: taken before the read).
    func overlaid(_ s: ItemSummary, _ seen: Removals) -> ItemSummary {
        guard s.state != .trashed, let ns = seen.at(s.rowid) else { return s }
        return Self.trashed(s, at: ns)
    }

    func overlaid(_ f: ItemFacts, _ seen: Removals) -> ItemFacts {
        ItemFacts(summary: overlaid(f.summary, seen), tags: f.tags, links: f.links, linksStale: f.linksStale)
    }

    func overlaid(_ i: StoredItem, _ seen: Removals) -> StoredItem {
        guard i.item.state != .trashed, let ns = seen.at(i.rowid) else { return i }
        var i = i
        i.item.state = .trashed; i.mtimeNs = ns
        i.item.updatedAt = Timestamp.format(Date(timeIntervalSince1970: Double(ns) / 1e9))
        return i
    }
}
