import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// The event stream of the reference server (wire.md W-14..W-17), read with curl -N.
@Suite struct ServerEventTests {
    func note(_ s: ServerHarness, _ key: String, _ title: String, type: String = "core.note") throws -> String {
        let body = type == "core.bookmark" ? #"{"type":"core.bookmark","properties":{"title":"\#(title)"}}"# : #"{"type":"\#(type)","properties":{"title":"\#(title)","body":"b"}}"#
        let r = s.call("POST", "/items", key: key, body: body)
        return try #require(r.item["id"]?.stringValue, "\(r.body)")
    }

    func titles(_ frames: [EventTap.Frame]) -> [String] {
        frames.compactMap { $0.json["properties"]?.objectValue?["title"]?.stringValue }
    }

    @Test func W14_framesCarryIncreasingIdsAndAnIdleStreamPings() throws {
        let s = try ServerHarness(options: ["--heartbeat", "0.3"])
        let key = try s.bootstrap()
        let tap = try s.events(key: key)
        #expect(tap.wait { $0.contains { $0.comment == "ping" } }, "a stream opens with a ping")
        for t in ["one", "two", "three"] { _ = try note(s, key, t) }
        #expect(tap.wait { $0.filter { $0.event != nil }.count == 3 }, "\(tap.text)")
        let events = tap.events
        #expect(events.allSatisfy { $0.event == "item.created" })
        #expect(titles(events) == ["one", "two", "three"])
        let ids = events.compactMap { $0.id.flatMap { Int64($0) } }
        #expect(ids.count == 3 && ids == ids.sorted() && Set(ids).count == 3, "ids increase: \(ids)")
        let pingsBefore = tap.frames.filter { $0.comment == "ping" }.count
        #expect(tap.wait { $0.filter { $0.comment == "ping" }.count >= pingsBefore + 2 }, "an idle stream keeps pinging")
        #expect(tap.text.contains("\n: ping\n\n") || tap.text.hasPrefix(": ping\n\n"))
    }

    @Test func W15_everyChangeEmitsItsEventWithItsData() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let tap = try s.events(key: key)
        #expect(tap.wait { !$0.isEmpty })
        let a = try note(s, key, "a"), b = try note(s, key, "b")
        #expect(s.call("PATCH", "/items/\(a)", key: key, body: #"{"version":1,"properties":{"body":"new"}}"#).status == 200)
        #expect(s.call("POST", "/items/\(a)/transition", key: key, body: #"{"state":"archived"}"#).status == 200)
        #expect(s.call("POST", "/items/\(a)/restore", key: key).status == 200)
        #expect(s.call("POST", "/items/\(a)/tags", key: key, body: #"{"tags":["x"]}"#).status == 200)
        let e = s.call("POST", "/edges", key: key, body: #"{"source_id":"\#(a)","target_id":"\#(b)","edge_type":"references"}"#)
        let edgeID = try #require(e.json["edge"]?.objectValue?["id"]?.stringValue)
        #expect(s.call("DELETE", "/edges/\(edgeID)", key: key).status == 200)
        #expect(s.call("DELETE", "/items/\(b)", key: key).status == 200)
        let names = ["item.created", "item.created", "item.updated", "item.state_changed", "item.restored", "metadata.changed",
                     "edge.created", "edge.deleted", "item.deleted"]
        #expect(tap.wait { $0.filter { $0.event != nil }.count >= names.count }, "\(tap.text)")
        let ev = tap.events
        #expect(ev.map { $0.event! } == names)
        guard ev.count == names.count else { return }
        #expect(ev[2].json["version"] == .int(2) && ev[2].json["properties"]?.objectValue?["body"] == .string("new"), "item.updated: the full item")
        #expect(ev[3].json["state"] == .string("archived") && ev[4].json["state"] == .string("active"))
        #expect(ev[5].json == ["item_id": .string(a), "tags": .array(["x"]), "tier": "library", "state": "active"])
        #expect(ev[6].json["id"] == .string(edgeID) && ev[6].json["edge_type"] == .string("references") && ev[6].json["created_at"] != nil)
        #expect(ev[7].json == ["id": .string(edgeID), "edge_type": "references", "source_id": .string(a), "target_id": .string(b)])
        #expect(ev[8].json == ["id": .string(b), "type": "core.note"])
    }

