import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// Empty folders through a Marfa server (FS-32). The wire knows items and their tags, and a folder
/// of the vault's tree is the `folder:` tag of the items in it, so a folder with nothing in it has
/// nothing to travel with. Such a folder travels as a folder marker: an item of the custom type
/// `marfafs.folder` whose property `path` names it. A marker is never an item here: the remote's
/// markers are taken out of its changes before they are applied (`applyFolderMarker`) and become
/// kept folders (`local_tags`), and this mount's own are made and removed by the sync engine from
/// `folder_markers`, outside the queue (`folderMarkerWork`).
///
/// Which folders have a marker: every kept folder of the tree that holds nothing that travels (no
/// active item in it or below it, staged or not, no kept folder below it: its deepest empty
/// folders, once they have stayed empty for a moment; the folders
/// above them come with them). A marker stays while its folder is in the tree here, whatever comes
/// into it later; it is removed from the server once its folder is gone from the tree here
/// (`rmdir`, a rename) and nothing written here is left to send. A marker the remote removes
/// removes its folder here if the folder holds nothing (as `rmdir` would) and no other marker
/// names it; a folder that holds something here (a note put in it meanwhile) stays, and is kept.
///
/// Locks: `folderMarkerWork` reads the staging (its own lock) before any transaction, and takes
/// the pending folders' lock inside one (the writer, then that lock, as `PendingFolders` says).
///
/// A row's state: `new` (made here, to be sent; a send repeated after a lost answer is
/// acknowledged by the server, the marker's id being chosen here), `live` (the server has it),
/// `gone` (its folder went from the tree here: to be removed there; the echo of its creation, late
/// on the stream, is then ignored).
public enum FolderMarker {
    /// The marker's type on the server (a custom type, registered by the engine: W-9).
    public static let type = "marfafs.folder"

    /// The type's definition as `POST /types` takes it.
    public static let definition: [String: JSONValue] = [
        "id": .string(type), "label": .string("Folder (marfafs)"),
        "fields": .object(["path": .object(["type": .string("string"), "required": .bool(true)])]),
    ]

    enum State: String, DatabaseValueConvertible { case new, live, gone }

    /// A marker the engine sends or removes.
    public struct Row: Sendable, Equatable {
        public var id: String
        public var path: String
    }
}

/// What the sync engine owes the server of this mount's markers.
public struct FolderMarkerWork: Sendable, Equatable {
    /// Markers to create (`POST /items`, the id given).
    public var send: [FolderMarker.Row] = []
    /// Markers to remove (`DELETE /items/{id}`).
    public var remove: [FolderMarker.Row] = []
    /// Empty folders with no marker that `ripe` did not name: not given one yet.
    public var waiting: [String] = []
    public var isEmpty: Bool { send.isEmpty && remove.isEmpty }
}

extension Store {
    /// Takes a remote change that is about a folder marker (true: it was one, and is applied).
    func applyFolderMarker(_ db: Database, _ c: RemoteChange, into out: inout StoreChanges) throws -> Bool {
        let id: String
        switch c {
        case let .item(item, _, _):
            guard item.type == FolderMarker.type else { return false }
            id = item.id
            let path = item.properties["path"]?.stringValue ?? ""
            guard item.state == .active else { try markerRemoved(db, id, into: &out); return true }
            let known: FolderMarker.State? = try FolderMarker.State.fetchOne(db, sql: "SELECT state FROM folder_markers WHERE item_id = ?", arguments: [id])
            switch known {
            case .gone?: return true  // removed here meanwhile: its removal is on its way
            case .new?: try db.run("UPDATE folder_markers SET state = ? WHERE item_id = ?", [FolderMarker.State.live, id]); return true
            case .live?: return true
            case nil: break
            }
            let tag = VaultText.folderPrefix + path
            // A path no folder can have here is not taken (and its marker is left alone).
            guard Self.isFolderPath(path), Self.isLocalTag(tag) else { out.skipped += 1; return true }
            try db.run("INSERT INTO folder_markers(item_id, path, state) VALUES (?, ?, ?)", [id, path, FolderMarker.State.live])
            try db.run("INSERT OR IGNORE INTO local_tags(tag) VALUES (?)", [tag])
            if db.changesCount > 0 { out.folders.insert(tag); out.applied += 1 }
            return true
        case let .metadata(itemID, _, _, state, _):
            guard try db.exists("SELECT 1 FROM folder_markers WHERE item_id = ?", [itemID]) else { return false }
            if let state, state != .active { try markerRemoved(db, itemID, into: &out) }
            return true
        case let .deleted(itemID):
            guard try db.exists("SELECT 1 FROM folder_markers WHERE item_id = ?", [itemID]) else { return false }
            try markerRemoved(db, itemID, into: &out)
            return true
        case .edge, .edgeDeleted:
            return false
        }
    }

