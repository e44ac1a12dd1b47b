import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// The queue drained to the real `marfafs serve` (wire.md W-5; filesystem.md §6): a mount with
/// `--server` and `--key-file`, checked on the server over HTTP.
@Suite(.serialized) struct SyncDrainTests {
    /// The server, its admin key in a 0600 file, and the mount options that use them.
    func setUp(serverOptions: [String] = []) throws -> (ServerHarness, String, String, [String]) {
        let s = try ServerHarness(options: serverOptions)
        let (key, options) = try s.mountKey()
        return (s, key, s.root + "/key", options)
    }

    /// A mount whose server does not answer (stopped; the mount points at a closed port), with
    /// one note written, `vault/offline.md`, waiting in its queue.
    func withOfflineNote(_ body: (MountHarness) throws -> Void) throws {
        let (s, _, keyFile, _) = try setUp()
        _ = s.stop()
        try MountHarness.with(options: ["--server", "http://127.0.0.1:9", "--key-file", keyFile]) { m in
            #expect(m.sh("printf 'kept\\n' > vault/offline.md").status == 0)
            try body(m)
        }
    }

    func serverItem(_ s: ServerHarness, _ key: String, _ id: String) -> [String: JSONValue] {
        s.call("GET", "/items/\(id)", key: key).item
    }

    /// FS-18: `.marfafs/flush` waits for a server; one that does not answer must hold neither the
    /// reader nor the mount. The reader interrupted (its `timeout`), the read ends with it; the
    /// unmount that follows lets go of the store at once, and the next mount takes it. (The
    /// worker that served the read kept waiting for the queue to empty: the unmount's daemon
    /// never exited, and held the store until it was killed.)
    @Test func FS18_aFlushWaitingForAServerThatDoesNotAnswerEndsWithItsReaderAndNeverHoldsTheUnmount() throws {
        try withOfflineNote { m in
            let started = Date()
            let r = m.sh("timeout 2 cat .marfafs/flush")
            #expect(r.status != 0 && Date().timeIntervalSince(started) < 10, "\(r.status) \(r.out)")
            let unmounting = Date()
            m.unmount()
            #expect(Date().timeIntervalSince(unmounting) < 10, "the unmount took \(Date().timeIntervalSince(unmounting)) s")
            try m.mount()
            #expect(m.sh("cat vault/offline.md").out == "kept")
            #expect(m.sh("cat .marfafs/pending").out.contains("offline.md"))
        }
    }

    /// FS-18: a reader of `.marfafs/flush` killed while it waits lets the next one in. The kernel
    /// reads the file's first page as read-ahead, which no signal interrupts: the page stayed
    /// locked while the daemon waited for the queue, and the second `cat` hung uninterruptibly
    /// (state D, deaf to its `timeout`, the unmount busy) until the daemon was killed. The wait
    /// now ends when the thread that asked is gone.
    @Test func FS18_aFlushReaderKilledWhileItWaitsDoesNotHoldTheFileForTheNext() throws {
        try withOfflineNote { m in
            #expect(m.sh("timeout 2 cat .marfafs/flush").status == 124)
            for round in 1...2 {
                let reader = try #require(Shell.spawn(["/bin/cat", m.path(".marfafs/flush")]))
                usleep(1_000_000)
                var status: Int32 = 0
                #expect(waitpid(reader, &status, WNOHANG) == 0, "reader \(round) waits for the server")
                kill(reader, SIGKILL)
                let ended = MountHarness.eventually(timeout: 10) { waitpid(reader, &status, WNOHANG) == reader }
                #expect(ended, "reader \(round) killed, yet still there (\((try? String(contentsOfFile: "/proc/\(reader)/stat", encoding: .utf8)) ?? ""))")
                if !ended {
                    m.killDaemon()
                    _ = waitpid(reader, &status, 0)
                    return
                }
            }
            let r = m.sh("timeout 2 cat .marfafs/pending")
            #expect(r.status == 0 && r.out.contains("offline.md"), "\(r.status) \(r.out)")
        }
    }

