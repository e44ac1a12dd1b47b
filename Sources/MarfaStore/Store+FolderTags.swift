import Crypto
import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// Folders of any length (FS-31). Locally an item's folder is the tag `folder:<path>`, whatever
/// the path's length or characters (PATH_MAX is the limit). A tag on the wire is at most 128
/// characters without a comma (W-2); a folder tag that is not one travels as a short form —
/// `folder:` + the path's first characters (commas as `_`) + `~` + 16 hex digits of the path's
/// SHA-256 — with the whole path in the item's extension `fs.folder` (`{"path": "…"}`). A mount
/// that receives the short form with its extension takes the whole path back; without it (another
/// client, or the extension not there yet) the short form is an ordinary folder tag.
extension Store {
    static let folderExtension = "fs.folder"

    /// How a tag travels: itself, or a folder tag's short form.
    public static func wireTag(_ tag: String) -> String {
        guard tag.hasPrefix(VaultText.folderPrefix), !TagRule.isValid(tag) else { return tag }
        let path = String(tag.dropFirst(VaultText.folderPrefix.count))
        let digest = SHA256.hash(data: Data(path.utf8)).prefix(8).map { String(format: "%02x", $0) }.joined()
        let room = TagRule.maxCharacters - VaultText.folderPrefix.count - 1 - digest.count
        let head = String(path.prefix(room)).map { $0 == "," || $0.unicodeScalars.contains { $0.properties.generalCategory == .control } ? "_" : String($0) }.joined()
        return VaultText.folderPrefix + head + "~" + digest
    }

    /// Whether a tag may be kept locally: one the wire takes, or a folder tag of any length.
    public static func isLocalTag(_ tag: String) -> Bool {
        TagRule.isValid(wireTag(tag)) && !TagRule.hasControlCharacter(tag)
    }

    /// An item's tags as they travel, and the extension that carries a long folder's whole path
    /// (nil: none is needed).
    static func wireTags(_ tags: [String]) -> (tags: [String], folder: String?) {
        var folder: String?
        let wire = tags.map { t in
            let w = wireTag(t)
            if w != t { folder = String(t.dropFirst(VaultText.folderPrefix.count)) }
            return w
        }
        return (wire, folder)
    }

    /// Tags as received, with a long folder's short form taken back to its whole path when the
    /// item's extension `fs.folder` names the path it stands for.
    static func localTags(_ tags: [String], extensions: [String: JSONValue]?) -> [String] {
        guard let path = extensions?[folderExtension]?.objectValue?["path"]?.stringValue else { return tags }
        let full = VaultText.folderPrefix + path
        let short = wireTag(full)
        return tags.map { $0 == short ? full : $0 }
    }

    /// Queues the extension that carries a long folder's path, or its removal, when `tags` (the
    /// item's tags now) or `before` hold a long folder.
    func enqueueFolderExtension(_ db: Database, itemID: String, tags: [String], before: [String] = [], version: Int64) throws {
        let now = Self.wireTags(tags).folder
        if now == nil && Self.wireTags(before).folder == nil { return }
        let value: JSONValue = now.map { .object(["path": .string($0)]) } ?? .null
        try enqueue(db, kind: .update, itemID: itemID, payload: [
            "extensions": .object([Self.folderExtension: value]), "base_version": .int(version),
        ], coalesce: true)
    }
}