    /// A marker the remote removed: its row goes, and its folder with it if the folder holds
    /// nothing and no other marker names it.
    func markerRemoved(_ db: Database, _ id: String, into out: inout StoreChanges) throws {
        guard let path = try String.fetchOne(db, sql: "SELECT path FROM folder_markers WHERE item_id = ?", arguments: [id]) else { return }
        try db.run("DELETE FROM folder_markers WHERE item_id = ?", [id])
        if try db.exists("SELECT 1 FROM folder_markers WHERE path = ? AND state != ?", [path, FolderMarker.State.gone]) { return }
        if try removeFolderIfEmpty(db, path) { out.foldersRemoved.insert(VaultText.folderPrefix + path); out.applied += 1 }
    }

    /// The `folder:` tags of an active item (none for one trashed or archived).
    func activeFolders(_ db: Database, _ itemID: String) throws -> Set<String> {
        guard try db.exists("SELECT 1 FROM items WHERE id = ? AND state = 'active'", [itemID]) else { return [] }
        return Set(try Self.tags(db, itemID).filter { $0.hasPrefix(VaultText.folderPrefix) })
    }

    /// Folders a remote change took an item out of (`tags`: their `folder:` tags; a folder renamed,
    /// a file moved or removed on the other device): each one kept here that is left with nothing
    /// in it, and the kept folders above it left so, go from the tree, as they went where the
    /// change was made. Without this a folder made here with `mkdir` outlived its rename
    /// elsewhere, and its marker (sent once it was seen empty here) brought it back, empty, to
    /// every device. A folder some marker names stays: it was meant to be there empty.
    func foldersLeft(_ db: Database, _ tags: Set<String>, into out: inout StoreChanges) throws {
        for f in VaultText.folderLevels(tags).sorted(by: { $0.count > $1.count }) {
            if try db.exists("SELECT 1 FROM folder_markers WHERE path = ? AND state != ?", [f, FolderMarker.State.gone]) { continue }
            if try removeFolderIfEmpty(db, f) { out.foldersRemoved.insert(VaultText.folderPrefix + f); out.applied += 1 }
        }
    }

    /// The `folder:` tags kept while empty (`local_tags`, with what waits beside the store), read
    /// through `read` (the pool's, or a transaction's connection).
    func keptFolderTags(_ read: ((Database) throws -> [String]) throws -> [String]) throws -> Set<String> {
        let seen = pendingFolders.seen
        return pendingFolders.localTags(try read { db in try String.fetchAll(db, sql: "SELECT tag FROM local_tags WHERE tag LIKE 'folder:%'") }, seen)
            .filter { $0.hasPrefix(VaultText.folderPrefix) }
    }

    /// A folder path as a marker may name it: relative, each part a name a file may have (not
    /// empty, `.` or `..`, at most 255 bytes, no NUL), shorter than PATH_MAX.
    static func isFolderPath(_ path: String) -> Bool {
        !path.isEmpty && path.utf8.count < 4096
            && path.split(separator: "/", omittingEmptySubsequences: false).allSatisfy { Names.isValidComponent(String($0)) }
    }