    /// FS-18: while a read waits for a server that does not answer (`.marfafs/flush`), the mount
    /// answers every other program: the worker whose answer waits holds no other request back
    /// (the request loop's watcher takes the lead from it when a request waits).
    @Test func FS18_aReadWaitingForTheServerHoldsNoOtherRequestBack() throws {
        try withOfflineNote { m in
            let started = Date()
            // (`sh` runs its command after `cd mountpoint &&`: the reader goes to the background on a line of its own.)
            let meanwhile = m.sh("""
                :
                timeout 4 cat .marfafs/flush > /dev/null 2>&1 & w=$!; sleep 0.5
                for i in $(seq 1 20); do
                  timeout 2 ls vault > /dev/null 2>&1 || echo "ls $?"; timeout 2 cat vault/offline.md > /dev/null 2>&1 || echo "cat $?"
                  timeout 2 sh -c "echo $i > vault/n$i.md" 2>&1 || echo "write $?"
                done
                kill -0 $w 2>/dev/null && echo waiting; wait $w; echo "flush $?"
                """)
            #expect(meanwhile.out == "waiting\nflush 124" && Date().timeIntervalSince(started) < 10, "\(meanwhile.out)")
            #expect(m.sh("cat vault/n20.md").out == "20")
        }
    }

    @Test func W5_theServerFollowsTheMountCreatesEditsTagsEdgesAndDeletes() throws {
        let (s, key, _, options) = try setUp()
        try MountHarness.with(options: options) { m in
            #expect(MountHarness.eventually { m.syncStatus["connection"] == .string("online") }, "an idle mount checks the server at once")
            #expect(m.sh("printf 'first body\\n' > types/core.note/first.md && printf 'second\\n' > types/core.note/second.md").status == 0)
            let first = m.sh("getfattr --only-values -n user.marfa.id types/core.note/first.md").out
            let second = m.sh("getfattr --only-values -n user.marfa.id types/core.note/second.md").out
            #expect(MountHarness.eventually { serverItem(s, key, first)["properties"]?.objectValue?["body"] == .string("first body\n") },
                    "\(s.call("GET", "/items/\(first)", key: key).body)")
            #expect(serverItem(s, key, first)["id"] == .string(first), "the server keeps the id the mount minted (FS-22)")
            #expect(MountHarness.eventually { m.sh("getfattr --only-values -n user.marfa.sync types/core.note/first.md").out == "synced" })

            #expect(m.sh("printf 'more\\n' >> types/core.note/first.md").status == 0)
            #expect(MountHarness.eventually { serverItem(s, key, first)["properties"]?.objectValue?["body"] == .string("first body\nmore\n") })
            #expect(serverItem(s, key, first)["version"] == .int(2), "one update, sent once")

            #expect(m.sh("mkdir tags/reading && ln -s ../../types/core.note/first.md tags/reading/").status == 0)
            #expect(MountHarness.eventually { s.call("GET", "/items/\(first)", key: key).json["metadata"]?.objectValue?["tags"] == .array(["reading"]) })

            #expect(m.sh("mkdir -p links/core.note/second.md/references && ln -s ../../../../types/core.note/first.md links/core.note/second.md/references/").status == 0)
            #expect(MountHarness.eventually {
                if case .array(let a)? = s.call("GET", "/items/\(second)/edges", key: key).json["data"] {
                    return a.count == 1 && a[0].objectValue?["target_id"] == .string(first) && a[0].objectValue?["edge_type"] == .string("references")
                }
                return false
            })

            // A file: its blob is uploaded before the item that names it (W-13).
            #expect(m.sh("head -c 70000 /dev/urandom > /tmp/marfafs-blob-\(first) && cp /tmp/marfafs-blob-\(first) types/core.file/pic.png").status == 0)
            let pic = m.sh("getfattr --only-values -n user.marfa.id types/core.file/pic.png").out
            #expect(MountHarness.eventually { serverItem(s, key, pic)["properties"]?.objectValue?["blob_ref"]?.stringValue != nil }, "\(m.sh("cat .marfafs/pending").out)")
            let ref = serverItem(s, key, pic)["properties"]?.objectValue?["blob_ref"]?.stringValue ?? ""
            let fetched = s.root + "/pic"
            _ = Shell.run(["/usr/bin/curl", "-s", "-o", fetched, "-H", "Authorization: Bearer \(key)", s.base + "/blobs/" + ref])
            #expect(Shell.run(["cmp", fetched, "/tmp/marfafs-blob-\(first)"]).status == 0, "the server has the file's bytes")
            unlink("/tmp/marfafs-blob-\(first)")

            #expect(m.sh("rm types/core.note/second.md").status == 0)
            #expect(MountHarness.eventually { serverItem(s, key, second)["state"] == .string("trashed") })

            // `marfafs sync --wait` returns once all of it is on the server.
            let waited = Shell.run([MountHarness.binary, "sync", m.mountpoint, "--wait"])
            #expect(waited.status == 0 && waited.stdout == "ok: the queue is empty\n", "\(waited.stdout)\(waited.stderr)")
            #expect(m.syncStatus["queue_depth"] == .int(0))
            let st = m.syncStatus
            #expect(st["mode"] == .string("synced") && st["server"] == .string(s.base) && st["connection"] == .string("online"), "\(st)")
            if case .array(let all)? = s.call("GET", "/items?state=any", key: key).json["data"] { #expect(all.count == 3, "nothing created twice") }
            #expect(!m.sh("cat \(m.store).log").out.contains(key), "the key is never logged")
        }
    }

    @Test func W5_offlineTheQueueWaitsAndSendsOnceTheServerIsBack() throws {
        let (s, key, _, options) = try setUp()
        try MountHarness.with(options: options) { m in
            #expect(s.stop() == 0)
            #expect(m.sh("printf 'written offline\\n' > types/core.note/offline.md").status == 0)
            let id = m.sh("getfattr --only-values -n user.marfa.id types/core.note/offline.md").out
            #expect(MountHarness.eventually { m.sh("cat .marfafs/pending").out.contains("retrying") }, "the mutation was tried and kept")
            #expect(MountHarness.eventually {
                let st = m.syncStatus
                return st["connection"] == .string("offline") && st["last_error"]?.stringValue?.contains("network") == true
            }, "\(m.syncStatus)")
            // A flush blocks while the server is away and returns once the queue is sent.
            let flushed = s.root + "/flushed"
            let reader = try #require(Shell.spawn(["/bin/cat", m.path(".marfafs/flush")], stdout: flushed, stderr: flushed + ".err"))
            usleep(300_000)
            #expect((try? String(contentsOfFile: flushed, encoding: .utf8)) == "", "still waiting")
            try s.start()
            var st: Int32 = 0
            waitpid(reader, &st, 0)
            #expect((try? String(contentsOfFile: flushed, encoding: .utf8)) == "ok: the queue is empty\n")
            #expect(MountHarness.eventually(timeout: 30) { serverItem(s, key, id)["properties"]?.objectValue?["body"] == .string("written offline\n") })
            #expect(MountHarness.eventually { m.syncStatus["connection"] == .string("online") && m.syncStatus["queue_depth"] == .int(0) })
        }
    }

    @Test func W18_aRevokedKeyPausesTheQueueAndANewKeyResumesIt() throws {
        let (s, key, file, options) = try setUp()
        try MountHarness.with(options: options) { m in
            let spare = try #require(s.call("POST", "/keys", key: key, body: #"{"label":"spare","role":"admin"}"#).json["key"]?.stringValue)
            guard case .array(let keys)? = s.call("GET", "/keys", key: spare).json["keys"],
                  let mine = keys.compactMap({ $0.objectValue }).first(where: { $0["label"] == .string("admin") })?["id"]?.stringValue else {
                Issue.record("keys"); return
            }
            #expect(s.call("DELETE", "/keys/\(mine)", key: spare).status == 200)
            #expect(m.sh("printf 'kept\\n' > types/core.note/kept.md").status == 0)
            let id = m.sh("getfattr --only-values -n user.marfa.id types/core.note/kept.md").out
            #expect(MountHarness.eventually { m.syncStatus["connection"] == .string("unauthorized") }, "\(m.syncStatus)")
            #expect(m.sh("cat types/core.note/kept.md").out == "kept", "local writes are kept")
            #expect(m.sh("printf 'kept too\\n' > types/core.note/also.md").status == 0)
            try (spare + "\n").write(toFile: file, atomically: true, encoding: .utf8)
            chmod(file, 0o600)
            #expect(m.sh("cat .marfafs/flush").out == "paused: 2 mutations wait for a valid key", "a paused queue does not block a flush")
            #expect(MountHarness.eventually(timeout: 20) { serverItem(s, spare, id)["properties"]?.objectValue?["body"] == .string("kept\n") })
            #expect(MountHarness.eventually { m.syncStatus["queue_depth"] == .int(0) && m.syncStatus["connection"] == .string("online") })
        }
    }

    @Test func W5_aKilledDaemonResendsUnderTheSameKeysAndNothingIsDuplicated() throws {
        let (s, key, _, options) = try setUp()
        try MountHarness.with(options: options) { m in
            #expect(MountHarness.eventually { m.syncStatus["connection"] == .string("online") })
            // The server takes connections but answers nothing: creates are on the wire (one
            // chain per item, so several at once), unanswered, when the daemon dies. The server
            // applies them afterwards, and the remounted daemon sends them again under the same keys.
            s.pause()
            for i in 0..<40 { m.sh("printf 'note \(i)\\n' > types/core.note/n\(i).md") }
            m.settle()
            #expect(MountHarness.eventually { (Int(m.sql("SELECT count(*) FROM mutations WHERE state = 'sending'")) ?? 0) >= 1 }, "killed mid-send")
            m.killDaemon()
            s.resume()
            let atKill = (s.call("GET", "/items?state=any&limit=200", key: key).json["data"]).map { if case .array(let a) = $0 { return a.count }; return -1 } ?? -1
            try m.mount()
            #expect(MountHarness.eventually(timeout: 30) { m.syncStatus["queue_depth"] == .int(0) }, "\(m.syncStatus)")
            guard case .array(let all)? = s.call("GET", "/items?state=any&limit=200", key: key).json["data"] else { Issue.record("list"); return }
            #expect(all.count == 40, "\(atKill) had reached the server when the daemon was killed")
            #expect(all.allSatisfy { $0.objectValue?["version"] == .int(1) }, "each create applied once")
            // unmount --wait sends what is left first.
            #expect(m.sh("printf 'last\\n' > types/core.note/last.md").status == 0)
            let last = m.sh("getfattr --only-values -n user.marfa.id types/core.note/last.md").out
            #expect(Shell.run([MountHarness.binary, "unmount", m.mountpoint, "--wait"]).status == 0)
            #expect(serverItem(s, key, last)["properties"]?.objectValue?["body"] == .string("last\n"))
        }
    }

    @Test func FS18_resyncReseedsTheStoreFromTheServerAndKeepsPendingChanges() throws {
        let (s, key, _, options) = try setUp()
        let m = try MountHarness()
        m.mountOptions = options
        defer { m.unmount(); try? FileManager.default.removeItem(atPath: m.root) }
        try m.mount()
        #expect(m.sh("printf 'server text\\n' > types/core.note/kept.md && printf 'base\\n' > types/core.note/mine.md").status == 0)
        #expect(m.sh("cat .marfafs/flush").out.hasPrefix("ok"))
        let kept = m.sh("getfattr --only-values -n user.marfa.id types/core.note/kept.md").out
        #expect(s.stop() == 0)
        #expect(m.sh("printf 'local edit\\n' > types/core.note/mine.md").status == 0)
        m.unmount()
        // The local copy of `kept` goes astray (same version, other bytes); `mine` has an unsent edit.
        let astray = Shell.run(["/usr/bin/sqlite3", m.store, "UPDATE items SET properties = json_set(properties, '$.body', 'astray'), raw = NULL, raw_head = NULL WHERE id = '\(kept)'; SELECT changes();"])
        #expect(astray.stdout == "1\n", "\(astray.stdout)\(astray.stderr)")
        let r = Shell.run([MountHarness.binary, "resync", "--store", m.store])
        #expect(r.status == 0 && r.stdout.contains("1 queued mutations are kept"), "\(r.stdout)\(r.stderr)")
        try s.start()
        try m.mount()
        #expect(MountHarness.eventually { m.sh("cat types/core.note/kept.md").out == "server text" }, "the server's state is taken")
        #expect(m.sh("cat types/core.note/mine.md").out == "local edit", "the pending change is kept")
        #expect(m.sh("cat .marfafs/flush").out.hasPrefix("ok"))
        #expect(MountHarness.eventually { serverItem(s, key, m.sh("getfattr --only-values -n user.marfa.id types/core.note/mine.md").out)["properties"]?.objectValue?["body"] == .string("local edit\n") })
        let busy = Shell.run([MountHarness.binary, "resync", "--store", m.store])
        #expect(busy.status == 3 && busy.stderr.contains("in use"), "a mounted store is refused: \(busy.stderr)")
    }

    @Test func W18_aKeyTheServerRefusesShowsAtOnceOnAnIdleMount() throws {
        let (s, _, file, options) = try setUp()
        try ("marfa_k1_" + String(repeating: "0", count: 48) + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o600)
        try MountHarness.with(options: options) { m in
            #expect(MountHarness.eventually { m.syncStatus["connection"] == .string("unauthorized") }, "\(m.syncStatus)")
            #expect(m.sh("printf 'x\\n' > types/core.note/x.md").status == 0, "the mount works on")
        }
        _ = s
    }

    @Test func W2_aBadServerOrKeyIsRefusedBeforeMounting() throws {
        let (s, _, file, _) = try setUp()
        let m = try MountHarness()
        defer { m.unmount() }
        m.mountOptions = ["--server", "ftp://nowhere", "--key-file", file]
        #expect(throws: HarnessError.self) { try m.mount() }
        chmod(file, 0o644)
        m.mountOptions = ["--server", s.base, "--key-file", file]
        #expect(throws: HarnessError.self) { try m.mount() }
        m.mountOptions = ["--server", s.base]
        #expect(throws: HarnessError.self) { try m.mount() }
    }
}

