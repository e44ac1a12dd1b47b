import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// A value shared by threads.
final class Locked<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: T
    init(_ v: T) { value = v }
    func withLock<R>(_ body: (inout T) -> R) -> R { lock.withLock { body(&value) } }
}

/// `marfafs serve` on PostgreSQL with several processes on one database (issue 17): what a client
/// sees must not depend on which process answers. Every other server test also runs on
/// PostgreSQL (`MARFAFS_TEST_SERVER_DB=postgres`, scripts/test); these are about more than one
/// process. Real processes, a real PostgreSQL cluster (PostgresCluster), real HTTP.
@Suite(.serialized) struct PostgresServerTests {
    /// Two server processes on one new PostgreSQL database, and an admin key of its first tenant.
    func pair(options: [String] = []) throws -> (ServerHarness, ServerHarness, String) {
        let s1 = try ServerHarness(postgres: true, options: options)
        let key = try s1.bootstrap()
        let s2 = try ServerHarness(db: s1.db, options: options)
        return (s1, s2, key)
    }

    func note(_ s: ServerHarness, _ key: String, _ title: String, headers: [String: String] = [:]) -> ServerHarness.Reply {
        s.call("POST", "/items", key: key, body: #"{"type":"core.note","properties":{"title":"\#(title)"}}"#, headers: headers)
    }

    func count(_ s: ServerHarness, _ key: String) -> Int {
        var n = 0, cursor: String? = nil
        repeat {
            let r = s.call("GET", "/items?limit=200" + (cursor.map { "&cursor=\($0)" } ?? ""), key: key)
            if case .array(let a)? = r.json["data"] { n += a.count }
            cursor = r.json["next_cursor"]?.stringValue
        } while cursor != nil
        return n
    }

    /// Runs `body(0..<n)` on n threads at once (not limited to the number of cores, as
    /// `concurrentPerform` is), and waits for all of them.
    static func parallel(_ n: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let group = DispatchGroup()
        for i in 0..<n {
            group.enter()
            Thread { body(i); group.leave() }.start()
        }
        group.wait()
    }

    static func ids(_ frames: [EventTap.Frame]) -> [Int64] { frames.compactMap { $0.id.flatMap { Int64($0) } } }

    /// 2,000 writes from 16 writers spread over both processes: every subscriber, on either
    /// process, gets every event of its tenant once, in order, with ids that have no gap. A
    /// subscriber whose process is killed (-9) mid-stream reconnects to the other with
    /// Last-Event-ID and, across both streams, also gets each event once, in order.
    @Test func pg_eventsOfConcurrentWritersOnTwoProcessesReachEveryStreamOnceAndInOrder() throws {
        let (s1, s2, key) = try pair()
        let taps = [try s1.events(key: key), try s2.events(key: key)]
        let doomed = try s2.events(key: key)
        for t in taps + [doomed] { #expect(t.wait { !$0.isEmpty }) }
        let writers = 16, each = 125, total = writers * each
        let created = Locked(Set<String>()), failed = Locked([Int]())
        let killed = Locked(false)
        Self.parallel(writers) { w in
            for i in 0..<each {
                // Half way, process 2 dies: its writers go on through process 1.
                if w == 0, i == each / 2 { s2.kill9(); killed.withLock { $0 = true } }
                let s = w % 2 == 1 && !killed.withLock({ $0 }) ? s2 : s1
                var r = note(s, key, "w\(w)-\(i)", headers: ["Idempotency-Key": "w\(w)-\(i)"])
                // A request cut off by the kill is sent again, to the process still up.
                if r.status == 0 { r = note(s1, key, "w\(w)-\(i)", headers: ["Idempotency-Key": "w\(w)-\(i)"]) }
                if r.status == 201, let id = r.item["id"]?.stringValue { created.withLock { _ = $0.insert(id) } } else { failed.withLock { $0.append(r.status) } }
            }
        }
        #expect(failed.withLock { $0 }.isEmpty, "\(failed.withLock { $0 })")
        #expect(created.withLock { $0.count } == total)
        let expected = created.withLock { $0 }
        func itemIDs(_ events: [EventTap.Frame]) -> [String] { events.compactMap { $0.json["id"]?.stringValue } }
        // The survivor's subscriber, and the one on process 2 until it died.
        let survivor = taps[0]
        #expect(survivor.wait(timeout: 60) { $0.filter { $0.event == "item.created" }.count >= total }, "\(survivor.events.count) of \(total)")
        #expect(Self.ids(survivor.events) == Array(1...Int64(total)), "every id once, in order, no gap")
        #expect(Set(itemIDs(survivor.events)) == expected && itemIDs(survivor.events).count == total, "every item's event, once")
        let before = doomed.events
        let last = try #require(before.last?.id, "the stream on process 2 got events before the kill")
        let resumed = try s1.events(key: key, lastEventID: last)
        defer { resumed.close() }
        #expect(resumed.wait(timeout: 60) { Self.ids($0.filter { $0.event != nil }).last == Int64(total) }, "\(resumed.events.count)")
        let joined = before + resumed.events
        #expect(Self.ids(joined) == Array(1...Int64(total)), "across the kill: every id once, in order")
        #expect(itemIDs(joined) == itemIDs(survivor.events), "one order for every subscriber")
        for t in taps + [doomed] { t.close() }
    }

    /// The same Idempotency-Key sent to both processes at the same moment: one item, one event;
    /// the other request gets the first one's answer.
    @Test func pg_oneIdempotencyKeySentToTwoProcessesAtOnceMakesOneItem() throws {
        let (s1, s2, key) = try pair()
        let tap = try s1.events(key: key)
        defer { tap.close() }
        #expect(tap.wait { !$0.isEmpty })
        let keys = 20
        let answers = Locked([Int: [ServerHarness.Reply]]())
        Self.parallel(keys * 2) { n in
            let k = n / 2
            let r = note(n % 2 == 0 ? s1 : s2, key, "once-\(k)", headers: ["Idempotency-Key": "same-\(k)"])
            answers.withLock { $0[k, default: []].append(r) }
        }
        for (k, pair) in answers.withLock({ $0 }) {
            #expect(pair.count == 2 && pair.allSatisfy { $0.status == 201 }, "\(k): \(pair.map(\.status)) \(pair.map(\.body))")
            #expect(pair[0].item["id"] != nil && pair[0].item["id"] == pair[1].item["id"], "one item for key \(k)")
            #expect(pair.filter { $0.headers["idempotency-replayed"] == "true" }.count == 1, "one of the two is the replay")
        }
        #expect(count(s1, key) == keys && count(s2, key) == keys)
        #expect(tap.wait(timeout: 20) { $0.filter { $0.event == "item.created" }.count >= keys })
        usleep(300_000)
        #expect(tap.events.filter { $0.event == "item.created" }.count == keys, "one event per key")
    }

    /// 50 PATCHes of one item, all based on version 1, sent to both processes at once: half set a
    /// field of their own (the server merges them), half set one shared field (the first to commit
    /// applies, the others overlap it and get 409). Each either applies or gets 409; nothing that
    /// applied is lost, and the version counts exactly what applied.
    @Test func pg_concurrentPatchesOfOneItemOnTwoProcessesLoseNoUpdate() throws {
        let (s1, s2, key) = try pair()
        let id = try #require(note(s1, key, "shared").item["id"]?.stringValue)
        let patches = 50
        let statuses = Locked([Int: Int]())
        Self.parallel(patches) { n in
            let field = n % 2 == 0 ? "f\(n)" : "shared"
            let r = (n % 4 < 2 ? s1 : s2).call("PATCH", "/items/\(id)", key: key, body: #"{"version":1,"properties":{"\#(field)":\#(n)}}"#)
            statuses.withLock { $0[n] = r.status }
        }
        let all = statuses.withLock { $0 }
        #expect(all.values.allSatisfy { $0 == 200 || $0 == 409 }, "\(all)")
        let applied = all.filter { $0.value == 200 }.map(\.key)
        #expect(applied.filter { $0 % 2 == 0 }.count == patches / 2, "every patch of a field of its own merges")
        #expect(applied.filter { $0 % 2 == 1 }.count == 1, "one patch of the shared field applies: \(applied.sorted())")
        let item = s2.call("GET", "/items/\(id)", key: key).item
        #expect(item["version"] == .int(Int64(applied.count + 1)), "the version counts what applied")
        let props = item["properties"]?.objectValue ?? [:]
        #expect(applied.allSatisfy { n in props[n % 2 == 0 ? "f\(n)" : "shared"] == .int(Int64(n)) }, "every applied patch is there: \(props)")
        var versions: [JSONValue] = []
        if case .array(let a)? = s1.call("GET", "/items/\(id)/versions", key: key).json["versions"] { versions = a.compactMap { $0.objectValue?["version"] } }
        #expect(versions == (1...applied.count).map { .int(Int64($0)) }, "one snapshot per version")
    }

    /// An event stream holds no pooled connection while it waits: far more streams than the pool
    /// has connections, and requests are still answered and every stream gets the event.
    @Test func pg_openStreamsHoldNoDatabaseConnection() throws {
        let (s1, s2, key) = try pair()
        let taps = try (0..<30).map { n in try (n % 2 == 0 ? s1 : s2).events(key: key) }
        defer { taps.forEach { $0.close() } }
        for t in taps { #expect(t.wait { !$0.isEmpty }) }
        #expect(note(s1, key, "seen by all").status == 201)
        for t in taps { #expect(t.wait(timeout: 20) { $0.contains { $0.event == "item.created" } }) }
    }

    /// The database ends every connection of the server (as a restart or an administrator does):
    /// the next requests are answered on new connections, none hangs, and streams go on (the
    /// listener reconnects; the poller is the backup).
    @Test func pg_connectionsTheDatabaseEndsAreReplacedAndNoRequestHangs() throws {
        let cluster = try PostgresCluster.shared.get()
        let (s1, _, key) = try pair()
        let tap = try s1.events(key: key)
        defer { tap.close() }
        #expect(tap.wait { !$0.isEmpty })
        #expect(note(s1, key, "before").status == 201)
        let database = String(s1.db.split(separator: "/").last!)
        for round in 0..<3 {
            let ended = cluster.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '\(database)' AND pid <> pg_backend_pid()")
            #expect(ended.status == 0 && (Int(ended.out) ?? 0) > 0, "\(ended.stdout) \(ended.stderr)")
            for i in 0..<4 {
                #expect(note(s1, key, "after \(round) \(i)").status == 201, "round \(round), request \(i)")
                #expect(s1.call("GET", "/items?limit=1", key: key).status == 200)
            }
        }
        #expect(tap.wait(timeout: 20) { $0.filter { $0.event == "item.created" }.count == 13 }, "\(tap.events.count)")
    }

    /// Blobs are stored uncompressed (a download reads them in 1 MiB slices, and a slice of a
    /// compressed value decompresses it from the start), and migration pg2 rewrites the blobs a
    /// pg1 database stored compressed, byte for byte.
    @Test func pg_blobsAreStoredUncompressedAndPg2RewritesCompressedOnes() throws {
        let cluster = try PostgresCluster.shared.get()
        let s1 = try ServerHarness(postgres: true)
        let key = try s1.bootstrap()
        let database = String(s1.db.split(separator: "/").last!)
        func sql(_ q: String) -> String { cluster.psql(q, database: database).out }
        func text(_ seed: String) -> String {
            (0..<60_000).map { "\(seed) line \($0): the quick brown fox jumps over the lazy dog\n" }.joined()
        }
        func upload(_ body: String) throws -> String {
            let r = s1.call("POST", "/blobs", key: key, data: Data(body.utf8), contentType: "text/plain")
            try #require(r.status == 201, "\(r.status) \(r.body)")
            return try #require(r.json["hash"]?.stringValue)
        }
        func compression(_ hash: String) -> String {
            sql("SELECT coalesce(pg_column_compression(data), 'none') FROM blobs WHERE hash = '\(hash)'")
        }
        #expect(sql("SELECT attstorage FROM pg_attribute WHERE attrelid = 'blobs'::regclass AND attname = 'data'") == "e")
        let first = text("a")
        let a = try upload(first)
        #expect(compression(a) == "none")
        // A database as pg1 left it: blobs compressed.
        #expect(cluster.psql("ALTER TABLE blobs ALTER COLUMN data SET STORAGE EXTENDED", database: database).status == 0)
        #expect(cluster.psql("DELETE FROM schema_migrations WHERE id = 'pg2'", database: database).status == 0)
        let second = text("b")
        let b = try upload(second)
        try #require(compression(b) == "pglz", "the case needs a compressed blob")
        let migrated = Shell.run([MountHarness.binary, "serve", "--db", s1.db, "--migrate-only"])
        #expect(migrated.status == 0 && migrated.out == "applied pg2", "\(migrated.stdout) \(migrated.stderr)")
        #expect(compression(a) == "none" && compression(b) == "none")
        #expect(sql("SELECT attstorage FROM pg_attribute WHERE attrelid = 'blobs'::regclass AND attname = 'data'") == "e")
        let whole = s1.call("GET", "/blobs/\(b)", key: key)
        #expect(whole.status == 200 && whole.body == second)
        let utf8 = Array(second.utf8)
        let tail = s1.call("GET", "/blobs/\(b)", key: key, headers: ["Range": "bytes=\(utf8.count - 100_000)-"])
        #expect(tail.status == 206 && tail.body == String(decoding: utf8[(utf8.count - 100_000)...], as: UTF8.self))
    }

    /// A server answering request after request does not grow: each statement waits on its
    /// connection for the answer or the connection's close, and a close callback left behind per
    /// statement (they complete only when the connection closes) grew a server by about 7 KiB a
    /// request, without bound. 4,000 GETs on keep-alive connections after a warm-up.
    @Test func pg_aServerAnsweringThousandsOfRequestsDoesNotGrow() throws {
        let s1 = try ServerHarness(postgres: true)
        let key = try s1.bootstrap()
        let created = note(s1, key, "read again and again")
        let id = try #require(created.item["id"]?.stringValue)
        func rss() -> Int {
            let status = (try? String(contentsOfFile: "/proc/\(s1.pid)/status", encoding: .utf8)) ?? ""
            let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
            return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
        }
        func get(_ n: Int) {
            let config = s1.root + "/urls-\(n)"
            let url = "\(s1.base)/items/\(id)"
            try? String(repeating: "url = \"\(url)\"\noutput = \"/dev/null\"\n", count: n / 4).write(toFile: config, atomically: true, encoding: .utf8)
            Self.parallel(4) { _ in
                _ = Shell.run(["/usr/bin/curl", "-s", "-f", "-H", "Authorization: Bearer \(key)", "-K", config])
            }
        }
        get(1_000)
        let before = rss()
        get(4_000)
        let grown = rss() - before
        #expect(before > 0)
        #expect(grown < 8_000, "grew \(grown) KiB over 4,000 requests")
        #expect(s1.call("GET", "/items/\(id)", key: key).status == 200)
    }

    /// The database goes down under a running server (an administrator's `pg_ctl stop`): requests
    /// are answered at once with 503 `service_unavailable` and `Retry-After` (not a 500, not a
    /// hang), the server stays up, and once the database is back, requests succeed and the open
    /// stream gets the new events.
    @Test func pg_aDatabaseOutageIsAnswered503WithRetryAfterAndTheServerRecovers() throws {
        let cluster = try PostgresCluster.own()
        defer { cluster.destroy() }
        let s1 = try ServerHarness(db: try cluster.database())
        let key = try s1.bootstrap()
        let tap = try s1.events(key: key)
        defer { tap.close() }
        #expect(tap.wait { !$0.isEmpty })
        let before = note(s1, key, "before the outage")
        let id = try #require(before.item["id"]?.stringValue)
        try cluster.stop()
        for reply in [s1.call("GET", "/items/\(id)", key: key), note(s1, key, "during the outage"), s1.call("GET", "/items?limit=5", key: key)] {
            #expect(reply.status == 503 && reply.code == "service_unavailable", "\(reply.status) \(reply.body)")
            #expect(reply.headers["retry-after"] == "1")
        }
        #expect(kill(s1.pid, 0) == 0, "the server is still running")
        try cluster.start()
        #expect(s1.call("GET", "/items/\(id)", key: key).status == 200)
        #expect(note(s1, key, "after the outage").status == 201)
        #expect(tap.wait(timeout: 20) { frames in frames.contains { $0.event == "item.created" && $0.data.contains("after the outage") } })
    }

    /// A `--db` that cannot be used is a clear error naming the cause, exits non-zero, prints no
    /// password and creates nothing: a role or a database that does not exist, nothing listening,
    /// a URL of another kind (not taken for a SQLite file's name).
    @Test func pg_aDatabaseURLThatCannotBeUsedIsAClearErrorAndCreatesNothing() throws {
        let cluster = try PostgresCluster.shared.get()
        let dir = (ProcessInfo.processInfo.environment["MARFAFS_TEST_ROOT"] ?? NSTemporaryDirectory()) + "/urls-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let cases: [(url: String, says: String)] = [
            ("postgres://nobody:secret@127.0.0.1:\(cluster.port)/postgres", #"role "nobody" does not exist"#),
            ("postgres://\(cluster.user):secret@127.0.0.1:\(cluster.port)/nosuchdb", #"database "nosuchdb" does not exist"#),
            ("postgres://\(cluster.user):secret@127.0.0.1:\(PostgresCluster.freePort())/postgres", "Connection refused"),
            ("mysql://me:secret@127.0.0.1/db", "--db must be a SQLite file or postgres://"),
            ("sqlite://me:secret@host/server.sqlite", "--db must be a SQLite file or postgres://"),
            ("postgres://\(cluster.user):secret@127.0.0.1:\(cluster.port)/postgres?sslmod=require", "unknown parameter sslmod"),
            ("postgres://\(cluster.user):secret@127.0.0.1:\(cluster.port)/postgres?pool_max_conns=0", "pool_max_conns must be a number from 1 to 1000"),
        ]
        for (url, says) in cases {
            for extra in [["--port", "0"], ["--migrate-only"]] {
                let r = Shell.run([MountHarness.binary, "serve", "--db", url] + extra, cwd: dir)
                #expect(r.status != 0, "\(url) \(extra)")
                #expect(r.stderr.contains(says), "\(url) \(extra): \(r.stderr)")
                #expect(!(r.stdout + r.stderr).contains("secret"), "\(url) \(extra): \(r.stderr)")
            }
        }
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? ["?"]).isEmpty, "nothing created")
    }

    /// 16 clients at once, 8 notes each, on `s`: the most connections to the database the server
    /// process held meanwhile, and whether every request was answered 201.
    func peakConnections(_ s: ServerHarness, _ key: String) throws -> (most: Int, allAnswered: Bool) {
        let cluster = try PostgresCluster.shared.get()
        let done = Locked(false)
        let most = Locked(0)
        let sampler = Thread {
            while !done.withLock({ $0 }) {
                let n = cluster.connections(heldBy: s.pid)
                most.withLock { $0 = max($0, n) }
                usleep(2_000)
            }
        }
        sampler.start()
        let statuses = Locked([Int]())
        Self.parallel(16) { i in
            for j in 0..<8 { let status = note(s, key, "load \(i) \(j)").status; statuses.withLock { $0.append(status) } }
        }
        done.withLock { $0 = true }
        while !sampler.isFinished { usleep(10_000) }
        let all = statuses.withLock { $0 }
        return (most.withLock { $0 }, all.count == 128 && all.allSatisfy { $0 == 201 })
    }

    /// Requests wait on PostgreSQL on threads of their own, as many as the process has
    /// connections (10), not one per core: 16 clients at once keep more than the cores' worth of
    /// connections busy. `?pool_max_conns=2` bounds them: at most 2 for requests (and 1 listening),
    /// and every request is still answered.
    @Test func pg_requestsUseThePoolsConnectionsAndPoolMaxConnsBoundsThem() throws {
        let cluster = try PostgresCluster.shared.get()
        let url = try cluster.database()
        let s1 = try ServerHarness(db: url)
        let key = try s1.bootstrap()
        let free = try peakConnections(s1, key)
        #expect(free.allAnswered)
        #expect(free.most > 4, "\(free.most) connections on \(ProcessInfo.processInfo.activeProcessorCount) cores")
        _ = s1.stop()
        let bounded = try ServerHarness(db: url + "?pool_max_conns=2")
        let load = try peakConnections(bounded, key)
        #expect(load.allAnswered)
        #expect(load.most >= 2 && load.most <= 3, "\(load.most) connections; the server's log: \(bounded.log.split(separator: "\n").filter { !$0.hasSuffix(" 201") }.suffix(30).joined(separator: "\n"))")
    }

    /// `--migrate-only` applies the schema once; processes started at once on a new database
    /// migrate it once between them and all serve.
    @Test func pg_migrationsRunOnceWhateverStartsThem() throws {
        let cluster = try PostgresCluster.shared.get()
        let url = try cluster.database()
        let first = Shell.run([MountHarness.binary, "serve", "--db", url, "--migrate-only"])
        #expect(first.status == 0 && first.out == "applied pg1\napplied pg2", "\(first.stdout) \(first.stderr)")
        let again = Shell.run([MountHarness.binary, "serve", "--db", url, "--migrate-only"])
        #expect(again.status == 0 && again.out.isEmpty, "\(again.stdout) \(again.stderr)")
        let fresh = try cluster.database()
        let servers = Locked([ServerHarness]())
        Self.parallel(3) { _ in
            if let s = try? ServerHarness(db: fresh) { servers.withLock { $0.append(s) } }
        }
        let all = servers.withLock { $0 }
        #expect(all.count == 3)
        #expect(cluster.psql("SELECT string_agg(id, ',' ORDER BY id) FROM schema_migrations", database: String(fresh.split(separator: "/").last!)).out == "pg1,pg2")
        // The env variable names the database as --db does.
        let viaEnv = Shell.run(["/usr/bin/env", "MARFAFS_DB=\(fresh)", MountHarness.binary, "serve", "--migrate-only"])
        #expect(viaEnv.status == 0 && viaEnv.out.isEmpty)
        let bad = Shell.run([MountHarness.binary, "serve", "--db", "postgres://nobody@127.0.0.1:\(cluster.port)/nothing", "--migrate-only"])
        #expect(bad.status != 0 && !bad.stderr.isEmpty, "a database that cannot be reached is a clear error")
    }

    /// The database goes down while two mounts work: their changes wait in their queues (the
    /// server answers 503), and once the database is back every change reaches the other mount.
    @Test func pg_changesMadeWhileTheDatabaseIsDownArriveOnceItIsBack() throws {
        let cluster = try PostgresCluster.own()
        defer { cluster.destroy() }
        let s1 = try ServerHarness(db: try cluster.database())
        let key = try s1.bootstrap()
        let file = s1.root + "/key"
        try (key + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o600)
        func text(_ m: MountHarness, _ name: String) -> String? { try? String(contentsOfFile: m.path("types/core.note/" + name), encoding: .utf8) }
        func queued(_ m: MountHarness) -> Int {
            if case .int(let n)? = m.syncStatus["queue_depth"] { Int(n) } else { -1 }
        }
        try MountHarness.with(options: ["--server", s1.base, "--key-file", file, "--device", "dev-a"]) { a in
            try MountHarness.with(options: ["--server", s1.base, "--key-file", file, "--device", "dev-b"]) { b in
                #expect(a.sh("printf 'before\\n' > types/core.note/before.md").status == 0)
                #expect(MountHarness.eventually(timeout: 20) { text(b, "before.md") == "before\n" })
                try cluster.stop()
                for i in 0..<5 { #expect(a.sh("printf 'during \(i)\\n' > 'types/core.note/during \(i).md'").status == 0) }
                #expect(b.sh("printf 'from b\\n' > types/core.note/b.md").status == 0)
                #expect(MountHarness.eventually(timeout: 20) { queued(a) >= 5 && queued(b) >= 1 }, "\(queued(a)) \(queued(b))")
                try cluster.start()
                #expect(MountHarness.eventually(timeout: 90) { (0..<5).allSatisfy { text(b, "during \($0).md") == "during \($0)\n" } })
                #expect(MountHarness.eventually(timeout: 90) { text(a, "b.md") == "from b\n" })
                #expect(MountHarness.eventually(timeout: 20) { queued(a) == 0 && queued(b) == 0 }, "\(queued(a)) \(queued(b))")
            }
        }
    }

    /// Two mounts, each syncing through its own server process on one database, converge.
    @Test func pg_twoMountsOnTwoProcessesConverge() throws {
        let (s1, s2, key) = try pair()
        let file = s1.root + "/key"
        try (key + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o600)
        try MountHarness.with(options: ["--server", s1.base, "--key-file", file, "--device", "dev-a"]) { a in
            try MountHarness.with(options: ["--server", s2.base, "--key-file", file, "--device", "dev-b"]) { b in
                #expect(a.sh("printf 'from a\\n' > types/core.note/pg.md").status == 0)
                #expect(MountHarness.eventually(timeout: 20) { (try? String(contentsOfFile: b.path("types/core.note/pg.md"), encoding: .utf8)) == "from a\n" })
                #expect(b.sh("printf 'from a\\nand b\\n' > types/core.note/pg.md").status == 0)
                #expect(MountHarness.eventually(timeout: 20) { (try? String(contentsOfFile: a.path("types/core.note/pg.md"), encoding: .utf8)) == "from a\nand b\n" })
            }
        }
    }
}

/// The documented deployment (deploy/nginx-marfafs.conf): real nginx in front of two processes
/// on one PostgreSQL database.
@Suite(.serialized) struct NginxDeploymentTests {
    /// nginx with the repository's sample config, its three ports replaced by these servers' and a
    /// free one; stopped when the returned object goes.
    final class Proxy {
        let pid: pid_t
        let base: String
        init(_ s1: ServerHarness, _ s2: ServerHarness, dir: String) throws {
            let listen = PostgresCluster.freePort()
            func port(of s: ServerHarness) -> String { String(s.base.split(separator: ":").last!) }
            var conf = try String(contentsOfFile: MountHarness.repoRoot + "/deploy/nginx-marfafs.conf", encoding: .utf8)
            conf = conf.replacingOccurrences(of: "127.0.0.1:8601", with: "127.0.0.1:" + port(of: s1))
                .replacingOccurrences(of: "127.0.0.1:8602", with: "127.0.0.1:" + port(of: s2))
                .replacingOccurrences(of: "listen 8600;", with: "listen 127.0.0.1:\(listen);")
            try FileManager.default.createDirectory(atPath: dir + "/tmp", withIntermediateDirectories: true)
            try conf.write(toFile: dir + "/marfafs.conf", atomically: true, encoding: .utf8)
            let main = """
                daemon off; user root; worker_processes 1; pid \(dir)/nginx.pid; error_log \(dir)/error.log;
                events { worker_connections 512; }
                http {
                  access_log off;
                  client_body_temp_path \(dir)/tmp/body; proxy_temp_path \(dir)/tmp/proxy; fastcgi_temp_path \(dir)/tmp/fcgi;
                  uwsgi_temp_path \(dir)/tmp/uwsgi; scgi_temp_path \(dir)/tmp/scgi;
                  include \(dir)/marfafs.conf;
                }
                """
            try main.write(toFile: dir + "/nginx.conf", atomically: true, encoding: .utf8)
            guard let p = Shell.spawn(["/usr/sbin/nginx", "-p", dir, "-c", dir + "/nginx.conf"], stderr: dir + "/stderr") else {
                throw HarnessError("nginx did not start")
            }
            pid = p
            base = "http://127.0.0.1:\(listen)"
            guard MountHarness.eventually(timeout: 10, { Shell.run(["/usr/bin/curl", "-s", "-o", "/dev/null", base + "/items"]).status == 0 }) else {
                throw HarnessError("nginx is not answering: \((try? String(contentsOfFile: dir + "/error.log", encoding: .utf8)) ?? "")")
            }
        }
        deinit { kill(pid, SIGQUIT); var st: Int32 = 0; waitpid(pid, &st, 0) }
    }

    @Test func pg_twoProcessesBehindNginxServeOneStreamAndTheStreamIsNotBuffered() throws {
        let s1 = try ServerHarness(postgres: true)
        let key = try s1.bootstrap()
        let s2 = try ServerHarness(db: s1.db)
        let proxy = try Proxy(s1, s2, dir: s1.root + "/nginx")
        // The harness speaks to nginx from here on.
        let front = try ServerHarness(address: proxy.base)
        let tap = try front.events(key: key)
        defer { tap.close() }
        #expect(tap.wait { !$0.isEmpty }, "the stream's first bytes come through at once: \(tap.text)")
        var created: [String] = []
        for i in 0..<40 {
            // Through nginx (either process), and straight to each process.
            let via = [front, s1, s2][i % 3]
            let r = via.call("POST", "/items", key: key, body: #"{"type":"core.note","properties":{"title":"n\#(i)"}}"#)
            #expect(r.status == 201)
            if let id = r.item["id"]?.stringValue { created.append(id) }
            // Each event is passed on by itself, before the next write.
            #expect(tap.wait(timeout: 10) { $0.filter { $0.event == "item.created" }.count == i + 1 }, "event \(i) came through alone")
        }
        #expect(tap.events.compactMap { $0.json["id"]?.stringValue } == created)
        #expect(PostgresServerTests.ids(tap.events) == Array(1...40))
        // An upload goes through unbuffered and a range comes back.
        let bytes = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let up = front.call("POST", "/blobs", key: key, data: bytes, contentType: "application/octet-stream")
        #expect(up.status == 201, "\(up.body)")
        let hash = try #require(up.json["hash"]?.stringValue)
        let part = front.call("GET", "/blobs/\(hash)", key: key, headers: ["Range": "bytes=1048576-1048585"])
        #expect(part.status == 206 && part.headers["content-range"] == "bytes 1048576-1048585/\(bytes.count)", "\(part.headers)")
        // One process gone: nginx sends requests to the other.
        s2.kill9()
        for _ in 0..<4 { #expect(front.call("GET", "/items?limit=1", key: key).status == 200) }
    }
}
