import Foundation
import MarfaModel
@testable import MarfaStore
import Testing

/// Applying the server's changes to the store (W-15, W-17).
@Suite struct RemoteApplyTests {
    func remote(_ id: String, version: Int, body: String, title: String = "t", updatedAt: String = "2026-01-01T00:00:00Z") -> Item {
        Item(id: id, type: "core.note", properties: ["title": .string(title), "body": .string(body)], version: version,
             timestamp: updatedAt, createdAt: "2026-01-01T00:00:00Z", updatedAt: updatedAt, state: .active, tier: .library)
    }

    @Test func W17_newerVersionsApplyOlderOnesAndEchoesAreIgnored() throws {
        let t = try TempStore()
        var c = try t.store.applyRemote([.item(remote("i1", version: 2, body: "v2\n"), tags: ["x"], extensions: nil)], lastEventID: "7")
        #expect(c.applied == 1 && c.items == ["i1"])
        #expect(try t.store.lastEventID() == "7")
        let r = try #require(try t.store.item(id: "i1"))
        let text = try t.store.textContent(rowid: r.rowid)
        #expect(r.item.version == 2 && r.sync == .synced && r.stem == "t" && r.size == Int64(text.count))
        #expect(String(decoding: try t.store.textContent(rowid: r.rowid), as: UTF8.self).hasSuffix("v2\n"))
        #expect(try t.store.tags(itemID: "i1") == ["x"])
        // An older or equal version (the echo of a write) changes nothing.
        c = try t.store.applyRemote([.item(remote("i1", version: 1, body: "old\n"), tags: nil, extensions: nil)], lastEventID: "8")
        #expect(c.applied == 0 && c.skipped == 1)
        #expect(try t.store.item(id: "i1")?.item.properties["body"] == "v2\n")
        #expect(try t.store.lastEventID() == "8", "the position moves even when the event is skipped")
        c = try t.store.applyRemote([.item(remote("i1", version: 3, body: "v3\n", title: "renamed", updatedAt: "2026-01-02T00:00:00Z"), tags: nil, extensions: nil)])
        #expect(c.content == ["i1"])
        #expect(try t.store.item(id: "i1")?.stem == "renamed")
        #expect(try t.store.newestRemoteUpdatedAt() == "2026-01-02T00:00:00Z")
    }

    @Test func FS18_anItemWithUnsentChangesKeepsItsLocalBytesUntilTheServerAnswers() throws {
        let t = try TempStore()
        _ = try t.store.applyRemote([.item(remote("i1", version: 1, body: "base\n"), tags: nil, extensions: nil)])
        let r = try #require(try t.store.item(id: "i1"))
        _ = try t.store.writeContent(rowid: r.rowid, bytes: Array("local edit\n".utf8))
        let c = try t.store.applyRemote([.item(remote("i1", version: 2, body: "remote edit\n"), tags: nil, extensions: nil),
                                         .deleted(itemID: "i1"), .metadata(itemID: "i1", tags: ["z"], tier: nil, state: nil, extensions: nil)])
        #expect(c.applied == 0 && c.skipped == 3)
        #expect(String(decoding: try t.store.textContent(rowid: r.rowid), as: UTF8.self) == "local edit\n")
        // The server's answer to the update (it merged in a title change) is applied once nothing is left to send.
        let m = try #require(try t.store.nextMutations().first)
        var answer = remote("i1", version: 3, body: "local edit\n", title: "server title")
        answer.updatedAt = "2026-01-03T00:00:00Z"
        let acked = try t.store.acknowledge([Acknowledgement(seq: m.seq, itemID: "i1", serverVersion: 3, answer: .item(answer, tags: [], extensions: nil))])
        #expect(acked.content == ["i1"])
        let after = try #require(try t.store.item(id: "i1"))
        #expect(after.item.version == 3 && after.item.properties["title"] == "server title" && after.sync == .synced)
    }