/// `.marfafs/pending` as people read it (FS-33), through a proxy on loopback in front of the real
/// server that the test tells to hold, refuse with 503 or with 400 what the mount sends.
extension SyncDrainTests {
    @Test func FS33_pendingShowsEachChangesPathKindAgeAndState() throws {
        let (s, key, file, _) = try setUp()
        let proxy = try FaultProxy(in: s)
        func mode(_ m: String) { proxy.mode(m) }
        try MountHarness.with(options: ["--server", proxy.url, "--key-file", file]) { m in
            func line(_ path: String) -> String { m.sh("cat .marfafs/pending").stdout.split(separator: "\n").map(String.init).first { $0.hasPrefix(path + "\t") } ?? "" }
            // Held by the server: in flight.
            mode("hang")
            #expect(m.sh("mkdir -p vault/notes && printf 'first\\n' > vault/notes/a.md").status == 0)
            #expect(MountHarness.eventually { line("vault/notes/a.md").hasSuffix("\tin-flight") }, "\(m.sh("cat .marfafs/pending").out)")
            let fields = line("vault/notes/a.md").split(separator: "\t").map(String.init)
            #expect(fields.count == 4 && fields[1] == "create" && fields[2].hasSuffix("s"), "\(fields)")
            // Refused with 503: retried, with the reason.
            mode("503")
            #expect(MountHarness.eventually { line("vault/notes/a.md").contains("\tretrying ") && line("vault/notes/a.md").contains("503") },
                    "\(m.sh("cat .marfafs/pending").out)")
            // The server stopped: still retrying, now with the network's reason.
            mode("pass")
            #expect(s.stop() == 0)
            #expect(MountHarness.eventually(timeout: 20) { !line("vault/notes/a.md").contains("503") && line("vault/notes/a.md").contains("\tretrying ") },
                    "\(m.sh("cat .marfafs/pending").out)")
            try s.start()
            #expect(MountHarness.eventually(timeout: 30) { m.sh("cat .marfafs/pending").out.isEmpty }, "sent once the server is back")
            // Refused for good (400): kept, listed as rejected, counted, bytes intact.
            mode("400")
            #expect(m.sh("printf 'second\\n' > vault/notes/b.md").status == 0)
            #expect(MountHarness.eventually { line("vault/notes/b.md").hasPrefix("vault/notes/b.md\tcreate\t") && line("vault/notes/b.md").contains("\trejected: ") },
                    "\(m.sh("cat .marfafs/pending").out)")
            #expect(m.sh("getfattr --only-values -n user.marfa.sync vault/notes/b.md").out == "rejected")
            #expect(m.sh("cat vault/notes/b.md").out == "second")
            #expect(m.syncStatus["rejected"] == .int(1))
            #expect(m.sh("cat .marfafs/conflicts").out.hasPrefix("rejected\ttypes/core.note/b.md\tcreate: "), "\(m.sh("cat .marfafs/conflicts").out)")
            #expect(m.sh("grep -c mutation.dropped .marfafs/events").out == "1")
            #expect(Shell.run([MountHarness.binary, "status", m.mountpoint]).out.contains("rejected: 1"))
            // For scripts.
            let json = Shell.run([MountHarness.binary, "pending", m.mountpoint, "--json"])
            let rows = (try? JSONParser.parse(json.stdout))?.arrayValue ?? []
            #expect(rows.count == 1, "\(json.stdout)\(json.stderr)")
            let row = rows.first?.objectValue ?? [:]
            #expect(row["path"] == .string("vault/notes/b.md") && row["kind"] == .string("create") && row["state"] == .string("rejected"), "\(row)")
            #expect(row["reason"]?.stringValue?.contains("400") == true || row["reason"]?.stringValue?.contains("validation") == true, "\(row)")
            _ = key
        }
    }
}

