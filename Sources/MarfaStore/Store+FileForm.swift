import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// A file's own form beside its properties (FS-5, FS-9, FS-32), so that every mount of a vault
/// shows the same file: the name it was given where its title does not give that name
/// (`zk-2023.md` holding `title: A Different Title`, `Upper.MD`), and a text's front matter as
/// written where the rendering of its properties would differ (key order, quoting, comments, a
/// `title:` line). Both travel as item extensions:
///
/// - `fs.name`: `{"name": "zk-2023.md", "title": "A Different Title"}`, the title it stands beside;
///   a mount takes the name only while the item still has that title (a client that knows nothing
///   of it may have changed the title since).
/// - `fs.text`: `{"head": "---\ntitle: A Different Title\n---\n"}`, the bytes before the body; a
///   mount takes them only if, with the body, they parse to the item's properties.
///
/// Null (the namespace removed) where the properties say it all. A create cannot carry
/// extensions (`POST /items` takes none, upstream openapi.json): they follow it as an update of
/// their own, only when there is something to say; every later update of the item's properties
/// (a save, a rename) carries both.
extension Store {
    static let nameExtension = "fs.name"
    static let textExtension = "fs.text"
    /// The largest head that travels (a server takes 100 KB per namespace); a longer one is said
    /// to be there (`omitted`), and the other mounts keep theirs while it goes with the properties.
    static let maxHeadBytes = 64 << 10

    /// `fs.name` and `fs.text` for item `cur` as its row holds it.
    func fileForm(_ cur: StoredItem) -> [String: JSONValue] {
        let t = type(cur.item.type)
        var out: [String: JSONValue] = [Self.nameExtension: .null, Self.textExtension: .null]
        let given = Names.stemAndExt(id: cur.item.id, type: t, properties: cur.item.properties, fileName: nil)
        if let f = cur.fileName, f != Names.compose(stem: given.stem, ext: given.ext) {
            out[Self.nameExtension] = .object(["name": .string(f), "title": cur.item.properties[t.titleField] ?? .null])
        }
        guard !TypeSchema.isBlobType(t.id), !cur.unsettled, cur.sync != .invalid, let bytes = cur.raw,
              case .string(let body)? = cur.item.properties[t.bodyField], bytes.count >= body.utf8.count else { return out }
        if bytes.elementsEqual(render(type: t, properties: cur.item.properties).utf8) { return out }
        let head = bytes.prefix(bytes.count - body.utf8.count)
        guard bytes.suffix(body.utf8.count).elementsEqual(body.utf8), let text = String(validating: head, as: UTF8.self) else { return out }
        // A head too large to travel is said to be there: the other mounts keep the one they
        // have while it still goes with the properties.
        out[Self.textExtension] = head.count <= Self.maxHeadBytes ? .object(["head": .string(text)]) : .object(["omitted": .int(Int64(head.count))])
        return out
    }

    /// Queues item `id`'s form after its create, when it has one to say, or when an update
    /// waiting after the create may hold an older one (a create written again before it went).
    /// `row`: the item as its row holds it, when the caller has it (else read here).
    func enqueueFileFormAfterCreate(_ db: Database, itemID id: String, row: StoredItem? = nil) throws {
        if isLocalOnly { return }
        guard let cur = try row ?? db.row("SELECT * FROM items WHERE id = ?", [id]).map(StoredItem.init(row:)) else { return }
        var form = fileForm(cur)
        let waiting = try Self.lastMutationHead(db, id).map { $0.kind == .update && $0.state == .pending } ?? false
        if !waiting {
            form = form.filter { $0.value != .null }
            if form.isEmpty { return }
        }
        try enqueue(db, kind: .update, itemID: id, payload: ["extensions": .object(form), "base_version": .int(0)], coalesce: true)
    }

