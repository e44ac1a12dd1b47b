import Foundation
import GRDB
import MarfaModel
import MarfaTestSupport
@testable import MarfaStore
import Synchronization
import Testing

/// What the settler's commit of quiet staged files writes, and what does not wait for it (FS-14).
@Suite struct SettlerCommitTests {
    /// A store with its journal recovered and a first note written and settled: the store's first
    /// write makes its temporary tables, in transactions of their own, which the tests' counts of
    /// transactions leave out.
    static func storeWritten() throws -> TempStore {
        let t = try TempStore()
        try t.store.recoverStaged()
        try StagingTests.note(t.store, "first.md", "# First\n")
        try t.store.commitStaged()
        _ = try t.store.settle()
        return t
    }

    /// A new file quiet for the settle window is settled by the settler's commit that writes it
    /// (FS-14): one transaction, and the same item, tags, links and queued changes as a file
    /// committed unsettled and settled in a batch after. A file committed because it was staged
    /// too long, still being written, is committed unsettled; one whose front matter does not
    /// parse is kept invalid with its body's tags (FS-32), as a batch keeps it. A file larger
    /// than a note is committed unsettled.
    @Test func FS14_aQuietNewFileIsSettledByTheCommitThatWritesIt() throws {
        let t = try Self.storeWritten()
        let s = t.store
        let text = "---\ntitle: Plans\nstatus: open\n---\n# Plans\nsee [[later]] and [[elsewhere/thing|a thing]] #beta\n"
        let broken = "---\ntitle: Plans: the broken ones\n---\nsee [[later]] #gamma\n"
        let quiet = try StagingTests.note(s, "plans.md", text, tags: ["folder:a"])
        let quietBroken = try StagingTests.note(s, "broken.md", broken, tags: ["folder:a"])
        // Larger than a note: its parsing would hold the commit back; it settles in a batch.
        let large = try StagingTests.note(s, "large.md", "# Large\n" + String(repeating: "a long line of a long note\n", count: 1500))
        Thread.sleep(forTimeInterval: 0.01)
        let since = Store.ns(Date())
        Thread.sleep(forTimeInterval: 0.01)
        let busy = try StagingTests.note(s, "plans.md", text, tags: ["folder:b"])
        let busyBroken = try StagingTests.note(s, "broken.md", broken, tags: ["folder:b"])
        let commits = s.commitCount
        let c = try #require(try s.beginQuietCommit((since: since, stagedBefore: Store.ns(Date()))))
        #expect(c.count == 5)
        #expect(Set(try s.finishQuietCommit(c)) == [quiet.rowid, quietBroken.rowid])
        #expect(s.commitCount == commits + 1, "written in one transaction")
        #expect(try s.item(rowid: quiet.rowid)?.unsettled == false)
        #expect(try s.item(rowid: busy.rowid)?.unsettled == true, "still being written: settles in its own time")
        #expect(try s.item(rowid: large.rowid)?.unsettled == true)
        #expect(Set(try s.settle()) == [busy.rowid, busyBroken.rowid, large.rowid])

        func same(_ a: StagedKey, _ b: StagedKey) throws {
            let x = try #require(try s.item(rowid: a.rowid)), y = try #require(try s.item(rowid: b.rowid))
            #expect(x.item.properties == y.item.properties)
            #expect(x.sync == y.sync && x.syncError == y.syncError && x.stem == y.stem && x.ext == y.ext && x.size == y.size)
            #expect(try s.textContent(rowid: a.rowid) == s.textContent(rowid: b.rowid))
            #expect(try s.links(rowid: a.rowid) == s.links(rowid: b.rowid))
            let tags = { (id: String) in Set(try s.tags(itemID: id).filter { !$0.hasPrefix("folder:") }) }
            #expect(try tags(x.item.id) == tags(y.item.id))
            #expect(try s.versions(itemID: x.item.id).isEmpty && s.versions(itemID: y.item.id).isEmpty)
            let queued = { (id: String) in try s.mutations().filter { $0.itemID == id }.map { m -> String in
                var p = m.payload
                for k in ["id", "tags", "created_at", "updated_at", "timestamp", "extensions"] { p[k] = nil }
                return "\(m.kind) \(JSONCoding.encode(p))"
            } }
            #expect(try queued(x.item.id) == queued(y.item.id))
        }
        try same(quiet, busy)
        try same(quietBroken, busyBroken)
        let q = try #require(try s.item(rowid: quiet.rowid))
        #expect(q.sync == .pending && q.item.properties["title"] == .string("Plans"))
        #expect(try s.tags(itemID: q.item.id).contains("beta"))
        #expect(try s.mutations().contains { $0.itemID == q.item.id && $0.kind == .create })
        let b = try #require(try s.item(rowid: quietBroken.rowid))
        #expect(b.sync == .invalid)
        #expect(try s.tags(itemID: b.item.id).contains("gamma"), "its body's tag, though its front matter does not parse")
    }