    /// FS-20: the event of another device's change comes while our own update is on its way (the
    /// server took ours first, then theirs): it is skipped then, and the answer to our update is
    /// older than it; once the answer is in, the held change is taken, so the mounts converge.
    @Test func FS20_aChangeWhoseEventCameWhileOurWriteWaitedIsTakenAfterTheAnswer() throws {
        let t = try TempStore()
        _ = try t.store.applyRemote([.item(remote("i1", version: 1, body: "l1\nl2\n"), tags: nil, extensions: nil)])
        let r = try #require(try t.store.item(id: "i1"))
        _ = try t.store.writeContent(rowid: r.rowid, bytes: Array("L1 by a\nl2\n".utf8))
        let m = try #require(try t.store.nextMutations().first)
        // Theirs (version 3, merged on their side) arrives first; an older frame after it does not replace it.
        let theirs = remote("i1", version: 3, body: "L1 by a\nL2 by b\n", updatedAt: "2026-01-03T00:00:00Z")
        var c = try t.store.applyRemote([.item(theirs, tags: nil, extensions: nil)])
        #expect(c.skipped == 1)
        c = try t.store.applyRemote([.item(remote("i1", version: 2, body: "stale\n"), tags: nil, extensions: nil)])
        #expect(String(decoding: try t.store.textContent(rowid: r.rowid), as: UTF8.self) == "L1 by a\nl2\n")
        // The answer to ours: version 2.
        let ours = remote("i1", version: 2, body: "L1 by a\nl2\n", updatedAt: "2026-01-02T00:00:00Z")
        _ = try t.store.acknowledge([Acknowledgement(seq: m.seq, itemID: "i1", serverVersion: 2, answer: .item(ours, tags: [], extensions: nil))])
        let after = try #require(try t.store.item(id: "i1"))
        #expect(after.item.version == 3)
        #expect(String(decoding: try t.store.textContent(rowid: r.rowid), as: UTF8.self).hasSuffix("L1 by a\nL2 by b\n"))
        // Nothing is held any more.
        #expect(t.store.heldRemote.withLock { $0.isEmpty })
    }

    /// W-15: the stream may bring an item's frame after the answer to a later change of ours (a
    /// removal). The answer gives the item the server's time of that change, so the older frame
    /// changes nothing, whatever this machine's clock says (here, a year behind the server's).
    @Test func W15_aFrameFromBeforeTheAnswerToOurChangeDoesNotUndoIt() throws {
        let t = try TempStore()
        _ = try t.store.applyRemote([.item(remote("i1", version: 1, body: "b\n", updatedAt: "2099-01-01T00:00:00Z"), tags: nil, extensions: nil)])
        let r = try #require(try t.store.item(id: "i1"))
        _ = try t.store.setState(rowid: r.rowid, .trashed)
        let m = try #require(try t.store.nextMutations().first)
        var answer = remote("i1", version: 1, body: "b\n", updatedAt: "2099-01-01T00:00:02Z")
        answer.state = .trashed
        _ = try t.store.acknowledge([Acknowledgement(seq: m.seq, itemID: "i1", serverVersion: 1, answer: .item(answer, tags: [], extensions: nil))])
        #expect(try t.store.item(id: "i1")?.item.state == .trashed)
        // The echo of a tag change made a second before the removal.
        let echo = remote("i1", version: 1, body: "b\n", updatedAt: "2099-01-01T00:00:01Z")
        let c = try t.store.applyRemote([.item(echo, tags: ["x"], extensions: nil)])
        #expect(c.items.isEmpty && c.skipped == 1)
        #expect(try t.store.item(id: "i1")?.item.state == .trashed)
        #expect(try t.store.tags(itemID: "i1") == [])
    }

    /// FS-13 + FS-18: an editor's save staged over a synced item (not yet in the store) keeps the
    /// item's local bytes against the server's change, as unsettled bytes do.
    @Test func FS18_aSaveStillStagedKeepsItsBytesAgainstARemoteChange() throws {
        let t = try TempStore()
        try t.store.recoverStaged()
        _ = try t.store.applyRemote([.item(remote("i1", version: 1, body: "base\n"), tags: nil, extensions: nil)])
        let r = try #require(try t.store.item(id: "i1"))
        let tmp = StagedKey(.item, try t.store.stageItem(NewItem(type: "core.note", fileName: "n.md.tmp")).rowid)
        _ = try t.store.changeStaged(tmp, .write(offset: 0, data: Array("saved here\n".utf8)))
        _ = try t.store.saveOver(r.rowid, from: .item(tmp.rowid))
        let c = try t.store.applyRemote([.item(remote("i1", version: 2, body: "remote edit\n"), tags: nil, extensions: nil)])
        #expect(c.applied == 0 && c.skipped == 1)
        try t.store.commitStaged()
        #expect(String(decoding: try t.store.textContent(rowid: r.rowid), as: UTF8.self) == "saved here\n")
        #expect(try t.store.item(rowid: r.rowid)?.item.version == 1, "the save is sent against the version it started from")
        // Committed, the bytes are unsettled: the rule holds on.
        #expect(try t.store.applyRemote([.item(remote("i1", version: 2, body: "remote edit\n"), tags: nil, extensions: nil)]).skipped == 1)
    }

