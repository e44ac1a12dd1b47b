import Foundation
import GRDB
import MarfaLayout
import MarfaModel
import MarfaTestSupport
@testable import MarfaStore
import Testing

/// A fresh store file per test, removed afterwards.
final class TempStore {
    let tmp: TempDirectory
    let store: Store
    var dir: String { tmp.path }
    init() throws {
        tmp = try TempDirectory("marfafs-store")
        store = try Store(path: tmp.path + "/store.sqlite")
    }
}

@Suite struct StoreTests {
    @Test func FS22_createMintsAUUIDv7AndQueuesOneCreate() throws {
        let t = try TempStore()
        let item = try t.store.createItem(NewItem(type: "core.note", fileName: "Plan.md", content: Array("hello\n".utf8)))
        #expect(ItemID.isUUIDv7(item.item.id))
        #expect(item.item.properties["title"] == "Plan")
        #expect(item.item.properties["body"] == "hello\n")
        let q = try t.store.mutations()
        #expect(q.count == 1)
        #expect(q[0].kind == .create && q[0].itemID == item.item.id)
        #expect(q[0].payload["properties"]?.objectValue?["body"] == "hello\n")
    }

    /// A move to the trash and back (FS-4) returns the row as the store then holds it, though it
    /// does not read it again.
    @Test func FS4_aStateChangeReturnsTheRowAsStored() throws {
        let t = try TempStore()
        let made = try t.store.createItem(NewItem(type: "core.note", fileName: "a.md", content: Array("# A\nsee [[b]] #x\n".utf8)))
        for state in [ItemState.trashed, .active, .archived] {
            let back = try t.store.setState(rowid: made.rowid, state)
            let read = try #require(try t.store.item(rowid: made.rowid))
            #expect(back.item.state == state && read.item.state == state)
            #expect(back.item.updatedAt == read.item.updatedAt && back.mtimeNs == read.mtimeNs)
            #expect(back.item.properties == read.item.properties && back.item.version == read.item.version)
            #expect(back.raw == read.raw && back.size == read.size && back.sync == read.sync && back.stem == read.stem)
        }
    }

    /// FS-14: facts read before the mount's lock is taken are taken under it only while no write
    /// has committed since; after any write (of any item) they are read again.
    @Test func FS14_factsReadAheadAreReadAgainAfterAWrite() throws {
        let t = try TempStore()
        let a = try t.store.createItem(NewItem(type: "core.note", fileName: "a.md", content: Array("a\n".utf8)))
        let b = try t.store.createItem(NewItem(type: "core.note", fileName: "b.md", content: Array("b\n".utf8)))
        let read = try t.store.readFacts(rowids: [a.rowid])
        #expect(try t.store.facts(read)[a.rowid]?.summary.stem == "a")
        _ = try t.store.rename(rowid: a.rowid, to: "renamed.md")
        #expect(try t.store.facts(read)[a.rowid]?.summary.stem == "renamed")
        let again = try t.store.readFacts(rowids: [a.rowid])
        _ = try t.store.writeContent(rowid: b.rowid, bytes: Array("b2\n".utf8))
        #expect(try t.store.facts(again)[a.rowid]?.summary.stem == "renamed")
        #expect(t.store.commitCount > again.commits, "a write of another item counts too")
    }

    /// FS-31: a symlink is a file item whose MIME type says so; a note whose front matter says
    /// `mime_type: inode/symlink` is a note, made or edited.
    @Test func FS31_onlyAFileItemIsASymlink() throws {
        let t = try TempStore()
        let link = try t.store.createSymlink(name: "l", target: "a/b.md", tags: [])
        #expect(link.mode == Store.symlinkMode)
        let note = try t.store.createItem(NewItem(type: "core.note", fileName: "n.md", content: Array("---\nmime_type: inode/symlink\n---\nx\n".utf8)))
        #expect(note.item.properties["mime_type"] == "inode/symlink")
        #expect(try t.store.summary(rowid: note.rowid)?.mode != Store.symlinkMode)
        _ = try t.store.writeContent(rowid: note.rowid, bytes: Array("---\nmime_type: inode/symlink\n---\ny\n".utf8))
        #expect(try t.store.summary(rowid: note.rowid)?.mode != Store.symlinkMode)
        #expect(try t.store.summary(rowid: link.rowid)?.mode == Store.symlinkMode)
    }

