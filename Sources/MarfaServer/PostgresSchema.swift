import Foundation
import PostgresNIO

/// The server's database on PostgreSQL: the same tables as `ServerSchema` (SQLite), in
/// PostgreSQL's types, with two differences. Event ids are per tenant (`events` is keyed by
/// tenant and id, `event_counters` hands them out, see `PostgresBackend`). Text compares byte by
/// byte (`COLLATE "C"`), as SQLite's does, so lists come in the same order on both engines
/// whatever the database's locale.
enum PostgresSchema {
    /// Every migration, oldest first: an id, once shipped, never changes, nor does its SQL.
    static let migrations: [(id: String, sql: String)] = [
        ("pg1", """
            CREATE TABLE tenants(id TEXT PRIMARY KEY, name TEXT NOT NULL, operator BIGINT NOT NULL, created_at TEXT NOT NULL);
            CREATE TABLE keys(
              id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL REFERENCES tenants(id), label TEXT NOT NULL,
              role TEXT NOT NULL, type_permissions TEXT, lookup TEXT NOT NULL, salt BYTEA NOT NULL, hash BYTEA NOT NULL,
              created_at TEXT NOT NULL, last_used_at TEXT, revoked_at TEXT);
            CREATE INDEX keys_by_lookup ON keys(lookup);
            CREATE TABLE items(
              tenant_id TEXT NOT NULL, id TEXT NOT NULL, type TEXT NOT NULL, properties TEXT NOT NULL,
              version BIGINT NOT NULL, schema_version BIGINT NOT NULL, source TEXT NOT NULL, source_id TEXT,
              timestamp TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
              state TEXT NOT NULL, tier TEXT NOT NULL, extensions TEXT NOT NULL DEFAULT '{}', PRIMARY KEY(tenant_id, id));
            CREATE INDEX items_by_updated ON items(tenant_id, updated_at, id);
            CREATE INDEX items_by_type ON items(tenant_id, type, updated_at, id);
            CREATE INDEX items_by_tier ON items(tenant_id, tier, updated_at, id);
            CREATE INDEX items_by_source ON items(tenant_id, source, updated_at, id);
            CREATE TABLE item_versions(
              tenant_id TEXT NOT NULL, item_id TEXT NOT NULL, version BIGINT NOT NULL, properties TEXT NOT NULL,
              created_at TEXT NOT NULL, PRIMARY KEY(tenant_id, item_id, version));
            CREATE TABLE tags(tenant_id TEXT NOT NULL, item_id TEXT NOT NULL, tag TEXT NOT NULL, updated_at TEXT NOT NULL DEFAULT '',
              PRIMARY KEY(tenant_id, item_id, tag));
            CREATE INDEX tags_by_tag ON tags(tenant_id, tag);
            CREATE INDEX tags_in_list_order ON tags(tenant_id, tag, updated_at, item_id);
            CREATE TABLE events(
              tenant_id TEXT NOT NULL, id BIGINT NOT NULL, name TEXT NOT NULL, item_type TEXT, edge_type TEXT,
              source_type TEXT, target_type TEXT, data TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY(tenant_id, id));
            CREATE INDEX events_by_time ON events(created_at);
            CREATE TABLE event_counters(tenant_id TEXT PRIMARY KEY, last_id BIGINT NOT NULL);
            CREATE TABLE event_horizon(tenant_id TEXT PRIMARY KEY, pruned_through BIGINT NOT NULL);
            CREATE TABLE idempotency(
              tenant_id TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL, status BIGINT NOT NULL,
              body TEXT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY(tenant_id, key));
            CREATE TABLE edges(
              tenant_id TEXT NOT NULL, id TEXT NOT NULL, source_id TEXT NOT NULL, target_id TEXT NOT NULL,
              edge_type TEXT NOT NULL, properties TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
              PRIMARY KEY(tenant_id, id));
            CREATE UNIQUE INDEX edges_by_source ON edges(tenant_id, source_id, edge_type, target_id);
            CREATE INDEX edges_by_target ON edges(tenant_id, target_id, edge_type);
            CREATE INDEX edges_by_updated ON edges(tenant_id, updated_at, id);
            CREATE TABLE blobs(
              tenant_id TEXT NOT NULL, hash TEXT NOT NULL, mime_type TEXT NOT NULL, size BIGINT NOT NULL,
              data BYTEA NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY(tenant_id, hash));
            CREATE TABLE types(
              tenant_id TEXT NOT NULL, id TEXT NOT NULL, parent TEXT, definition TEXT NOT NULL, created_at TEXT NOT NULL,
              PRIMARY KEY(tenant_id, id));
            -- A tag row carries its item's updated_at (the tag's list order, as on SQLite).
            CREATE FUNCTION tags_take_updated_at() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              NEW.updated_at := coalesce((SELECT i.updated_at FROM items i WHERE i.tenant_id = NEW.tenant_id AND i.id = NEW.item_id), '');
              RETURN NEW;
            END $$;
            CREATE TRIGGER tags_take_updated_at BEFORE INSERT ON tags FOR EACH ROW EXECUTE FUNCTION tags_take_updated_at();
            CREATE FUNCTION items_updated_at_to_tags() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              UPDATE tags SET updated_at = NEW.updated_at WHERE tenant_id = NEW.tenant_id AND item_id = NEW.id;
              RETURN NULL;
            END $$;
            CREATE TRIGGER items_updated_at_to_tags AFTER UPDATE OF updated_at ON items FOR EACH ROW
              WHEN (OLD.updated_at IS DISTINCT FROM NEW.updated_at) EXECUTE FUNCTION items_updated_at_to_tags();
            """.replacingOccurrences(of: " TEXT", with: " TEXT COLLATE \"C\"")),
        // A blob is read in slices (1 MiB at a time for a download, any range for a Range
        // request). Compressed, every slice decompresses the value from its start: a 200 MiB text
        // file took 15 s to download, against 0.8 s for one stored as is. Uncompressed
        // (EXTERNAL), a slice reads only its own TOAST chunks. Blobs stored compressed before
        // this migration are rewritten (`pg_column_compression`: PostgreSQL 14 or later).
        ("pg2", """
            ALTER TABLE blobs ALTER COLUMN data SET STORAGE EXTERNAL;
            UPDATE blobs SET data = data || ''::bytea WHERE pg_column_compression(data) IS NOT NULL;
            """),
    ]