    @Test func W16_filtersAndEventsAKeyCannotReadAreNeverSent() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let member = try #require(s.call("POST", "/keys", key: key, body: #"{"label":"m","role":"member","type_permissions":{"core.note":"read"}}"#).json["key"]?.stringValue)
        let byName = try s.events(key: key, query: "?event=item.created,edge.created")
        let byType = try s.events(key: key, query: "?type=core.note")
        let byEdge = try s.events(key: key, query: "?edge_type=about")
        let byPattern = try s.events(key: key, query: "?type=core.*")
        let narrow = try s.events(key: member)
        for tap in [byName, byType, byEdge, byPattern, narrow] { #expect(tap.wait { !$0.isEmpty }) }

        let bm = try note(s, key, "bm", type: "core.bookmark")
        let n1 = try note(s, key, "n1")
        #expect(s.call("PATCH", "/items/\(n1)", key: key, body: #"{"properties":{"body":"c"}}"#).status == 200)
        #expect(s.call("POST", "/edges", key: key, body: #"{"source_id":"\#(n1)","target_id":"\#(bm)","edge_type":"about"}"#).status == 201)
        #expect(s.call("POST", "/edges", key: key, body: #"{"source_id":"\#(bm)","target_id":"\#(n1)","edge_type":"references"}"#).status == 201)
        let n2 = try note(s, key, "n2")
        #expect(s.call("POST", "/edges", key: key, body: #"{"source_id":"\#(n1)","target_id":"\#(n2)","edge_type":"about"}"#).status == 201)

        func names(_ tap: EventTap) -> [String] { tap.events.compactMap(\.event) }
        #expect(byName.wait { $0.filter { $0.event != nil }.count >= 6 })
        #expect(names(byName) == ["item.created", "item.created", "edge.created", "edge.created", "item.created", "edge.created"])
        #expect(byType.wait { $0.filter { $0.event != nil }.count >= 3 })
        #expect(names(byType) == ["item.created", "item.updated", "item.created"] && titles(byType.events) == ["n1", "n1", "n2"])
        #expect(byEdge.wait { $0.filter { $0.event != nil }.count >= 2 })
        #expect(names(byEdge) == ["edge.created", "edge.created"] && byEdge.events.allSatisfy { $0.json["edge_type"] == .string("about") })
        #expect(byPattern.wait { $0.filter { $0.event != nil }.count >= 4 })
        #expect(names(byPattern) == ["item.created", "item.created", "item.updated", "item.created"])
        // The member key reads notes only: no bookmark, and no edge that touches one.
        #expect(narrow.wait { $0.filter { $0.event != nil }.count >= 4 })
        #expect(names(narrow) == ["item.created", "item.updated", "item.created", "edge.created"], "\(narrow.text)")
        #expect(!narrow.text.contains(bm), "nothing about the unreadable bookmark")
        // Nothing else arrives later.
        usleep(300_000)
        #expect(byName.events.count == 6 && byType.events.count == 3 && byEdge.events.count == 2 && narrow.events.count == 4)
    }

    @Test func W17_resumeWithLastEventIDAcrossARestartHasNoGapAndNoDuplicate() throws {
        let s = try ServerHarness()
        let key = try s.bootstrap()
        let first = try s.events(key: key)
        #expect(first.wait { !$0.isEmpty })
        for t in ["1", "2", "3"] { _ = try note(s, key, t) }
        #expect(first.wait { $0.filter { $0.event != nil }.count == 3 })
        let last = try #require(first.events.last?.id)
        first.close()
        for t in ["4", "5"] { _ = try note(s, key, t) }
        // A graceful stop ends open streams instead of waiting for them.
        let open = try s.events(key: key)
        #expect(open.wait { !$0.isEmpty })
        #expect(s.stop() == 0, "SIGTERM with an open stream exits cleanly: \(s.log)")
        #expect(open.wait(timeout: 5) { _ in open.ended })
        try s.start()
        _ = try note(s, key, "6")
        let resumed = try s.events(key: key, lastEventID: last)
        #expect(resumed.wait { $0.filter { $0.event != nil }.count >= 3 }, "\(resumed.text)")
        _ = try note(s, key, "7")
        #expect(resumed.wait { $0.filter { $0.event != nil }.count >= 4 })
        usleep(200_000)
        let all = first.events + resumed.events
        #expect(titles(all) == ["1", "2", "3", "4", "5", "6", "7"], "every event exactly once, in order")
        let ids = all.compactMap { $0.id.flatMap { Int64($0) } }
        #expect(ids == ids.sorted() && Set(ids).count == 7)
    }

    @Test func W17_anIdPastRetentionGetsCatchupTooOldAndTheStreamCloses() throws {
        let s = try ServerHarness(options: ["--event-retention", "1s"])
        let key = try s.bootstrap()
        let tap = try s.events(key: key)
        #expect(tap.wait { !$0.isEmpty })
        _ = try note(s, key, "a")
        _ = try note(s, key, "b")
        #expect(tap.wait { $0.filter { $0.event != nil }.count == 2 })
        let firstID = try #require(tap.events.first?.id)
        tap.close()
        usleep(1_500_000)
        let c = try note(s, key, "c")
        let old = try s.events(key: key, lastEventID: firstID)
        #expect(old.wait { _ in old.ended }, "the server closes the stream")
        let frames = old.frames.filter { $0.event != nil }
        #expect(frames.count == 1 && frames[0].event == "catchup_too_old" && frames[0].id == nil, "\(old.text)")
        #expect(frames.first?.json["requested"] == .string(firstID) && frames.first?.json["min_retained_id"]?.stringValue != nil)
        #expect(!old.text.contains(c), "no events after catchup_too_old")
        // An id this log never issued is too old as well; a retained one resumes normally.
        let foreign = try s.events(key: key, lastEventID: "999999")
        #expect(foreign.wait { _ in foreign.ended } && foreign.events.first?.event == "catchup_too_old")
        let fresh = try s.events(key: key)
        #expect(fresh.wait { !$0.isEmpty })
        _ = try note(s, key, "d")
        #expect(fresh.wait { $0.filter { $0.event != nil }.count == 1 })
        let current = try s.events(key: key, lastEventID: fresh.events[0].id)
        #expect(current.wait { $0.contains { $0.comment == "ping" } } && !current.ended && current.events.isEmpty, "\(current.text)")
    }
}
