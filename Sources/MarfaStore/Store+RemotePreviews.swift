import Foundation
import GRDB

/// A MyLifeDB server's preview images (FS-34), by their name in its archive: which items have one
/// (`user.mylifedb.preview_sqlar` of `remote_files`), and their bytes once fetched
/// (`remote_previews`), kept for reading offline.
extension Store {
    /// The items whose file has a preview on the server (`user.mylifedb.preview_sqlar`): item id →
    /// the preview's name in the server's archive.
    public func previewNames() -> [String: String] {
        let rows = (try? pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT item_id, json_extract(attrs, '$."user.mylifedb.preview_sqlar"') FROM remote_files
                WHERE json_extract(attrs, '$."user.mylifedb.preview_sqlar"') IS NOT NULL
                """)
        }) ?? []
        var out: [String: String] = [:]
        for r in rows { if let id: String = r[0], let name: String = r[1], !name.isEmpty { out[id] = name } }
        return out
    }

    /// A preview's bytes, if kept.
    public func preview(_ name: String) -> [UInt8]? {
        (try? pool.read { db in try Data.fetchOne(db, sql: "SELECT bytes FROM remote_previews WHERE name = ?", arguments: [name]) })??.map { $0 }
    }

    public func keepPreview(_ name: String, _ bytes: [UInt8]) throws {
        try write { db in try db.run("INSERT OR REPLACE INTO remote_previews(name, bytes) VALUES (?, ?)", [name, Data(bytes)]) }
    }
}