    /// FS-26: a text's links are written with its properties, in one statement; a change of the
    /// properties that does not write them (another program's, with the sqlite3 shell) still
    /// marks them stale, and they are read again from the text.
    @Test func FS26_linksAreWrittenWithTheTextAndMarkedStaleByAnyOtherChange() throws {
        let t = try TempStore()
        let s = t.store
        func stale(_ r: Int64) throws -> Int64 {
            try s.pool.read { db in try Int64.fetchOne(db, sql: "SELECT links_stale FROM items WHERE rowid = ?", arguments: [r]) } ?? -1
        }
        let a = try s.createItem(NewItem(type: "core.note", fileName: "a.md", content: Array("see [[b]]\n".utf8)))
        #expect(try stale(a.rowid) != 1, "written with the row")
        #expect(try s.links(rowid: a.rowid).map(VaultLinks.decode)?.map(\.target) == ["b"])
        _ = try s.writeContent(rowid: a.rowid, bytes: Array("see [[c]] and [[b]]\n".utf8))
        #expect(try stale(a.rowid) != 1)
        #expect(try s.links(rowid: a.rowid).map(VaultLinks.decode)?.map(\.target) == ["c", "b"])
        // The same links again: still written, still fresh.
        _ = try s.writeContent(rowid: a.rowid, bytes: Array("see [[c]] and [[b]]!\n".utf8))
        #expect(try stale(a.rowid) != 1)
        // Another program changes the properties: stale, and read again from them.
        try s.write { db in
            try db.execute(sql: "UPDATE items SET properties = json_set(properties, '$.body', 'now [[d]]') WHERE rowid = ?", arguments: [a.rowid])
        }
        #expect(try stale(a.rowid) == 1)
        #expect(try s.links(rowid: a.rowid).map(VaultLinks.decode)?.map(\.target) == ["d"])
        #expect(try stale(a.rowid) == 0)
        // A row another program inserts is stale until it is read.
        try s.write { db in
            try db.execute(sql: """
                INSERT INTO items(id, type, properties, file_name, stem, ext, size, version, source, timestamp, created_at, updated_at, mtime_ns, state, tier, sync, unsettled)
                VALUES ('x1', 'core.note', '{"title":"x","body":"[[a]]"}', 'x.md', 'x', '.md', 5, 0, 'sqlite3', '', '', '', 0, 'active', 'library', 'pending', 0)
                """)
        }
        let x = try #require(try s.pool.read { db in try Int64.fetchOne(db, sql: "SELECT rowid FROM items WHERE id = 'x1'") })
        #expect(try stale(x) == 1)
        #expect(try s.links(rowid: x).map(VaultLinks.decode)?.map(\.target) == ["a"])
    }

    @Test func FS15_changeAndMutationCommitInOneTransaction() throws {
        let t = try TempStore()
        let a = try t.store.createItem(NewItem(type: "core.note", fileName: "a.md", content: Array("one".utf8)))
        // Make every further enqueue fail: the change it belongs to must not survive either.
        try t.store.write { db in
            try db.execute(sql: "CREATE TRIGGER refuse BEFORE INSERT ON mutations BEGIN SELECT RAISE(ABORT, 'refused'); END")
            try db.execute(sql: "CREATE TRIGGER refuse_update BEFORE UPDATE ON mutations BEGIN SELECT RAISE(ABORT, 'refused'); END")
        }
        #expect(throws: (any Error).self) { _ = try t.store.createItem(NewItem(type: "core.note", fileName: "b.md", content: Array("two".utf8))) }
        #expect(throws: (any Error).self) { _ = try t.store.writeContent(rowid: a.rowid, bytes: Array("changed".utf8)) }
        #expect(try t.store.itemCount() == 1)
        #expect(try t.store.textContent(rowid: a.rowid) == Array("one".utf8))
        #expect(try t.store.mutations().count == 1)
    }

    @Test func queue_consecutiveUpdatesCoalesce() throws {
        let t = try TempStore()
        let a = try t.store.createItem(NewItem(type: "core.note", fileName: "a.md", content: Array("v1".utf8)))
        // Pretend the create reached the server: the item is at version 1 and the queue is empty.
        try t.store.write { db in
            try db.execute(sql: "DELETE FROM mutations")
            try db.execute(sql: "UPDATE items SET version = 1 WHERE rowid = ?", arguments: [a.rowid])
        }
        for i in 2...5 { _ = try t.store.writeContent(rowid: a.rowid, bytes: Array("v\(i)".utf8)) }
        let q = try t.store.mutations()
        #expect(q.count == 1)
        #expect(q[0].kind == .update)
        #expect(q[0].payload["properties"]?.objectValue?["body"] == "v5")
        #expect(q[0].payload["base_version"] == .int(1))
        // A tag change in between starts a new mutation; the next update does not fold into the old one.
        try t.store.setTags(rowid: a.rowid, ["k:x"])
        _ = try t.store.writeContent(rowid: a.rowid, bytes: Array("v6".utf8))
        #expect(try t.store.mutations().map(\.kind) == [.update, .setTags, .update])
    }