    /// Brings `folder_markers` up to the tree (a marker for each deepest empty kept folder that
    /// has none; those whose folder is gone marked `gone`) and returns what the server is owed.
    /// `isLocalOnly`: folders that stay on this disk (`.git/`, `.marfafsignore`), never sent; asked
    /// outside any transaction (the filesystem answers it under its own lock, which it may hold
    /// while it waits for the store). Reads first and writes only when something changed.
    /// `ripe`: the empty folders that may be given a marker now (the engine's: those empty for a
    /// while, so a tool's `mkdir` followed by its files makes none); the others come back as
    /// `waiting`.
    public func folderMarkerWork(isLocalOnly: (String) -> Bool, ripe: Set<String>) throws -> FolderMarkerWork {
        let keptTags = try keptFolderTags { try pool.read($0) }
        let asked = Set(keptTags.map { String($0.dropFirst(VaultText.folderPrefix.count)) })
        let localOnly = Set(asked.filter(isLocalOnly))
        // Whether everything written here has been sent (what waits beside the store included): a
        // marker goes only then, after the removals that emptied its folder (the server's events
        // keep that order, so another mount finds the folder empty and removes it).
        let sent = try !hasPending && stagingIsEmpty && unsentCount() == 0
            && !pool.read { db in try db.exists("SELECT 1 FROM items WHERE unsettled = 1 LIMIT 1") }
        // Files made through the mount that have no row yet hold their folders too. Read here, not
        // in a transaction: a commit of staged files holds the staging's lock while it waits for
        // the store's writer.
        let staged = staging.list().flatMap { f -> [String] in
            guard case .item(let n, _) = f.origin else { return [] }
            return n.tags.filter { $0.hasPrefix(VaultText.folderPrefix) }.map { String($0.dropFirst(VaultText.folderPrefix.count)) }
        }
        func plan(_ db: Database) throws -> (make: [String], gone: [String]) {
            // A range of the tags' index (`LIKE` would read every tag of every item).
            let used = try String.fetchAll(db, sql: """
                SELECT tag FROM (SELECT DISTINCT tag FROM tags WHERE tag >= 'folder:' AND tag < 'folder;') AS t
                WHERE EXISTS (SELECT 1 FROM tags AS x JOIN items ON items.id = x.item_id WHERE x.tag = t.tag AND items.state = 'active')
                """).map { String($0.dropFirst(VaultText.folderPrefix.count)) }
            let keptTags = try keptFolderTags { try $0(db) }
            // A folder made since `isLocalOnly` was asked waits for the next pass.
            let kept = keptTags.map { String($0.dropFirst(VaultText.folderPrefix.count)) }
                .filter { Self.isFolderPath($0) && asked.contains($0) && !localOnly.contains($0) }
            // Folders that hold something that travels: those of active items, and those above them
            // and above kept folders.
            var holding = Set<String>()
            func addAbove(_ path: String, itself: Bool) {
                var f = Substring(path)
                if !itself {
                    guard let i = f.lastIndex(of: "/") else { return }
                    f = f[..<i]
                }
                while !f.isEmpty, holding.insert(String(f)).inserted {
                    guard let i = f.lastIndex(of: "/") else { break }
                    f = f[..<i]
                }
            }
            for f in used + staged { addAbove(f, itself: true) }
            for f in kept { addAbove(f, itself: false) }
            var tree = holding
            for f in kept { tree.insert(f) }
            let rows = try Row.fetchAll(db, sql: "SELECT path, state FROM folder_markers")
            var marked = Set<String>(), gone: [String] = []
            for r in rows {
                let path: String = r["path"], state: FolderMarker.State = r["state"]
                guard state != .gone else { continue }
                if tree.contains(path) { marked.insert(path) } else if sent { gone.append(path) }
            }
            let make = kept.filter { !holding.contains($0) && !marked.contains($0) }.sorted()
            return (make, gone)
        }
        let (unmarked, gone) = try pool.read(plan)
        let make = unmarked.filter(ripe.contains)
        if !make.isEmpty || !gone.isEmpty {
            try write { db in
                // Again in the transaction: the tree may have changed since the read.
                let (unmarked, gone) = try plan(db)
                for p in unmarked where ripe.contains(p) {
                    try db.run("INSERT INTO folder_markers(item_id, path, state) VALUES (?, ?, ?)", [ItemID.make(), p, FolderMarker.State.new])
                }
                for p in gone {
                    try db.run("UPDATE folder_markers SET state = ? WHERE path = ? AND state != ?", [FolderMarker.State.gone, p, FolderMarker.State.gone])
                }
            }
        }
        return try pool.read { db in
            var work = FolderMarkerWork(waiting: unmarked.filter { !ripe.contains($0) })
            for r in try Row.fetchAll(db, sql: "SELECT item_id, path, state FROM folder_markers WHERE state != ? ORDER BY path", arguments: [FolderMarker.State.live]) {
                let row = FolderMarker.Row(id: r["item_id"], path: r["path"])
                if (r["state"] as FolderMarker.State) == .new { work.send.append(row) } else { work.remove.append(row) }
            }
            return work
        }
    }

    /// The server has marker `id` (its create answered).
    public func folderMarkerSent(_ id: String) throws {
        try write { db in
            try db.run("UPDATE folder_markers SET state = ? WHERE item_id = ? AND state = ?", [FolderMarker.State.live, id, FolderMarker.State.new])
        }
    }

    /// The server no longer has marker `id` (its removal answered, or it had none).
    public func folderMarkerRemoved(_ id: String) throws {
        try write { db in try db.run("DELETE FROM folder_markers WHERE item_id = ? AND state = ?", [id, FolderMarker.State.gone]) }
    }

    /// Removes kept folder `path` if it holds nothing: no active item in or below it, no kept
    /// folder below it. True if it went.
    func removeFolderIfEmpty(_ db: Database, _ path: String) throws -> Bool {
        let tag = VaultText.folderPrefix + path
        let held = try db.exists("""
            SELECT 1 FROM tags JOIN items ON items.id = tags.item_id
            WHERE (tags.tag = ? OR tags.tag LIKE ? ESCAPE '\\') AND items.state = 'active' LIMIT 1
            """, [tag, Self.likePrefix(tag + "/")])
            || db.exists("SELECT 1 FROM local_tags WHERE tag LIKE ? ESCAPE '\\' LIMIT 1", [Self.likePrefix(tag + "/")])
        if held { return false }
        try db.run("DELETE FROM local_tags WHERE tag = ?", [tag])
        return db.changesCount > 0
    }
}
