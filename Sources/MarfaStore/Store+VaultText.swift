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

    /// The tags a note's properties hold in their text (front matter and body).
    func textTags(_ t: TypeSchema, _ properties: [String: JSONValue]) -> [String] {
        Self.tagsFollowText(t.id) ? VaultText.tags(properties: properties, bodyField: t.bodyField) : []
    }

    /// After a local change of a note's properties from `before` to the item's: the tags its old
    /// text gave are replaced by those its new text gives; the others stay.
    func followTextTags(_ db: Database, _ cur: StoredItem, before: [String: JSONValue]) throws {
        let t = type(cur.item.type)
        guard Self.tagsFollowText(t.id) else { return }
        let old = Set(textTags(t, before).map { $0.lowercased() })
        let current = Set(try Self.tags(db, cur.item.id))
        var next = current.filter { Self.tagStaysMetadata($0) || !old.contains($0.lowercased()) }
        var lower = Set(next.map { $0.lowercased() })
        for tag in textTags(t, cur.item.properties) where lower.insert(tag.lowercased()).inserted { next.insert(tag) }
        if next != current { try setTags(db, cur, next) }
    }

    /// Stores the links of properties just written (their trigger marked them stale): a local
    /// write parsed them already, so the mount need not parse them again.
    func storeLinks(_ db: Database, _ rowid: Int64, _ t: TypeSchema, _ properties: [String: JSONValue]) throws {
        let links = VaultText.links(properties: properties, bodyField: t.bodyField)
        try db.execute(sql: "UPDATE items SET links = ?, links_stale = 0 WHERE rowid = ?",
                       arguments: [links.isEmpty ? nil : VaultLinks.encode(links), rowid])
    }

    /// Sets an item's tags; for a note, the tags added are written into its front matter (in its
    /// style) and the tags removed are taken out of its text, then the set is stored.
    func setTagsFollowingText(_ db: Database, _ cur: StoredItem, _ tags: Set<String>) throws {
        var cur = cur
        if Self.tagsFollowText(cur.item.type), cur.sync != .invalid {
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
                if Array(text.utf8) != bytes { cur = try applyContent(db, cur, bytes: Array(text.utf8), now: Date(), mergeStale: false) }
            }
        }
        try setTags(db, cur, tags)
    }
}