    /// The form a remote item's frame gives it here, taken into row `rowid` once its properties
    /// (`remote`) are written: its file name (`fs.name`, else the one it has while that still gives
    /// its title) and its text's head (`fs.text`, else its rendering). A frame with no extensions
    /// (`item.updated`: a change of the properties alone, W-15) leaves the name and head the item
    /// has while they still go with it: a change of either comes with the extensions that say it.
    /// `previousTitle`: the title before this frame. `propertiesChanged`: the frame changed the
    /// properties; else bytes written here that no head gave (a text whose body is not its end)
    /// stay. Returns what changed: its name, its bytes.
    func takeFileForm(_ db: Database, rowid: Int64, _ remote: Item, extensions: [String: JSONValue]?,
                      previousTitle: JSONValue?, propertiesChanged: Bool) throws -> (named: Bool, bytes: Bool) {
        let t = type(remote.type)
        guard let row = try db.row("SELECT file_name, stem, ext, raw, raw_head, size FROM items WHERE rowid = ?", [rowid]) else { return (false, false) }
        let title = remote.properties[t.titleField] ?? .null
        var fileName: String? = row["file_name"]
        if case .object(let o)? = extensions?[Self.nameExtension], let n = o["name"]?.stringValue, Names.isValidComponent(n), (o["title"] ?? .null) == title {
            fileName = n
        } else if let f = fileName, Self.titleFromFileName(f, type: t) != title.stringValue,
                  try previousTitle != title || (extensions != nil && Self.meta(db, Self.fileFormSentKey) != nil) {
            // Extensions without `fs.name` say the name is the title's, once this store has sent
            // the forms it held (`queueFileFormOnce`); before that, the server may hold items this
            // store sent with a build that did not send them, and their names stay.
            fileName = nil
        }
        let (stem, ext) = Names.stemAndExt(id: remote.id, type: t, properties: remote.properties, fileName: fileName)
        let named = fileName != row["file_name"] || stem != row["stem"] || ext != row["ext"]
        if named { try db.run("UPDATE items SET file_name = ?, stem = ?, ext = ? WHERE rowid = ?", [fileName, stem, ext, rowid]) }
        guard !TypeSchema.isBlobType(t.id), case .string(let body)? = remote.properties[t.bodyField] else { return (named, false) }
        let rendered = Array(render(type: t, properties: remote.properties).utf8)
        let before: Data? = row["raw_head"], raw: Data? = row["raw"]
        // The head to show the body under: the frame's, or with no extensions the one it has.
        var given: String?
        let said = extensions?[Self.textExtension]?.objectValue
        if let h = said?["head"]?.stringValue {
            given = h
        } else if extensions == nil || said?["omitted"] != nil, let b = before, let nul = b.firstIndex(of: 0) {
            given = String(validating: b[(nul + 1)...], as: UTF8.self)
        }
        var head: Data?, size = Int64(rendered.count)
        if let h = given {
            let bytes = Array(h.utf8) + Array(body.utf8)
            if let p = try? Self.parseText(bytes, type: t, fileName: fileName ?? Names.compose(stem: stem, ext: ext), previous: [:]), p == remote.properties {
                head = Data(t.bodyField.utf8) + Data([0]) + Data(h.utf8)
                size = Int64(bytes.count)
            }
        }
        if head == nil && !propertiesChanged {
            // No head: the writer's text was the rendering, or had no head to give.
            if raw != nil { return (named, false) }
            guard let joined = RawText.join(head: before, properties: remote.properties), !joined.elementsEqual(rendered) else { return (named, false) }
        }
        guard head != before || raw != nil || size != row["size"] else { return (named, false) }
        try db.run("UPDATE items SET raw = NULL, raw_head = ?, size = ? WHERE rowid = ?", [head, size, rowid])
        return (named, true)
    }
}

extension Store {
    static let fileFormSentKey = "file_form_sent"

    /// Once per store bound to a server: the form of every item that has one to say, for items
    /// a build before `fs.name` and `fs.text` sent (the other mounts showed them under their
    /// titles' names, their front matter rendered). Items the server has get an update of their
    /// extensions alone; items whose create still waits get it after their create. Returns how
    /// many it queued. Nothing is written once it has run (a mount on a full disk starts; if it
    /// cannot write, the next mount runs it).
    @discardableResult
    public func queueFileFormOnce() throws -> Int {
        if isLocalOnly { return 0 }
        let done = try pool.read { db in try Self.meta(db, Self.fileFormSentKey) != nil }
        if done { return 0 }
        return try write { db -> Int in
            var queued = 0
            let rows = try Row.fetchAll(db, sql: """
                SELECT * FROM items WHERE state != 'trashed' AND sync != 'invalid'
                  AND (file_name IS NOT NULL OR raw IS NOT NULL OR raw_head IS NOT NULL) ORDER BY rowid
                """)
            for row in rows {
                let cur = StoredItem(row: row)
                let form = fileForm(cur).filter { $0.value != .null }
                if form.isEmpty { continue }
                if cur.item.version == 0 {
                    // Not on the server yet: after its create, if that waits (else nothing has it).
                    guard try db.exists("SELECT 1 FROM mutations WHERE item_id = ? AND kind = 'create'", [cur.item.id]) else { continue }
                    try enqueueFileFormAfterCreate(db, itemID: cur.item.id, row: cur)
                    queued += 1
                    continue
                }
                try enqueue(db, kind: .update, itemID: cur.item.id, payload: [
                    "extensions": .object(form), "base_version": .int(Int64(cur.item.version)),
                ], coalesce: true)
                queued += 1
            }
            try Self.setMeta(db, Self.fileFormSentKey, "1")
            return queued
        }
    }
}