extension SyncDrainTests {
    /// A file larger than the server takes (413 on its bytes' upload): its create and its later
    /// changes are not sent for errors of their own (the server has no such item), each says the
    /// cause; the file's status keeps that first reason; `sync --wait` says the refusal stays
    /// local. The file keeps its bytes.
    @Test func FS10_W3_aFileTheServerRefusesKeepsItsFirstReason() throws {
        let (s, key, _, options) = try setUp(serverOptions: ["--max-blob-mib", "1"])
        try MountHarness.with(options: options) { m in
            #expect(m.sh("mkdir -p vault/media && head -c 2000000 /dev/urandom > vault/media/clip.mp4 && sha256sum < vault/media/clip.mp4 > ../clip.sha && touch -d 2020-01-01 vault/media/clip.mp4").status == 0)
            func lines() -> [String] { m.sh("cat .marfafs/pending").out.split(separator: "\n").map(String.init).filter { $0.hasPrefix("vault/media/clip.mp4\t") } }
            #expect(MountHarness.eventually(timeout: 30) { !lines().isEmpty && lines().allSatisfy { $0.contains("\trejected: ") } }, "\(lines())")
            let upload = lines().first { $0.contains("\tupload_blob\t") } ?? ""
            #expect(upload.contains("413"), "\(lines())")
            let rest = lines().filter { !$0.contains("\tupload_blob\t") }
            #expect(!rest.isEmpty && rest.allSatisfy { $0.contains("not sent: the server refused its bytes: ") && $0.contains("413") }, "\(lines())")
            let shown = Shell.run([MountHarness.binary, "status", m.mountpoint]).out
            #expect(shown.contains("vault/media/clip.mp4: ") && shown.contains("413") && !shown.contains("404"), "\(shown)")
            #expect(m.sh("getfattr --only-values -n user.marfa.sync vault/media/clip.mp4").out == "rejected")
            let waited = Shell.run([MountHarness.binary, "sync", m.mountpoint, "--wait"])
            #expect(waited.status == 0 && waited.stdout.hasPrefix("ok") && waited.stderr.contains("refused by the server stay local"), "\(waited.stdout) \(waited.stderr)")
            #expect(m.sh("sha256sum < vault/media/clip.mp4 | cmp - ../clip.sha").status == 0, "the file keeps its bytes")
            let onServer = (s.call("GET", "/items?limit=200", key: key).json["data"]?.arrayValue ?? []).compactMap { $0.objectValue?["properties"]?.objectValue?["filename"] }
            #expect(!onServer.contains(.string("clip.mp4")), "the server has no item for it: \(onServer)")
            // Removed: nothing is left to send or to list (the server never had it).
            #expect(m.sh("rm vault/media/clip.mp4").status == 0)
            #expect(MountHarness.eventually(timeout: 10) { lines().isEmpty && m.syncStatus["rejected"] == .int(0) }, "\(m.sh("cat .marfafs/pending").out)")
            let after = Shell.run([MountHarness.binary, "sync", m.mountpoint, "--wait"])
            #expect(after.status == 0 && after.stderr.isEmpty, "\(after.stdout) \(after.stderr)")
            #expect(!Shell.run([MountHarness.binary, "status", m.mountpoint]).out.contains("clip.mp4"))
        }
    }