    /// A folder's `chmod` and `chown` do not wait for the store's writer, which the settler's
    /// commit of quiet files holds for a tenth of a second in a long copy (FS-14, FS-31): they
    /// are recorded beside the store at once (`rsync -a` sets each folder's mode, and waited for
    /// that commit each time), shown at once, kept by a store opened after a kill, and written by
    /// the next transaction, the last one set winning.
    @Test func FS31_aFoldersModeAndOwnerDoNotWaitForTheStoresWriter() throws {
        let t = try TempStore()
        let s = t.store
        try s.recoverStaged()
        let held = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0), ended = DispatchSemaphore(value: 0)
        Thread { _ = try? s.write { _ in held.signal(); release.wait() }; ended.signal() }.start()
        held.wait()
        let set = DispatchSemaphore(value: 0)
        let failure = Mutex<String?>(nil)
        Thread {
            do {
                try s.setTreeDirMode("projects/a", ino: 7_000_001, mode: 0o700)
                try s.setTreeDirOwner("projects/a", ino: 7_000_001, Store.Owner(uid: 1234))
                try s.setTreeDirMode("projects/a", ino: 7_000_001, mode: 0o750)
            } catch { failure.withLock { $0 = "\(error)" } }
            set.signal()
        }.start()
        let waited = set.wait(timeout: .now() + 10)
        release.signal()
        #expect(waited == .success, "the folder's attributes were set while the writer was held")
        #expect(ended.wait(timeout: .now() + 10) == .success)
        if waited != .success { _ = set.wait(timeout: .now() + 10) }
        #expect(failure.withLock { $0 } == nil)
        #expect(try s.treeDirModes()["projects/a"] == 0o750)
        #expect(try s.treeDirOwners()["projects/a"] == Store.Owner(uid: 1234))
        #expect(s.hasPendingFolders, "nothing has written them yet")

        // The daemon killed now: a store opened on the same file has them.
        let reopened = try Store(path: t.dir + "/store.sqlite")
        #expect(try reopened.treeDirModes()["projects/a"] == 0o750)
        #expect(try reopened.treeDirOwners()["projects/a"] == Store.Owner(uid: 1234))

        // The next transaction writes the folder's row, numbered as the mount numbered it.
        try s.flushPending()
        #expect(!s.hasPendingFolders)
        let row = try #require(try s.pool.read { db in try Row.fetchOne(db, sql: "SELECT ino, mode, uid, gid FROM tree_dirs WHERE path = 'projects/a'") })
        #expect(row["ino"] as Int64 == 7_000_001)
        #expect(row["mode"] as Int64? == 0o750)
        #expect(row["uid"] as Int64? == 1234)
        #expect(row["gid"] as Int64? == nil)
        // Its mode back to the default: no longer pending, and the row says so.
        try s.setTreeDirMode("projects/a", ino: 7_000_001, mode: Store.defaultDirMode)
        try s.flushPending()
        #expect(try s.treeDirModes()["projects/a"] == nil)
        #expect(try Store(path: t.dir + "/store.sqlite").treeDirModes()["projects/a"] == nil)
    }

    /// A staged file that must be settled now (`cp -a` writes the original's id to its copy, and
    /// the attribute's change follows the copy's create) is settled as it is committed: one
    /// transaction, with the bits it was given before it had a row, and `settle(rowids:)` then has
    /// nothing to do and writes nothing (FS-14). A row marked unsettled (committed unsettled,
    /// written again after it settled, left unsettled by a store closed before) is settled by
    /// `settle(rowids:)`, which asks the database only about rows marked since they were last seen
    /// settled.
    @Test func FS14_aFileToSettleNowIsSettledByTheCommitThatWritesIt() throws {
        let t = try Self.storeWritten()
        let s = t.store
        let copy = try StagingTests.note(s, "copy.md", "# Copy\nsee [[first]] #kept\n", tags: ["folder:c"])
        let other = try StagingTests.note(s, "other.md", "# Other\n")
        let commits = s.commitCount
        #expect(try s.commitStaged(settling: [copy], modes: [copy.rowid: 0o600]) == [copy.rowid])
        #expect(s.commitCount == commits + 1, "one transaction")
        let c = try #require(try s.item(rowid: copy.rowid))
        #expect(!c.unsettled && Store.permissions(c.mode, default: Store.defaultFileMode) == 0o600)
        #expect(try s.tags(itemID: c.item.id).contains("kept"))
        #expect(try s.mutations().contains { $0.itemID == c.item.id && $0.kind == .create })
        #expect(try s.item(rowid: other.rowid)?.unsettled == true, "not asked for: committed unsettled")
        #expect(try s.settle(rowids: [copy.rowid]).isEmpty)
        #expect(s.commitCount == commits + 1, "nothing to settle: no transaction")
        #expect(try s.settle(rowids: [other.rowid]) == [other.rowid])
        #expect(try s.settle(rowids: [other.rowid]).isEmpty)

        // Written again once settled: settled again.
        _ = try s.changeFile(.item(other.rowid, type: "core.note"), .write(offset: 8, data: Array("more\n".utf8)))
        try s.commitStaged()
        #expect(try s.item(rowid: other.rowid)?.unsettled == true)
        #expect(try s.settle(rowids: [other.rowid]) == [other.rowid])
        #expect(try s.textContent(rowid: other.rowid) == Array("# Other\nmore\n".utf8))
        // Left unsettled by a store closed before: a store opened after settles it.
        _ = try s.changeFile(.item(other.rowid, type: "core.note"), .write(offset: 13, data: Array("again\n".utf8)))
        try s.commitStaged()
        let reopened = try Store(path: t.dir + "/store.sqlite")
        #expect(try reopened.settle(rowids: [other.rowid, copy.rowid]) == [other.rowid])
        #expect(try reopened.textContent(rowid: other.rowid) == Array("# Other\nmore\nagain\n".utf8))
    }
}
