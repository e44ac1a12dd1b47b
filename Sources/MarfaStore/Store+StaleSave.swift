import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// Stale saves (FS-24): when a remote change reaches a text item, the store keeps what the mount
/// showed until then (`shown_base`, set once, by `applyItem`). An editor holding the item in a
/// buffer that never saw the change then saves: that save is a concurrent edit, merged three-way
/// (line by line, `TextMerge`) with what the mount showed as the ancestor, the save as ours and
/// the item as it now is as theirs. A clean merge is what the item becomes (and is sent like any
/// save); overlapping edits keep both: the item keeps its current text and the save becomes one
/// conflicted copy (FS-20). A save that already holds the remote change (a reloaded buffer)
/// merges to itself: nothing is duplicated. The ancestor is kept until the next local save of the
/// item, whatever it holds.
extension Store {
    /// The bytes a local save of `cur` leaves the item with: `bytes` itself, or the merge of a
    /// stale save, or (overlapping edits) the item's current text, the save kept as a conflicted copy.
    func mergeStaleSave(_ db: Database, _ cur: StoredItem, _ bytes: [UInt8], type t: TypeSchema, now: Date) throws -> [UInt8] {
        guard let base = cur.shownBase else { return bytes }
        try db.run("UPDATE items SET shown_base = NULL WHERE rowid = ?", [cur.rowid])
        let theirsBytes = Array(render(type: t, properties: cur.item.properties).utf8)
        // Text that is not UTF-8 is taken as written (it is kept byte for byte and marked invalid).
        guard bytes != theirsBytes, let ancestor = String(validating: base, as: UTF8.self),
              let ours = String(validating: bytes, as: UTF8.self), let theirs = String(validating: theirsBytes, as: UTF8.self) else { return bytes }
        if let merged = TextMerge.threeWay(base: ancestor, local: ours, remote: theirs) {
            var c = StoreChanges()
            c.staleSaveMerges.insert(cur.item.id)
            // The file now holds more than was written: the kernel's copy of it is stale.
            if merged != ours { c.content.insert(cur.item.id) }
            announce(c)
            return Array(merged.utf8)
        }
        // The same lines changed on both sides: the item keeps the remote text; the save is kept
        // whole in a conflicted copy, queued for the server like a 409's.
        let props = (try? Self.parseText(bytes, type: t, fileName: cur.fileName, previous: cur.item.properties)) ?? [t.bodyField: .string(ours)]
        let (copyID, edgeID) = try insertConflictedCopy(db, cur, properties: props, device: device.value, now: now)
        var c = StoreChanges(items: [copyID, cur.item.id])
        c.content.insert(cur.item.id)
        c.edgesAdded.insert(edgeID)
        c.staleSaveCopies.append((copy: copyID, original: cur.item.id))
        announce(c)
        return theirsBytes
    }

    /// Runs a change made for the sync engine (remote changes applied, answers recorded,
    /// conflicts settled) and, once it is committed, tells the observers (`observe`).
    func published(_ body: () throws -> StoreChanges) throws -> StoreChanges {
        let c = try body()
        if !c.isEmpty { observers.call(c) }
        return c
    }

    /// Subscribes to the changes the store commits for the sync engine: the filesystem re-reads
    /// what they touched and tells the kernel (FS-19). Called on the committing thread, which
    /// holds no lock of the filesystem's.
    public func observe(_ f: @escaping @Sendable (StoreChanges) -> Void) { observers.add(f) }

    /// Records changes the store made on its own (a stale save merged or copied) for the
    /// filesystem, which takes them after the operation that caused them (`takeAnnouncements`).
    func announce(_ c: StoreChanges) { announced.add(c) }

    /// The changes announced since the last call.
    public func takeAnnouncements() -> StoreChanges { announced.take() }
}

/// Who is told of committed changes (any thread).
final class Observers: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [@Sendable (StoreChanges) -> Void] = []
    func add(_ f: @escaping @Sendable (StoreChanges) -> Void) { lock.lock(); list.append(f); lock.unlock() }
    func call(_ c: StoreChanges) {
        lock.lock(); let l = list; lock.unlock()
        for f in l { f(c) }
    }
}

/// Changes waiting for the filesystem (any thread).
final class Announcements: @unchecked Sendable {
    private let lock = NSLock()
    private var pending = StoreChanges()
    func add(_ c: StoreChanges) { lock.lock(); pending.formUnion(c); lock.unlock() }
    func take() -> StoreChanges { lock.lock(); defer { pending = StoreChanges(); lock.unlock() }; return pending }
}

/// Text shared between threads (the device label of conflicted copies).
public final class LockedText: @unchecked Sendable {
    private let lock = NSLock()
    private var v: String
    init(_ v: String) { self.v = v }
    public var value: String { lock.lock(); defer { lock.unlock() }; return v }
    public func set(_ x: String) { lock.lock(); v = x; lock.unlock() }
}