    /// A migration's statements, one at a time (a prepared statement holds one): split at each
    /// `;` that ends a line outside a `$$` body; `--` comment lines dropped.
    static func statements(_ sql: String) -> [String] {
        var out: [String] = [], current = "", inBody = false
        for line in sql.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("--") { continue }
            current += line + "\n"
            if line.components(separatedBy: "$$").count % 2 == 0 { inBody.toggle() }
            if !inBody, trimmed.hasSuffix(";") {
                out.append(current.trimmingCharacters(in: .whitespacesAndNewlines))
                current = ""
            }
        }
        let rest = current.trimmingCharacters(in: .whitespacesAndNewlines)
        if !rest.isEmpty { out.append(rest) }
        return out
    }

    /// Applies the migrations not yet applied, one process at a time (a transaction-scoped
    /// advisory lock), each in the same transaction as its record; returns the ids applied.
    @discardableResult
    static func migrate(_ pool: PostgresPool) throws -> [String] {
        try pool.withConnection { pooled in
            let conn = pooled.conn
            _ = try conn.simpleQuery("BEGIN").wait()
            do {
                _ = try conn.simpleQuery("SELECT pg_advisory_xact_lock(\(PostgresBackend.lockKey("marfafs migrations")))").wait()
                _ = try conn.simpleQuery("CREATE TABLE IF NOT EXISTS schema_migrations(id TEXT PRIMARY KEY, applied_at TEXT NOT NULL)").wait()
                let applied = Set(try conn.simpleQuery("SELECT id FROM schema_migrations").wait().compactMap { try? $0.decode(String.self) })
                var now: [String] = []
                for (id, sql) in migrations where !applied.contains(id) {
                    for statement in statements(sql) { _ = try conn.simpleQuery(statement).wait() }
                    _ = try conn.simpleQuery("INSERT INTO schema_migrations(id, applied_at) VALUES ('\(id)', now()::text)").wait()
                    now.append(id)
                }
                _ = try conn.simpleQuery("COMMIT").wait()
                return now
            } catch {
                _ = try? conn.simpleQuery("ROLLBACK").wait()
                throw error
            }
        }
    }
}
