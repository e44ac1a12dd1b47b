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
        let (copyID, edgeID) = try insertConflictedCopy(db, cur, properties: props, device: device.withLock { $0 }, now: now)
        var c = StoreChanges(items: [copyID, cur.item.id])
        c.content.insert(cur.item.id)
        c.edgesAdded.insert(edgeID)
        c.staleSaveCopies.append((copy: copyID, original: cur.item.id))
        announce(c)
        return theirsBytes
    }
}
