import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// A note's tags are its text's (FS-26): front-matter `tags:` and inline `#tags` become the
/// item's tags when the note is written here, and a tag added to or removed from a note is
/// written into or taken out of its text. Tags that are Marfa's own (`favorite`,
/// `conflicted-copy`) or not Obsidian tags (`folder:a/b`) stay metadata only.
extension Store {
    public static func tagStaysMetadata(_ tag: String) -> Bool {
        tag == "favorite" || tag == "conflicted-copy" || !VaultText.isTag(tag)
    }

    /// Whether an item type's tags follow its text: notes.
    public static func tagsFollowText(_ type: String) -> Bool { type == "core.note" }

    /// `tags` with the tags a note's text holds added (case-insensitively new ones only).
    static func adding(_ textTags: [String], to tags: Set<String>) -> Set<String> {
        var out = tags
        var lower = Set(tags.map { $0.lowercased() })
        for tag in textTags where lower.insert(tag.lowercased()).inserted { out.insert(tag) }
        return out
    }

    /// After a local write of a text item's properties (`said`: what they say, read once):
    /// for a note, the tags its old text (`before`) gave are replaced by those its new text
    /// gives, the others staying; for every text item, its links are stored (the trigger marked
    /// them stale; a local write has read them already, so the mount need not).
    func followText(_ db: Database, _ cur: StoredItem, before: [String: JSONValue]?, said: VaultText.Scan) throws {
        try storeLinks(db, cur.rowid, said.links)
        if let change = try tagsAfterText(db, cur, before: before, said: said) { try setTags(db, cur, change.new, known: change.old) }
    }

    /// The tags an item has once its text says `said` (FS-26): those the text gives, the
    /// metadata tags, and the ones it had that the text before (`before`) did not give, with the
    /// ones it has now; nil when they stay as they are.
    func tagsAfterText(_ db: Database, _ cur: StoredItem, before: [String: JSONValue]?, said: VaultText.Scan) throws -> (old: Set<String>, new: Set<String>)? {
        let t = type(cur.item.type)
        guard Self.tagsFollowText(t.id), let before else { return nil }
        let old = Set(VaultText.read(properties: before, bodyField: t.bodyField).tags.map { $0.lowercased() })
        let current = Set(try Self.tags(db, cur.item.id))
        let next = Self.adding(said.tags, to: current.filter { Self.tagStaysMetadata($0) || !old.contains($0.lowercased()) })
        return next == current ? nil : (current, next)
    }

    /// After a local write of text whose front matter does not parse (FS-10, FS-32): what can be
    /// read of it (`FrontMatter.salvage`: the body, the keys that parse alone) still gives the
    /// note's links and tags, as Obsidian reads such a note. `before`: what the previous text
    /// said. The tags reach the queue only when the server knows the item or its create is
    /// queued; otherwise its create, once the text parses, carries them.
    func followInvalidText(_ db: Database, _ cur: StoredItem, _ bytes: [UInt8], before: [String: JSONValue]?) throws {
        let t = type(cur.item.type)
        guard let readable = FrontMatter.salvage(bytes, bodyField: t.bodyField) else { return }
        let said = VaultText.read(properties: readable, bodyField: t.bodyField)
        if try cur.item.version > 0 || Self.pendingCreate(db, cur.item.id) {
            return try followText(db, cur, before: before, said: said)
        }
        try storeLinks(db, cur.rowid, said.links)
        guard Self.tagsFollowText(t.id), let before else { return }
        let old = Set(VaultText.read(properties: before, bodyField: t.bodyField).tags.map { $0.lowercased() })
        let current = Set(try Self.tags(db, cur.item.id))
        let next = Self.adding(said.tags, to: current.filter { Self.tagStaysMetadata($0) || !old.contains($0.lowercased()) })
        for tag in current.subtracting(next) { try db.run("DELETE FROM tags WHERE item_id = ? AND tag = ?", [cur.item.id, tag]) }
        for tag in next.subtracting(current) { try db.run("INSERT INTO tags(item_id, tag) VALUES (?, ?)", [cur.item.id, tag]) }
    }

    /// Stores a text item's links, read from the properties just written.
    func storeLinks(_ db: Database, _ rowid: Int64, _ links: [VaultLink]) throws {
        try db.run("UPDATE items SET links = ?, links_stale = 0 WHERE rowid = ?", [Self.linksColumn(links), rowid])
    }

    /// The `links` column for a text's links (NULL for none).
    static func linksColumn(_ links: [VaultLink]) -> String? {
        links.isEmpty ? nil : VaultLinks.encode(links)
    }

    /// What an `UPDATE` that writes `links` with the properties sets `links_stale` to: fresh, and
    /// changed, so the trigger knows the links were written (Schema: v16-links-written).
    static let linksWritten = "links_stale = CASE links_stale WHEN 0 THEN 2 ELSE 0 END"

    /// Sets an item's tags; for a note, the tags added are written into its front matter (in its
    /// style) and the tags removed are taken out of its text, then the set is stored.
    func setTagsFollowingText(_ db: Database, _ cur: StoredItem, _ tags: Set<String>) throws {
        var cur = cur
        // Only tags a text can hold send the text through an edit.
        let textual = tags.symmetricDifference(Set(try Self.tags(db, cur.item.id))).contains { !Self.tagStaysMetadata($0) }
        if textual, Self.tagsFollowText(cur.item.type), cur.sync != .invalid {
            let current = Set(try Self.tags(db, cur.item.id))
            let bytes = try currentBytes(db, cur)
            if var text = String(validating: bytes, as: UTF8.self) {
                let inText = Set(VaultText.scan(text).tags.map { $0.lowercased() })
                for tag in tags.subtracting(current).sorted() where !Self.tagStaysMetadata(tag) {
                    if let t = VaultText.addingTag(tag, to: text) { text = t }
                }
                for tag in current.subtracting(tags).sorted() where inText.contains(tag.lowercased()) {
                    if let t = VaultText.removingTag(tag, from: text) { text = t }
                }
                if Array(text.utf8) != bytes { cur = try applyContent(db, cur, bytes: Array(text.utf8), now: Date(), origin: .currentText) }
            }
        }
        try setTags(db, cur, tags)
    }
}