    /// A 200 MiB file sent over a slow link (the proxy reads at 40 MiB/s): `blob.upload.started`,
    /// progress events with strictly increasing byte counts, `completed`; `.marfafs/transfers`
    /// and `marfafs status` show it meanwhile (FS-33).
    @Test func FS33_aLargeUploadReportsItsProgress() throws {
        let (s, key, file, _) = try setUp()
        // The first attempt is refused (503): the upload fails and starts again from its first byte.
        let proxy = try FaultProxy(in: s, mode: "503")
        try MountHarness.with(options: ["--server", proxy.url, "--key-file", file]) { m in
            #expect(m.sh("head -c \(200 << 20) /dev/urandom > vault/big.bin && sha256sum vault/big.bin | cut -d' ' -f1 > ../big.sha").status == 0)
            #expect(MountHarness.eventually(timeout: 30) { m.sh("grep -c blob.upload.failed .marfafs/events").out == "1" }, "\(m.sh("tail -3 .marfafs/events").out)")
            proxy.mode("throttle=\(40 << 20)")
            #expect(MountHarness.eventually(timeout: 30) { m.sh("cat .marfafs/transfers").out.hasPrefix("vault/big.bin\tupload\t") },
                    "\(m.sh("cat .marfafs/transfers; tail -5 .marfafs/events").out)")
            let shown = Shell.run([MountHarness.binary, "status", m.mountpoint]).out
            #expect(shown.contains("transfers: 1") && shown.contains("vault/big.bin  upload") && shown.contains("of 200.0 MiB"), "\(shown)")
            #expect(MountHarness.eventually(timeout: 120) { m.sh("grep -c blob.upload.completed .marfafs/events").out == "1" })
            let all = m.sh("grep '\"blob.upload' .marfafs/events").out.split(separator: "\n").compactMap { (try? JSONParser.parse(String($0)))?.objectValue }
            #expect(all.first?["event"] == .string("blob.upload.started") && all.first?["restarted"] == .bool(false))
            #expect(all.contains { $0["event"] == .string("blob.upload.failed") && $0["error"]?.stringValue?.isEmpty == false })
            // The attempt that went through: started again from the first byte, and says so.
            let last = all.lastIndex { $0["event"] == .string("blob.upload.started") } ?? 0
            let events = Array(all[last...])
            #expect(events.first?["restarted"] == .bool(true) && events.first?["path"] == .string("vault/big.bin")
                    && events.first?["total"] == .int(200 << 20), "\(events.first ?? [:])")
            let progress = events.filter { $0["event"] == .string("blob.upload.progress") }.compactMap { e -> Int64? in
                if case .int(let n)? = e["done"] { return n }; return nil
            }
            #expect(progress.count >= 4, "several progress events over about five seconds: \(progress)")
            #expect(zip(progress, progress.dropFirst()).allSatisfy { $0 < $1 }, "strictly increasing: \(progress)")
            #expect(events.last?["event"] == .string("blob.upload.completed") && events.last?["done"] == .int(200 << 20))
            #expect(m.sh("cat .marfafs/transfers").out.isEmpty, "nothing under way once it is sent")
            // The server has every byte.
            let id = m.sh("getfattr --only-values -n user.marfa.id vault/big.bin").out
            #expect(MountHarness.eventually(timeout: 60) { m.sh("cat .marfafs/flush").out.hasPrefix("ok") })
            let ref = s.call("GET", "/items/\(id)", key: key).item["properties"]?.objectValue?["blob_ref"]?.stringValue ?? ""
            #expect(ref == "sha256:" + m.sh("cat ../big.sha").out || ref.hasSuffix(m.sh("cat ../big.sha").out), "\(ref)")
        }
    }
}

