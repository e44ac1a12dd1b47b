import Foundation
import GRDB

/// The reference server's database: tenants, salted key hashes, items with every version's
/// snapshot, tags, edges, blobs, custom types, the event log (and how far retention has pruned it)
/// and stored idempotent responses. Every row of tenant data
/// carries its tenant, and every query names it.
enum ServerSchema {
    static func migrator() -> DatabaseMigrator {
        var m = DatabaseMigrator()
        for (id, sql) in migrations {
            m.registerMigration(id) { db in try db.execute(sql: sql) }
        }
        return m
    }

    /// Every migration, oldest first: an id, once shipped, never changes, nor does its SQL.
    static let migrations: [(id: String, sql: String)] = [
        ("v1", """
            CREATE TABLE tenants(id TEXT PRIMARY KEY, name TEXT NOT NULL, operator INTEGER NOT NULL, created_at TEXT NOT NULL);
            CREATE TABLE keys(
              id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL REFERENCES tenants(id), label TEXT NOT NULL,
              role TEXT NOT NULL, type_permissions TEXT, lookup TEXT NOT NULL, salt BLOB NOT NULL, hash BLOB NOT NULL,
              created_at TEXT NOT NULL, last_used_at TEXT, revoked_at TEXT);
            CREATE INDEX keys_by_lookup ON keys(lookup);
            CREATE TABLE items(
              tenant_id TEXT NOT NULL, id TEXT NOT NULL, type TEXT NOT NULL, properties TEXT NOT NULL,
              version INTEGER NOT NULL, schema_version INTEGER NOT NULL, source TEXT NOT NULL, source_id TEXT,
              timestamp TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
              state TEXT NOT NULL, tier TEXT NOT NULL, PRIMARY KEY(tenant_id, id)) WITHOUT ROWID;
            CREATE INDEX items_by_updated ON items(tenant_id, updated_at, id);
            CREATE TABLE item_versions(
              tenant_id TEXT NOT NULL, item_id TEXT NOT NULL, version INTEGER NOT NULL, properties TEXT NOT NULL,
              created_at TEXT NOT NULL, PRIMARY KEY(tenant_id, item_id, version)) WITHOUT ROWID;
            CREATE TABLE tags(tenant_id TEXT NOT NULL, item_id TEXT NOT NULL, tag TEXT NOT NULL,
              PRIMARY KEY(tenant_id, item_id, tag)) WITHOUT ROWID;
            CREATE INDEX tags_by_tag ON tags(tenant_id, tag);
            CREATE TABLE events(
              id INTEGER PRIMARY KEY AUTOINCREMENT, tenant_id TEXT NOT NULL, name TEXT NOT NULL,
              item_type TEXT, edge_type TEXT, data TEXT NOT NULL, created_at TEXT NOT NULL);
            CREATE INDEX events_by_tenant ON events(tenant_id, id);
            CREATE TABLE idempotency(
              tenant_id TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL, status INTEGER NOT NULL,
              body TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY(tenant_id, key)) WITHOUT ROWID;
            """),
        ("v2-edges-blobs-types-events", """
            CREATE TABLE edges(
              tenant_id TEXT NOT NULL, id TEXT NOT NULL, source_id TEXT NOT NULL, target_id TEXT NOT NULL,
              edge_type TEXT NOT NULL, properties TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
              PRIMARY KEY(tenant_id, id)) WITHOUT ROWID;
            CREATE UNIQUE INDEX edges_by_source ON edges(tenant_id, source_id, edge_type, target_id);
            CREATE INDEX edges_by_target ON edges(tenant_id, target_id, edge_type);
            CREATE INDEX edges_by_updated ON edges(tenant_id, updated_at, id);
            CREATE TABLE blobs(
              tenant_id TEXT NOT NULL, hash TEXT NOT NULL, mime_type TEXT NOT NULL, size INTEGER NOT NULL,
              data BLOB NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY(tenant_id, hash)) WITHOUT ROWID;
            CREATE TABLE types(
              tenant_id TEXT NOT NULL, id TEXT NOT NULL, parent TEXT, definition TEXT NOT NULL, created_at TEXT NOT NULL,
              PRIMARY KEY(tenant_id, id)) WITHOUT ROWID;
            ALTER TABLE events ADD COLUMN source_type TEXT;
            ALTER TABLE events ADD COLUMN target_type TEXT;
            CREATE INDEX events_by_time ON events(created_at);
            CREATE TABLE event_horizon(tenant_id TEXT PRIMARY KEY, pruned_through INTEGER NOT NULL);
            """),
        ("v3-extensions", """
            -- Item extensions (`metadata.extensions`): namespace → JSON, e.g. `fs.xattr` (FS-17).
            ALTER TABLE items ADD COLUMN extensions TEXT NOT NULL DEFAULT '{}';
            """),
        ("v4-list-indexes", """
            -- Filtered lists (`GET /items?type=…`, `tier`, `source`) walk one index in list order
            -- (W-6) instead of every item of the tenant.
            CREATE INDEX items_by_type ON items(tenant_id, type, updated_at, id);
            CREATE INDEX items_by_tier ON items(tenant_id, tier, updated_at, id);
            CREATE INDEX items_by_source ON items(tenant_id, source, updated_at, id);
            """),
        ("v5-tag-list-order", """
            -- A tag's items in list order (W-6): each tag row carries its item's `updated_at`, kept
            -- by triggers, so `GET /items?tags=…` walks the tag's index in order, whatever the
            -- tag's size, instead of sorting its items or passing every other item.
            ALTER TABLE tags ADD COLUMN updated_at TEXT NOT NULL DEFAULT '';
            UPDATE tags SET updated_at = coalesce((SELECT i.updated_at FROM items i WHERE i.tenant_id = tags.tenant_id AND i.id = tags.item_id), '');
            CREATE INDEX tags_in_list_order ON tags(tenant_id, tag, updated_at, item_id);
            CREATE TRIGGER tags_take_updated_at AFTER INSERT ON tags BEGIN
              UPDATE tags SET updated_at = coalesce((SELECT i.updated_at FROM items i WHERE i.tenant_id = NEW.tenant_id AND i.id = NEW.item_id), '')
              WHERE tenant_id = NEW.tenant_id AND item_id = NEW.item_id AND tag = NEW.tag;
            END;
            CREATE TRIGGER items_updated_at_to_tags AFTER UPDATE OF updated_at ON items BEGIN
              UPDATE tags SET updated_at = NEW.updated_at WHERE tenant_id = NEW.tenant_id AND item_id = NEW.id;
            END;
            """),
    ]
}
