import Foundation
import Logging
import MarfaModel
import MarfaStore
import MarfaSync
import MarfaTestSupport
import Testing

/// W-4, W-14: the engine's two halves after the server comes back.
extension WireTests {
    /// W-4, W-14: a change made while the server is away goes out as soon as the server is back,
    /// not when the queue's backoff would have it: the event stream opening again says the server
    /// answers. The queue's backoff here is two minutes without jitter (its first wait after the
    /// failure); the change must reach the server well before. (Before, the queue slept out its
    /// wait whatever the stream knew: a minute at the cap, with `flush` waiting all of it.)
    @Test func W4_W14_aChangeMadeOfflineGoesOutWhenTheStreamIsBackNotAfterTheBackoff() async throws {
        let s = try ServerHarness(postgres: false)
        let key = try s.bootstrap()
        let dir = try TempDirectory("marfafs-reconnect")
        let store = try Store(path: dir.path + "/kb.sqlite")
        let credential = try Credential(token: key)
        let engine = SyncEngine(store: store, baseURL: s.base, credential: credential, log: Logger(label: "test"),
                                queueBackoff: Backoff(base: 120, cap: 120, jitter: false), loadCredential: { credential })
        engine.start()
        defer { engine.stop() }
        let status = engine.status
        func eventually(_ seconds: Double, _ f: () -> Bool) async -> Bool {
            let end = Date().addingTimeInterval(seconds)
            while Date() < end { if f() { return true }; try? await Task.sleep(for: .milliseconds(50)) }
            return f()
        }
        #expect(await eventually(30) { status.snapshot.stream == .live && status.snapshot.firstSyncDone }, "\(status.eventLines)")
        #expect(s.stop() == 0)
        #expect(await eventually(30) { status.snapshot.stream != .live })
        _ = try store.createItem(NewItem(type: "core.note", fileName: "offline.md", content: Array("written offline\n".utf8)))
        // The queue tried, failed, and now waits out its two minutes.
        #expect(await eventually(30) { status.snapshot.connection == .offline }, "\(status.eventLines)")
        try s.start()
        let back = Date()
        let listed = { () -> Int in
            s.call("GET", "/items?type=core.note", key: key).json["data"]?.arrayValue?.count ?? -1
        }
        #expect(await eventually(60) { status.snapshot.stream == .live }, "the stream reconnects: \(status.eventLines)")
        #expect(await eventually(60) { listed() == 1 }, "\(status.eventLines)")
        let took = Date().timeIntervalSince(back)
        // Far below the queue's wait; the rest allows a machine busy with the whole suite.
        #expect(took < 60, "sent \(Int(took)) s after the server came back (the queue's wait: 120 s)")
        // Its answer recorded (the server lists it a moment before the engine hears back).
        #expect(await eventually(10) { status.snapshot.sent == 1 && (try? store.unsentCount()) == 0 }, "\(status.eventLines)")
    }
}