    @Test func W11_edgesAppearAndGoAndOurUnsentDeletionWins() throws {
        let t = try TempStore()
        _ = try t.store.applyRemote([.item(remote("a", version: 1, body: ""), tags: nil, extensions: nil),
                                     .item(remote("b", version: 1, body: ""), tags: nil, extensions: nil)])
        let e = Edge(id: "e1", sourceID: "a", targetID: "b", edgeType: "about", createdAt: "2026-01-01T00:00:00Z", updatedAt: "2026-01-01T00:00:00Z")
        var c = try t.store.applyRemote([.edge(e), .edge(e)])
        #expect(c.edgesAdded == ["e1"] && c.skipped == 1, "an edge is added once")
        c = try t.store.applyRemote([.edgeDeleted(id: "e1")])
        #expect(c.edgesRemoved.map(\.edge.id) == ["e1"])
        #expect(try t.store.allEdges().isEmpty)
        // Not on the server any more: a full listing removes it, unless it is ours and not sent yet.
        _ = try t.store.applyRemote([.edge(e)])
        let mine = try t.store.createEdge(sourceID: "b", targetID: "a", edgeType: "about")
        c = try t.store.removeEdgesGoneFromServer(keeping: [])
        #expect(c.edgesRemoved.map(\.edge.id) == ["e1"])
        #expect(try t.store.allEdges().map(\.edge.id) == [mine.edge.id])
    }

    /// W-5: a mutation is sent as it is when marked `sending`. A local change folded into the
    /// pending create after the drainer read the queue (a save, a tag) goes with it; sent as read,
    /// the server would get the create without it, and its answer would take the change back here.
    @Test func W5_aChangeFoldedInAfterTheQueueWasReadIsSent() throws {
        let t = try TempStore()
        let s = try t.store.createItem(NewItem(type: "core.note", fileName: "n.md", content: Array("first\n".utf8)))
        let read = try #require(try t.store.nextMutations().first)
        #expect(read.kind == .create && read.payload["tags"] == .array([]))
        _ = try t.store.writeContent(rowid: s.rowid, bytes: Array("second\n".utf8))
        try t.store.setTags(rowid: s.rowid, ["x:a"])
        let sent = try t.store.markSending(seqs: [read.seq])
        #expect(sent.map(\.seq) == [read.seq])
        #expect(sent.first?.payload["properties"]?.objectValue?["body"] == "second\n", "\(sent.first?.payload ?? [:])")
        #expect(sent.first?.payload["tags"] == .array(["x:a"]))
    }

    @Test func FS20_aResolvedConflictReplacesTheQueuedUpdatesAndMakesOneCopy() throws {
        let t = try TempStore()
        _ = try t.store.applyRemote([.item(remote("i1", version: 1, body: "base\n", title: "Plan"), tags: ["work"], extensions: nil)])
        let r = try #require(try t.store.item(id: "i1"))
        _ = try t.store.writeContent(rowid: r.rowid, bytes: Array("---\ntitle: Plan\n---\nmine\n".utf8))
        let m = try #require(try t.store.nextMutations().first)
        #expect(try t.store.markSending(seqs: [m.seq]).map(\.seq) == [m.seq])
        _ = try t.store.writeContent(rowid: r.rowid, bytes: Array("---\ntitle: Plan\n---\nmine, later\n".utf8))
        var seen: [String: JSONValue] = [:]
        let c = try t.store.resolveConflict(seq: m.seq, itemID: "i1", currentVersion: 4, device: "my (laptop)",
                                            now: Date(timeIntervalSince1970: 1_767_225_600)) { local in
            seen = local
            return ConflictOutcome(resolved: ["title": "Plan", "body": "theirs\n"], copy: local)
        }
        #expect(seen["body"] == "mine, later\n", "the merge sees every local save")
        let q = try t.store.mutations()
        #expect(q.map(\.kind) == [.update, .create, .createEdge], "\(q.map(\.kind))")
        #expect(q[0].payload["base_version"] == .int(4) && q[0].payload["properties"]?.objectValue?["body"] == "theirs\n")
        #expect(q[0].idempotencyKey != m.idempotencyKey)
        let copyID = try #require(c.items.first { $0 != "i1" })
        let copy = try #require(try t.store.item(id: copyID))
        #expect(copy.stem == "Plan (conflicted copy my laptop 2026-01-01 000000)" && copy.ext == ".md")
        #expect(copy.item.properties["body"] == "mine, later\n")
        #expect(Set(try t.store.tags(itemID: copyID)) == ["work", "conflicted-copy"])
        #expect(try t.store.conflictedCopies().map { $0.originalID } == ["i1"])
    }
}