/// The event stream can lag behind the answers to the mount's own changes: the echo of one change
/// may come after the next change was sent and answered. What such an echo says of the item is
/// older than what the mount holds, and must not undo it (W-15: `metadata.changed` carries the
/// item's tags, tier and state as they were when it was made, `item.deleted` no time at all):
/// two moves of a folder, an edit, a removal, and a removal undone from the trash, all answered
/// before any of their echoes is heard.
extension SyncDrainTests {
    @Test func W15_anEchoHeardAfterTheNextChangeWasAnsweredDoesNotUndoIt() throws {
        let (s, _, file, _) = try setUp()
        let proxy = try FaultProxy(in: s)
        try MountHarness.with(options: ["--server", proxy.url, "--key-file", file]) { m in
            func read(_ f: String) -> String { (try? String(contentsOfFile: f, encoding: .utf8)) ?? "" }
            func sent() -> Bool { m.syncStatus["queue_depth"] == .int(0) }
            #expect(m.sh("mkdir vault/n2 && printf 'a\\n' > vault/n2/a.md && printf 'b\\n' > vault/n2/b.md").status == 0)
            #expect(MountHarness.eventually { sent() && m.sql("SELECT count(*) FROM items WHERE sync = 'synced'") == "2" })
            let log = m.root + "/inotify.log", err = m.root + "/inotify.err"
            guard let pid = Shell.spawn(["inotifywait", "-m", "-r", "-e", "create,delete,modify,attrib,move,delete_self,move_self", "--format", "%e %w%f",
                                         m.path("vault/")], stdout: log, stderr: err) else {
                Issue.record("inotifywait did not start"); return
            }
            defer { Shell.killAndReap(pid) }
            #expect(MountHarness.eventually { read(err).contains("Watches established") })
            // Each change answered while the stream holds the echoes of the ones before.
            proxy.mode("hold-stream")
            #expect(m.sh("mv vault/n2 vault/n3").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { sent() })
            #expect(m.sh("mv vault/n3 vault/n4").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { sent() })
            #expect(m.sh("printf 'more\\n' >> vault/n4/a.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { sent() && m.sql("SELECT sync FROM items WHERE file_name = 'a.md'") == "synced" })
            #expect(m.sh("rm vault/n4/a.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { sent() })
            #expect(m.sh("rm vault/n4/b.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { sent() })
            #expect(m.sh("mv trash/core.note/b.md types/core.note/").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { sent() })
            let before = read(log)
            proxy.mode("pass")
            // Every echo heard: the last is the restore's.
            #expect(MountHarness.eventually(timeout: 20) { m.sh("grep -cE '\"name\":\"item.(state_changed|restored)\"' .marfafs/events").out == "1" }, "\(m.sh("tail -5 .marfafs/events").out)")
            sleep(1)
            #expect(m.sh("ls -A vault vault/n4").out == "vault:\nn4\n\nvault/n4:\nb.md", "\(m.sh("ls -AR vault").out)")
            #expect(m.sql("SELECT group_concat(state || ' ' || tag, ', ') FROM items JOIN tags ON item_id = id ORDER BY file_name") == "trashed folder:n4, active folder:n4",
                    "\(m.sql("SELECT file_name, state, tag FROM items JOIN tags ON item_id = id"))")
            let after = String(read(log).dropFirst(before.count))
            #expect(after == "", "the echoes changed nothing on the mount: \(after)")
        }
    }
}
