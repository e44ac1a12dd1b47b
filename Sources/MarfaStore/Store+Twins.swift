import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// The same vault on two devices (FS-32): a store imported from a folder that another device has
/// already sent to the server holds, before its first sync, an item of its own for each file the
/// server has too. Kept both, every file showed twice, the second copy under a collision suffix
/// (`note [1a2b3c4d].md`), on every device. During a store's first sync, a server item that is new
/// here takes the place of its local twin: an item never sent (no version, nothing of it out or
/// refused), active, with the same type, name, folders, attributes and bytes (a blob: the same
/// hash). The twin's queued create, form and upload go (the server has the file); its edges,
/// queued or not, and its earlier versions name the server's item from then on; its row goes,
/// and the mount shows the server's item in its place. A file that differs in any of these is not a twin: both stay.
///
/// Called inside the transaction that inserts the server's item, before its first sync is done
/// (the queue waits for it: `QueueDrainer.run`), so no twin's create is on its way meanwhile. The
/// never-sent items are read once (`twinCandidates`), not searched for each server item.
extension Store {
    func adoptLocalTwin(_ db: Database, of remoteID: String, into out: inout StoreChanges) throws {
        guard try Self.meta(db, Self.firstSyncKey) == nil,
              let theirs = try db.row("SELECT * FROM items WHERE id = ?", [remoteID]).map(StoredItem.init(row:)),
              theirs.item.state == .active else { return }
        let candidates = try twinCandidates.withLock { index in
            if index == nil {
                index = Dictionary(grouping: try Row.fetchAll(db, sql: "SELECT rowid, type, stem, ext FROM items WHERE version = 0 AND state = 'active'"),
                                   by: { Self.twinKey(type: $0["type"], stem: $0["stem"], ext: $0["ext"]) }).mapValues { $0.map { $0["rowid"] as Int64 } }
            }
            return index?[Self.twinKey(type: theirs.item.type, stem: theirs.stem, ext: theirs.ext)] ?? []
        }
        if candidates.isEmpty { return }
        let name = theirs.fileName ?? theirs.stem + theirs.ext
        let folders = try Self.tags(db, remoteID).filter { $0.hasPrefix(VaultText.folderPrefix) }.sorted()
        for rowid in candidates {
            // As it is now: it may have changed, been sent or gone since the index was read.
            guard !staging.hasOverlay(rowid), let ours = try Self.fetchItem(db, rowid: rowid),
                  ours.item.version == 0, ours.item.state == .active, !ours.unsettled, ours.item.id != remoteID,
                  (ours.fileName ?? ours.stem + ours.ext) == name, ours.xattrs == theirs.xattrs,
                  try !db.exists("SELECT 1 FROM mutations WHERE item_id = ? AND state != 'pending'", [ours.item.id]),
                  try Self.tags(db, ours.item.id).filter({ $0.hasPrefix(VaultText.folderPrefix) }).sorted() == folders,
                  try sameBytes(db, ours, theirs) else { continue }
            try replaceTwin(db, ours, by: remoteID)
            twinCandidates.withLock { $0?[Self.twinKey(type: theirs.item.type, stem: theirs.stem, ext: theirs.ext)]?.removeAll { $0 == rowid } }
            out.items.insert(ours.item.id)
            return
        }
    }

    private static func twinKey(type: String, stem: String, ext: String) -> String { type + "\u{0}" + stem + "\u{0}" + ext }

    /// Whether two items show the same bytes: a blob's hash, a text's bytes.
    private func sameBytes(_ db: Database, _ a: StoredItem, _ b: StoredItem) throws -> Bool {
        if TypeSchema.isBlobType(a.item.type) {
            guard let h = a.item.properties["blob_ref"]?.stringValue else { return false }
            return h == b.item.properties["blob_ref"]?.stringValue
        }
        return try currentBytes(db, a) == currentBytes(db, b)
    }

    /// The server's item `id` takes the place of the local twin `ours`.
    private func replaceTwin(_ db: Database, _ ours: StoredItem, by id: String) throws {
        let old = ours.item.id
        for column in ["source_id", "target_id"] {
            try db.run("UPDATE edges SET \(column) = ? WHERE \(column) = ?", [id, old])
            try db.run("""
                UPDATE mutations SET payload = json_set(payload, '$.\(column)', ?)
                WHERE kind IN ('create_edge', 'delete_edge') AND json_valid(payload) AND json_extract(payload, '$.\(column)') = ?
                """, [id, old])
        }
        try db.run("UPDATE mutations SET item_id = ? WHERE item_id = ? AND kind IN ('create_edge', 'delete_edge')", [id, old])
        try db.run("DELETE FROM mutations WHERE item_id = ?", [old])
        try db.run("UPDATE OR IGNORE edge_dirs SET item_id = ? WHERE item_id = ?", [id, old])
        try db.run("DELETE FROM edge_dirs WHERE item_id = ?", [old])
        try db.run("UPDATE OR IGNORE owners SET item_id = ? WHERE item_id = ?", [id, old])
        try db.run("DELETE FROM owners WHERE item_id = ?", [old])
        try db.run("DELETE FROM tags WHERE item_id = ?", [old])
        // Its earlier versions (`history/`) are the server item's from now on.
        try db.run("UPDATE versions SET item_id = ? WHERE item_id = ?", [id, old])
        try db.run("DELETE FROM items WHERE rowid = ?", [ours.rowid])
        try db.run("DELETE FROM item_numbers WHERE rowid = ?", [ours.rowid])
        saveBases.forget(ours.rowid)
    }
}
