import Foundation
import MarfaTestSupport
import Testing

/// The server's storage failing in a way that passes (its disk is full): the request is answered
/// with what the client can do about it, never a 500; reads go on; nothing already stored is
/// harmed; the server goes on.
@Suite struct ServerStorageFailureTests {
    static func random(_ count: Int) -> Data { Data((0..<count).map { _ in UInt8.random(in: 0...255) }) }

    /// The SQLite file on a 6 MiB tmpfs, filled with 1 MiB blobs: the write that does not fit is
    /// `507 insufficient_storage` with `Retry-After`, whether a blob of declared length, a chunked
    /// one (spooled to the same disk) or a JSON write; once the disk has room, writes succeed and
    /// the database is whole.
    @Test func W3_aFullDiskIs507AndWritesSucceedOnceThereIsRoom() throws {
        let top = ProcessInfo.processInfo.environment["MARFAFS_TEST_ROOT"] ?? (NSTemporaryDirectory() + "marfafs-tests")
        let dir = top + "/full-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let mounted = Shell.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", dir])
        try #require(mounted.status == 0, "\(mounted.stderr)")
        defer { _ = Shell.run(["umount", "-l", dir]) }
        let s = try ServerHarness(db: dir + "/server.sqlite")
        defer { _ = s.stop() }
        let key = try s.bootstrap()
        #expect(s.call("POST", "/items", key: key, body: #"{"type":"core.note","properties":{"title":"kept"}}"#).status == 201)
        var statuses: [Int] = []
        var refused: ServerHarness.Reply?
        for _ in 0..<12 {
            let r = s.call("POST", "/blobs", key: key, data: Self.random(1 << 20), contentType: "application/octet-stream")
            statuses.append(r.status)
            if r.status != 201 { refused = r; break }
        }
        let full = try #require(refused, "\(statuses)")
        #expect(full.status == 507 && full.code == "insufficient_storage", "\(full.status) \(full.body)")
        #expect(full.headers["retry-after"] == "60")
        let chunked = s.call("POST", "/blobs", key: key, data: Self.random(2 << 20), contentType: "application/octet-stream",
                             headers: ["Transfer-Encoding": "chunked"])
        #expect(chunked.status == 507 && chunked.code == "insufficient_storage", "\(chunked.status) \(chunked.body)")
        let text = String(repeating: #"a line of a long note\n"#, count: 100_000)
        let note = s.call("POST", "/items", key: key, body: #"{"type":"core.note","properties":{"title":"too big","content":"\#(text)"}}"#)
        #expect(note.status == 507 && note.code == "insufficient_storage", "\(note.status) \(note.body)")
        let list = s.call("GET", "/items?limit=5", key: key)
        #expect(list.status == 200 && list.body.contains("kept"))
        #expect(kill(s.pid, 0) == 0, "the server is still running")

        #expect(Shell.run(["mount", "-o", "remount,size=64m", dir]).status == 0)
        #expect(s.call("POST", "/blobs", key: key, data: Self.random(2 << 20), contentType: "application/octet-stream").status == 201)
        #expect(s.call("POST", "/items", key: key, body: #"{"type":"core.note","properties":{"title":"after","content":"\#(text)"}}"#).status == 201)
        #expect(Shell.run(["sqlite3", dir + "/server.sqlite", "PRAGMA integrity_check"]).out == "ok")
    }
}
