import Foundation
import GRDB
import MarfaModel

/// Schema and migrations of the local store. The `items.rowid` is the item's inode number (FS-3).
enum Schema {
    static func migrator() -> DatabaseMigrator {
        var m = DatabaseMigrator()
        for (id, sql) in migrations {
            m.registerMigration(id) { db in
                try db.execute(sql: sql)
                // The built-in types come with the first schema.
                if id == "v1" { try insertBuiltInTypes(db) }
            }
        }
        return m
    }

    /// Every migration, oldest first: an id, once shipped, never changes, nor does its SQL.
    static let migrations: [(id: String, sql: String)] = [
        ("v1", """
            CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE types(id TEXT PRIMARY KEY, json TEXT NOT NULL);
            -- Small columns first: a summary (what the mount needs to name and stat an item) is read
            -- from the row's first page without walking the overflow pages of the large columns.
            CREATE TABLE items(
              rowid INTEGER PRIMARY KEY AUTOINCREMENT,
              id TEXT NOT NULL UNIQUE,
              type TEXT NOT NULL,
              stem TEXT NOT NULL,
              ext TEXT NOT NULL,
              size INTEGER NOT NULL,
              mtime_ns INTEGER NOT NULL,
              created_at TEXT NOT NULL,
              state TEXT NOT NULL,
              blob_ref TEXT,
              file_name TEXT,
              version INTEGER NOT NULL DEFAULT 1,
              schema_version INTEGER NOT NULL DEFAULT 1,
              source TEXT NOT NULL,
              source_id TEXT,
              timestamp TEXT NOT NULL,
              updated_at TEXT NOT NULL,
              tier TEXT NOT NULL,
              sync TEXT NOT NULL,
              sync_error TEXT,
              xattrs TEXT NOT NULL DEFAULT '{}',
              properties TEXT NOT NULL,
              raw BLOB
            );
            -- blob_ref mirrors properties.blob_ref of blob items, so summaries never parse properties.
            CREATE TRIGGER items_blob_ref_insert AFTER INSERT ON items WHEN NEW.type = 'core.file' OR NEW.type LIKE 'core.file.%'
            BEGIN UPDATE items SET blob_ref = json_extract(NEW.properties, '$.blob_ref') WHERE rowid = NEW.rowid; END;
            CREATE TRIGGER items_blob_ref_update AFTER UPDATE OF properties ON items WHEN NEW.type = 'core.file' OR NEW.type LIKE 'core.file.%'
            BEGIN UPDATE items SET blob_ref = json_extract(NEW.properties, '$.blob_ref') WHERE rowid = NEW.rowid; END;
            CREATE TABLE tags(item_id TEXT NOT NULL, tag TEXT NOT NULL, PRIMARY KEY(item_id, tag)) WITHOUT ROWID;
            CREATE INDEX tags_by_tag ON tags(tag);
            CREATE TABLE local_tags(tag TEXT PRIMARY KEY) WITHOUT ROWID;
            CREATE TABLE edges(
              rowid INTEGER PRIMARY KEY AUTOINCREMENT,
              id TEXT NOT NULL UNIQUE,
              source_id TEXT NOT NULL,
              target_id TEXT NOT NULL,
              edge_type TEXT NOT NULL,
              properties TEXT NOT NULL DEFAULT '{}',
              created_at TEXT NOT NULL,
              updated_at TEXT NOT NULL
            );
            CREATE INDEX edges_by_source ON edges(source_id);
            CREATE INDEX edges_by_target ON edges(target_id);
            CREATE TABLE edge_dirs(item_id TEXT NOT NULL, edge_type TEXT NOT NULL, PRIMARY KEY(item_id, edge_type)) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS sqlar(name TEXT PRIMARY KEY, mode INT, mtime INT, sz INT, data BLOB);
            CREATE TABLE mutations(
              seq INTEGER PRIMARY KEY AUTOINCREMENT,
              id TEXT NOT NULL UNIQUE,
              idempotency_key TEXT NOT NULL UNIQUE,
              kind TEXT NOT NULL,
              item_id TEXT NOT NULL,
              payload TEXT NOT NULL,
              created_at TEXT NOT NULL,
              state TEXT NOT NULL DEFAULT 'pending',
              attempts INTEGER NOT NULL DEFAULT 0,
              last_error TEXT
            );
            CREATE INDEX mutations_by_item ON mutations(item_id, seq);
            """),
        ("v2-source-index", """
            CREATE INDEX items_by_source ON items(source_id) WHERE source_id IS NOT NULL;
            """),
        ("v3-scratch", """
            -- FS-14: local-only files, by directory (e.g. `types/core.note`) and name.
            CREATE TABLE scratch(
              rowid INTEGER PRIMARY KEY AUTOINCREMENT,
              dir TEXT NOT NULL,
              name TEXT NOT NULL,
              mtime_ns INTEGER NOT NULL,
              data BLOB NOT NULL DEFAULT x'',
              UNIQUE(dir, name)
            )
            """),
        ("v4-unsettled", """
            -- FS-14: bytes written through the mount, not yet parsed and queued (Store+Settle).
            ALTER TABLE items ADD COLUMN unsettled INTEGER NOT NULL DEFAULT 0;
            CREATE INDEX items_unsettled ON items(mtime_ns) WHERE unsettled = 1;
            """),
        ("v5-purge-and-links", """
            -- FS-28: items purged from the trash (a server that still has them trashed does not
            -- bring them back); scratch symlinks (Emacs' `.#name` lock files); the times set on
            -- directories (`rsync -a`).
            CREATE TABLE purged(id TEXT PRIMARY KEY, at TEXT NOT NULL) WITHOUT ROWID;
            ALTER TABLE scratch ADD COLUMN link TEXT;
            CREATE TABLE dir_times(dir TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL) WITHOUT ROWID;
            """),
        ("v6-raw-head", """
            -- A written text file whose body is its body property keeps only what comes before the
            -- body (`<body field> NUL <front matter bytes>`): the body is stored once (FS-28).
            ALTER TABLE items ADD COLUMN raw_head BLOB;
            -- FS-24: what the mount showed of a text item before the first remote change not yet
            -- followed by a local save: the ancestor of that save's three-way merge.
            ALTER TABLE items ADD COLUMN shown_base BLOB;
            -- The trash's retention looks at trashed items only (a mount never scans every item).
            CREATE INDEX items_trashed ON items(updated_at) WHERE state = 'trashed';
            -- Whether a cached blob is still named by an item (unused blobs are deleted).
            CREATE INDEX items_by_blob ON items(blob_ref) WHERE blob_ref IS NOT NULL;
            """),
        ("v7-links", """
            -- FS-26: the links a text item's body holds (`VaultText`), one per line. Any change of
            -- its properties marks them stale (a trigger, so every path counts, the sqlite3
            -- program's too); the store reads them again when asked (`Store.allLinks`).
            ALTER TABLE items ADD COLUMN links TEXT;
            ALTER TABLE items ADD COLUMN links_stale INTEGER NOT NULL DEFAULT 0;
            CREATE TRIGGER items_links_insert AFTER INSERT ON items WHEN NEW.type NOT LIKE 'core.file%'
            BEGIN UPDATE items SET links_stale = 1 WHERE rowid = NEW.rowid; END;
            CREATE TRIGGER items_links_update AFTER UPDATE OF properties ON items WHEN NEW.type NOT LIKE 'core.file%'
            BEGIN UPDATE items SET links_stale = 1 WHERE rowid = NEW.rowid; END;
            CREATE INDEX items_links_stale ON items(rowid) WHERE links_stale = 1;
            UPDATE items SET links_stale = 1 WHERE type NOT LIKE 'core.file%';
            """),
        ("v8-tree-dirs", """
            -- FS-31: the inode number of each folder of the vault's tree, fixed for the folder's
            -- life: a rename takes it along, a remount finds it here.
            CREATE TABLE tree_dirs(path TEXT PRIMARY KEY, ino INTEGER NOT NULL UNIQUE) WITHOUT ROWID;
            """),
        ("v9-modes", """
            -- FS-31: a file's permission bits (NULL: 0644), synced as the extension `fs.stat`; a
            -- folder's (NULL: 0755), local.
            ALTER TABLE items ADD COLUMN mode INTEGER;
            ALTER TABLE tree_dirs ADD COLUMN mode INTEGER;
            """),
        ("v10-item-numbers", """
            -- FS-31: an item whose file was replaced under its name (a save by rename, a file
            -- removed and made again) takes the new file's inode; the old one stays with whoever
            -- holds it open. A row gives item `rowid` the inode of `number` (a number from the
            -- items' rowids, never another item's); the largest per item is its inode now.
            CREATE TABLE item_numbers(number INTEGER PRIMARY KEY, rowid INTEGER NOT NULL);
            CREATE INDEX item_numbers_rowid ON item_numbers(rowid);
            """),
        ("v11-symlinks", """
            -- FS-31: a symlink is a file item whose MIME type is inode/symlink and whose bytes are
            -- its target; its mode says so (S_IFLNK | 0777), for the mount's catalog.
            CREATE TRIGGER items_symlink_insert AFTER INSERT ON items
            WHEN json_extract(NEW.properties, '$.mime_type') = 'inode/symlink'
            BEGIN UPDATE items SET mode = 41471 WHERE rowid = NEW.rowid; END;
            CREATE TRIGGER items_symlink_update AFTER UPDATE OF properties ON items
            WHEN json_extract(NEW.properties, '$.mime_type') IS 'inode/symlink' OR json_extract(OLD.properties, '$.mime_type') IS 'inode/symlink'
            BEGIN UPDATE items SET mode = CASE WHEN json_extract(NEW.properties, '$.mime_type') = 'inode/symlink' THEN 41471 END WHERE rowid = NEW.rowid; END;
            """),
        ("v12-history", """
            -- FS-33: the bytes items had before each change (`Store+History`): a text's bytes, or
            -- a file's blob (kept in sqlar while a version names it); who made them, and when.
            -- `made_by` on an item: who made its current bytes.
            ALTER TABLE items ADD COLUMN made_by TEXT;
            CREATE TABLE versions(
              seq INTEGER PRIMARY KEY AUTOINCREMENT,
              item_id TEXT NOT NULL,
              made_ns INTEGER NOT NULL,
              replaced_ns INTEGER NOT NULL,
              made_by TEXT,
              blob_ref TEXT,
              bytes BLOB,
              size INTEGER NOT NULL
            );
            CREATE INDEX versions_by_item ON versions(item_id, seq);
            CREATE INDEX versions_by_blob ON versions(blob_ref) WHERE blob_ref IS NOT NULL;
            CREATE TRIGGER items_versions_purge AFTER DELETE ON items BEGIN DELETE FROM versions WHERE item_id = OLD.id; END;
            """),
        ("v13-remote-files", """
            -- FS-34: a remote of files (MyLifeDB): the file each item is there, and the folders it has.
            CREATE TABLE remote_files(
              item_id TEXT PRIMARY KEY,
              path TEXT NOT NULL UNIQUE,
              hash TEXT NOT NULL,
              size INTEGER NOT NULL,
              modified_ms INTEGER NOT NULL,
              base BLOB,
              attrs TEXT NOT NULL DEFAULT '{}'
            );
            CREATE INDEX remote_files_by_hash ON remote_files(hash);
            CREATE TABLE remote_folders(path TEXT PRIMARY KEY);
            """),
        ("v14-remote-previews", """
            -- FS-34: a MyLifeDB server's preview images, by their name in its archive, kept once fetched.
            CREATE TABLE remote_previews(name TEXT PRIMARY KEY, bytes BLOB NOT NULL);
            """),
        ("v15-remote-files-seen", """
            -- FS-34: when the store last recorded each remote file (a counter), so a reading of the
            -- tree that began before cannot undo it.
            ALTER TABLE remote_files ADD COLUMN seen INTEGER NOT NULL DEFAULT 0;
            CREATE INDEX remote_files_by_seen ON remote_files(seen);
            """),
        ("v16-links-written", """
            -- FS-26: the store writes a text item's links in the same statement as its properties,
            -- turning `links_stale` between 0 and 2 (both: fresh) or from 1 to 0; the triggers mark
            -- the links stale only when a change did not (another program's, or one of the store's
            -- own that leaves them to be read again), so a settled note is not written three times.
            DROP TRIGGER items_links_insert;
            DROP TRIGGER items_links_update;
            CREATE TRIGGER items_links_insert AFTER INSERT ON items WHEN NEW.type NOT LIKE 'core.file%' AND NEW.links_stale = 0
            BEGIN UPDATE items SET links_stale = 1 WHERE rowid = NEW.rowid; END;
            CREATE TRIGGER items_links_update AFTER UPDATE OF properties ON items
            WHEN NEW.type NOT LIKE 'core.file%' AND NEW.links_stale = OLD.links_stale AND NEW.links_stale != 1
            BEGIN UPDATE items SET links_stale = 1 WHERE rowid = NEW.rowid; END;
            """),
        ("v17-symlinks-are-file-items", """
            -- FS-31: only a file item is a symlink (a note whose front matter says
            -- `mime_type: inode/symlink` is a note); its type is looked at first, so the insert or
            -- update of a text item does not read its whole properties' JSON.
            DROP TRIGGER items_symlink_insert;
            DROP TRIGGER items_symlink_update;
            CREATE TRIGGER items_symlink_insert AFTER INSERT ON items
            WHEN (NEW.type = 'core.file' OR NEW.type LIKE 'core.file.%') AND json_extract(NEW.properties, '$.mime_type') = 'inode/symlink'
            BEGIN UPDATE items SET mode = 41471 WHERE rowid = NEW.rowid; END;
            CREATE TRIGGER items_symlink_update AFTER UPDATE OF properties ON items
            WHEN ((NEW.type = 'core.file' OR NEW.type LIKE 'core.file.%') AND json_extract(NEW.properties, '$.mime_type') IS 'inode/symlink')
              OR ((OLD.type = 'core.file' OR OLD.type LIKE 'core.file.%') AND json_extract(OLD.properties, '$.mime_type') IS 'inode/symlink')
            BEGIN UPDATE items SET mode = CASE WHEN (NEW.type = 'core.file' OR NEW.type LIKE 'core.file.%')
              AND json_extract(NEW.properties, '$.mime_type') = 'inode/symlink' THEN 41471 END WHERE rowid = NEW.rowid; END;
            """),
        ("v18-owners", """
            -- FS-31: a file's or folder's owner and group, when not the mount's user and group
            -- (NULL): local to this store, never queued or synced.
            CREATE TABLE owners(item_id TEXT PRIMARY KEY, uid INTEGER, gid INTEGER) WITHOUT ROWID;
            ALTER TABLE tree_dirs ADD COLUMN uid INTEGER;
            ALTER TABLE tree_dirs ADD COLUMN gid INTEGER;
            """),
        ("v19-folder-markers", """
            -- FS-32: the markers of empty folders on a Marfa server (`FolderMarker`): the marker
            -- item's id, the folder's path, and new (to send), live (sent) or gone (to remove).
            CREATE TABLE folder_markers(item_id TEXT PRIMARY KEY, path TEXT NOT NULL,
              state TEXT NOT NULL CHECK (state IN ('new', 'live', 'gone'))) WITHOUT ROWID;
            CREATE INDEX folder_markers_by_path ON folder_markers(path);
            """),
    ]

    static func insertBuiltInTypes(_ db: Database) throws {
        for t in TypeSchema.builtIns {
            try db.execute(sql: "INSERT INTO types(id, json) VALUES (?, ?)", arguments: [t.id, JSONCoding.encode(t)])
        }
    }
}
