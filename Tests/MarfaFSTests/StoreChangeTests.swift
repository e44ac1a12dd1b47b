import Foundation
import Logging
@testable import MarfaFS
import MarfaModel
import MarfaStore
import Synchronization
import Testing

/// The core's side of a change the store made on its own (FS-19, FS-21, FS-25), without a kernel:
/// what the filesystem tells the kernel to forget, what it replays for watchers, and what the
/// control files say.
@Suite struct StoreChangeTests {
    /// Everything the core hands to the notifier.
    final class Told: Sendable {
        let list = Mutex<[Invalidation]>([])
        var all: [Invalidation] { list.withLock { $0 } }
        func clear() { list.withLock { $0.removeAll() } }
    }

    func core() throws -> (Core, Told) {
        let c = try Core()
        let told = Told()
        c.fs.onInvalidate = { inv in told.list.withLock { $0 += inv } }
        return (c, told)
    }

    func remote(_ id: String, version: Int, title: String, body: String, state: ItemState = .active) -> RemoteChange {
        .item(Item(id: id, type: "core.note", properties: ["title": .string(title), "body": .string(body)], version: version,
                   timestamp: "2026-01-01T00:00:00Z", createdAt: "2026-01-01T00:00:00Z", updatedAt: "2026-01-0\(version)T00:00:00Z",
                   state: state, tier: .library), tags: nil, extensions: nil)
    }

    @Test func FS19_aRemoteChangeInvalidatesExactlyWhatItTouchesAndIsReplayed() throws {
        let (c, told) = try core()
        _ = try c.store.applyRemote([remote("r1", version: 1, title: "first", body: "one\n")])
        #expect(try c.names("types/core.note") == ["first.md"])
        let dir = try c.ino("types/core.note"), file = try c.ino("types/core.note/first.md")
        told.clear()
        // A new title (the name moves) and new bytes.
        _ = try c.store.applyRemote([remote("r1", version: 2, title: "second", body: "two\n")])
        let inv = told.all
        #expect(inv.contains(.entry(parent: dir, name: "first.md")) && inv.contains(.entry(parent: dir, name: "second.md")), "\(inv)")
        #expect(inv.contains(.inode(dir)) && inv.contains(.inode(file)), "the listing and the file's pages")
        let replays = inv.compactMap { if case .replay(let r) = $0 { return r }; return nil }
        #expect(replays.map(\.op) == [.rename(to: Replay.Place(parent: dir, name: "second.md", path: "types/core.note/second.md"),
                                              ghost: replays.first.flatMap { if case .rename(_, let g) = $0.op { return g }; return nil }!),
                                      .touch(modified: true)], "\(replays)")
        #expect(replays.first?.at.path == "types/core.note/first.md")
        #expect(inv.firstIndex { if case .replay = $0 { return true }; return false }! > inv.lastIndex { if case .entry = $0 { return true }; return false }!,
                "replays follow the invalidations")
        #expect(try c.names("types/core.note") == ["second.md"] && c.read("types/core.note/second.md").hasSuffix("two\n"))
        #expect(try c.ino("types/core.note/second.md") == file, "the inode stays the item's")
        // An echo (an older version) changes nothing and tells the kernel nothing.
        told.clear()
        _ = try c.store.applyRemote([remote("r1", version: 1, title: "first", body: "one\n")])
        #expect(told.all.isEmpty, "\(told.all)")
    }

    /// A remote change of a note's bytes and its tags together (a tag written into its front
    /// matter) is replayed as both: a watcher of either sees it. Tags alone: attributes only.
    @Test func FS25_bytesAndTagsChangedTogetherAreReplayedAsModifyAndAttrib() throws {
        let (c, told) = try core()
        func touches() -> [Replay.Op] { told.all.compactMap { if case .replay(let r) = $0 { return r.op }; return nil } }
        func tagged(_ version: Int, _ body: String, _ tags: [String]) -> RemoteChange {
            guard case .item(let item, _, _) = remote("r1", version: version, title: "first", body: body) else { preconditionFailure() }
            return .item(item, tags: tags, extensions: nil)
        }
        _ = try c.store.applyRemote([tagged(1, "one\n", [])])
        _ = try c.ino("types/core.note/first.md")
        told.clear()
        _ = try c.store.applyRemote([tagged(2, "---\ntags: [seen]\n---\none\n", ["seen"])])
        #expect(touches() == [.touch(modified: true), .touch(modified: false)], "\(told.all)")
        told.clear()
        _ = try c.store.applyRemote([tagged(3, "---\ntags: [seen]\n---\none\n", ["seen", "x:k"])])
        #expect(touches() == [.touch(modified: false)], "\(told.all)")
        told.clear()
        _ = try c.store.applyRemote([tagged(4, "---\ntags: [seen]\n---\none\ntwo\n", ["seen", "x:k"])])
        #expect(touches() == [.touch(modified: true)], "bytes alone: no IN_ATTRIB \(told.all)")
    }

    @Test func FS25_theReplayThreadSeesTheNamesAsTheyWereAndChangesNothing() throws {
        let (c, told) = try core()
        _ = try c.store.applyRemote([remote("r1", version: 1, title: "first", body: "one\n")])
        let dir = try c.ino("types/core.note")
        told.clear()
        _ = try c.store.applyRemote([remote("r1", version: 2, title: "second", body: "one\n")])
        let rename = try #require(told.all.compactMap { if case .replay(let r) = $0, case .rename = r.op { return r }; return nil }.first)
        let tid: Int32 = 4242
        c.fs.replayThread = tid
        c.fs.replaying(rename)
        #expect(try c.fs.lookup(parent: dir, name: "first.md", reader: tid).ino == (try c.ino("types/core.note/second.md")), "the old name, for the replay")
        #expect(throws: FSError.self) { try c.fs.lookup(parent: dir, name: "second.md", reader: tid) }
        #expect(throws: FSError.self) { try c.fs.lookup(parent: dir, name: "first.md") }
        try c.fs.rename(parent: dir, name: "first.md", newParent: dir, newName: "second.md", reader: tid)
        #expect(throws: FSError.self) { try c.fs.unlink(parent: dir, name: "second.md", reader: tid) }
        c.fs.replaying(nil)
        #expect(try c.names("types/core.note") == ["second.md"])
        #expect(try c.store.mutations().isEmpty, "the replay queued nothing")
    }

    @Test func FS21_conflictedCopiesAreListedWithTheirOriginals() throws {
        let (c, _) = try core()
        try c.write("types/core.note/plan.md", "mine\n")
        let id = try String(decoding: c.fs.getxattr(try c.ino("types/core.note/plan.md"), name: "user.marfa.id"), as: UTF8.self)
        let m = try #require(try c.store.mutations().first)
        _ = try c.store.resolveConflict(seq: m.seq, itemID: id, currentVersion: 3, device: "laptop") { local in
            ConflictOutcome(resolved: ["title": "plan", "body": "theirs\n"], copy: local)
        }
        let text = String(decoding: try c.fs.read(try c.ino(".marfafs/conflicts"), offset: 0, size: 1 << 16), as: UTF8.self)
        let lines = text.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].hasSuffix("\ttypes/core.note/plan.md") && lines[0].hasPrefix("types/core.note/plan (conflicted copy laptop "), "\(text)")
        let copy = String(lines[0].split(separator: "\t")[0])
        #expect(try c.read(copy).contains("mine"), "the copy keeps the local bytes")
        #expect(try c.names("tags/conflicted-copy").count == 1)
    }
}