    @Test func queue_writesBeforeTheCreateIsSentFoldIntoIt() throws {
        let t = try TempStore()
        let a = try t.store.createItem(NewItem(type: "core.note", fileName: "a.md"))
        _ = try t.store.writeContent(rowid: a.rowid, bytes: Array("body".utf8))
        try t.store.setTags(rowid: a.rowid, ["t1"])
        let q = try t.store.mutations()
        #expect(q.map(\.kind) == [.create, .update], "\(q.map { "\($0.kind) \($0.payload)" })")
        #expect(q[0].payload["properties"]?.objectValue?["body"] == "body")
        #expect(q[0].payload["tags"] == .array(["t1"]))
        // The text as the store wrote the tag into it, after the create (FS-32: `fs.text`).
        #expect(q[1].payload["extensions"]?.objectValue?["fs.text"]?.objectValue?["head"] == "---\ntags:\n  - t1\n---\n")
    }

    @Test func FS9_writtenBytesAreReadBackExactly() throws {
        let t = try TempStore()
        let text = "---\ntitle: Own Title\ndate: 2026-01-01\n---\n\n  odd   spacing\r\n"
        let a = try t.store.createItem(NewItem(type: "core.note", fileName: "x.md", content: Array(text.utf8)))
        #expect(try t.store.textContent(rowid: a.rowid) == Array(text.utf8))
        #expect(a.item.properties["title"] == "Own Title")
        #expect(a.item.properties["date"] == "2026-01-01")
    }

    @Test func FS10_invalidFrontMatterIsKeptAndNotQueued() throws {
        let t = try TempStore()
        let a = try t.store.createItem(NewItem(type: "core.note", fileName: "x.md", content: Array("ok".utf8)))
        try t.store.write { db in try db.execute(sql: "DELETE FROM mutations") }
        let bad = Array("---\nkey: [oops\n---\nbody".utf8)
        let after = try t.store.writeContent(rowid: a.rowid, bytes: bad)
        #expect(after.sync == .invalid)
        #expect(try t.store.textContent(rowid: a.rowid) == bad)
        #expect(try t.store.mutations().isEmpty)
        let fixed = try t.store.writeContent(rowid: a.rowid, bytes: Array("---\nkey: [ok]\n---\nbody".utf8))
        #expect(fixed.sync == .pending)
        #expect(try t.store.mutations().map(\.kind) == [.create, .update], "\(((try? t.store.mutations()) ?? []).map { "\($0.kind) \($0.payload)" })")
    }

    @Test func FS11_blobsAreStoredInSqlar() throws {
        let t = try TempStore()
        let bytes = (0..<300_000).map { UInt8($0 % 251) }
        let a = try t.store.createItem(NewItem(type: "core.file.image", fileName: "pic.png", content: bytes))
        let hash = a.item.properties["blob_ref"]?.stringValue
        #expect(hash == BlobHash.of(bytes))
        #expect(t.store.blobs.size(hash: hash!) == Int64(bytes.count))
        #expect(t.store.blobs.read(hash: hash!, offset: 100_000, count: 10) == Array(bytes[100_000..<100_010]))
        let names = try t.store.write { db in try String.fetchAll(db, sql: "SELECT name FROM sqlar") }
        #expect(names == [hash!])
        #expect(try t.store.mutations().map(\.kind) == [.uploadBlob, .create])
    }

    @Test func store_reopensAfterAnUncleanClose() throws {
        let t = try TempStore()
        let a = try t.store.createItem(NewItem(type: "core.note", fileName: "a.md", content: Array("kept".utf8)))
        try t.store.setTags(rowid: a.rowid, ["k:t"])
        // Copy the database and its WAL while the store is still open, as a crash would leave them.
        let copy = t.dir + "/crash.sqlite"
        for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: t.store.path + suffix) {
            try FileManager.default.copyItem(atPath: t.store.path + suffix, toPath: copy + suffix)
        }
        let reopened = try Store(path: copy)
        #expect(try reopened.textContent(rowid: a.rowid) == Array("kept".utf8))
        #expect(try reopened.tags(itemID: a.item.id) == ["k:t"])
        #expect(try reopened.mutations().map(\.idempotencyKey) == (try t.store.mutations()).map(\.idempotencyKey))
    }

    @Test func store_migrationsSeedTheBuiltInTypes() throws {
        let t = try TempStore()
        let ids = Set(t.store.allTypes().map(\.id))
        for id in ["core.note", "core.bookmark", "core.highlight", "core.file", "core.file.image", "core.file.audio", "core.file.video", "core.file.document"] {
            #expect(ids.contains(id))
        }
        #expect(t.store.type("core.note").mergePolicy.fields["body"] == .keepBothCopies)
    }

    @Test func edges_deletingAnUnsentEdgeForgetsItsCreate() throws {
        let t = try TempStore()
        let a = try t.store.createItem(NewItem(type: "core.note", fileName: "a.md"))
        let b = try t.store.createItem(NewItem(type: "core.note", fileName: "b.md"))
        let e = try t.store.createEdge(sourceID: a.item.id, targetID: b.item.id, edgeType: "references")
        #expect(try t.store.mutations().map(\.kind) == [.create, .create, .createEdge])
        try t.store.deleteEdge(rowid: e.rowid)
        #expect(try t.store.mutations().map(\.kind) == [.create, .create])
    }
}
