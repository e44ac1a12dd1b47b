import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// Two real mounts of one tenant on the real `marfafs serve` (filesystem.md §6, wire.md W-14..W-17):
/// what one does, the other shows, without a remount; offline edits on both converge; conflicts
/// keep every byte.
@Suite(.serialized) struct SyncTwoMountsTests {
    /// A server, and two mounts of the same tenant (devices `dev-a`, `dev-b`); everything unmounted after.
    func withPair(serverOptions: [String] = [], mountOptions: [String] = [], _ body: (MountPair) throws -> Void) throws {
        try MountPair.with(serverOptions: serverOptions, mountOptions: mountOptions, body)
    }

    func live(_ m: MountHarness) -> Bool { MountHarness.eventually { m.syncStatus["stream"] == .string("live") } }

    /// A file's exact bytes, read through the mount.
    func cat(_ m: MountHarness, _ path: String) -> String { (try? String(contentsOfFile: m.path(path), encoding: .utf8)) ?? "" }

    /// Every item file of a mount under `types/`, `archive/` and `trash/`: path → bytes.
    func files(_ m: MountHarness) -> [String: String] {
        var out: [String: String] = [:]
        for line in m.sh("find types archive trash -type f | sort").out.split(separator: "\n") {
            out[String(line)] = cat(m, String(line))
        }
        return out
    }

    @Test func FS19_everyKindOfChangeReachesTheOtherMountWithoutARemount() throws {
        try withPair { p in
            let (a, b) = (p.a, p.b)
            #expect(live(a) && live(b))
            // Create and edit; B reads the note once before the edit so its kernel caches the old bytes.
            #expect(a.sh("printf 'one\\ntwo\\n' > types/core.note/plan.md").status == 0)
            #expect(MountHarness.eventually { cat(b, "types/core.note/plan.md") == "one\ntwo\n" }, "\(b.sh("ls -R types; cat .marfafs/events").out)")
            #expect(a.sh("printf 'three\\n' >> types/core.note/plan.md").status == 0)
            #expect(MountHarness.eventually { cat(b, "types/core.note/plan.md") == "one\ntwo\nthree\n" }, "cat shows the new bytes (FS-19)")
            #expect(b.sh("stat -c %s types/core.note/plan.md").out == "14")
            // Rename: the old name goes from B's listing, the new one comes.
            #expect(a.sh("mv types/core.note/plan.md types/core.note/roadmap.md").status == 0)
            #expect(MountHarness.eventually { b.sh("ls types/core.note").out == "roadmap.md" }, "\(b.sh("ls types/core.note").out)")
            // Tags, xattrs (a property and another user.* attribute), an edge.
            #expect(a.sh("mkdir tags/work && ln -s ../../types/core.note/roadmap.md tags/work/").status == 0)
            #expect(a.sh("setfattr -n user.marfa.prop.rating -v 5 types/core.note/roadmap.md && setfattr -n user.color -v blue types/core.note/roadmap.md").status == 0)
            #expect(a.sh("printf 'x\\n' > types/core.note/other.md && mkdir -p links/core.note/roadmap.md/references && ln -s ../../../../types/core.note/other.md links/core.note/roadmap.md/references/").status == 0)
            #expect(MountHarness.eventually { b.sh("readlink tags/work/roadmap.md").out == "../../types/core.note/roadmap.md" })
            #expect(MountHarness.eventually { b.sh("getfattr --only-values -n user.color types/core.note/roadmap.md").out == "blue" })
            #expect(MountHarness.eventually { b.sh("getfattr --only-values -n user.marfa.prop.rating types/core.note/roadmap.md").out == "5" })
            #expect(MountHarness.eventually { b.sh("readlink links/core.note/roadmap.md/references/other.md").out == "../../../../types/core.note/other.md" })
            #expect(MountHarness.eventually { b.sh("ls backlinks/core.note/other.md/references").out == "roadmap.md" })
            // A file: B fetches its bytes on first read (FS-11).
            #expect(a.sh("head -c 100000 /dev/urandom > ../pic.bin && cp ../pic.bin types/core.file/pic.png").status == 0)
            #expect(MountHarness.eventually { b.sh("stat -c %s types/core.file/pic.png").out == "100000" })
            #expect(Shell.run(["cmp", a.root + "/pic.bin", b.path("types/core.file/pic.png")]).status == 0)
            // …and says so (FS-33): started with the item's path and size, completed.
            let fetched = b.sh("grep '\"blob.download' .marfafs/events").out.split(separator: "\n").compactMap { (try? JSONParser.parse(String($0)))?.objectValue }
            #expect(fetched.first?["event"] == .string("blob.download.started") && fetched.first?["path"] == .string("vault/pic.png")
                    && fetched.first?["total"] == .int(100_000), "\(fetched)")
            #expect(fetched.last?["event"] == .string("blob.download.completed") && fetched.last?["done"] == .int(100_000), "\(fetched)")
            // The other way: state changes, deletes, an edge removed, a tag removed, an xattr removed.
            #expect(b.sh("setfattr -n user.marfa.state -v archived types/core.note/other.md").status == 0)
            #expect(b.sh("rm types/core.file/pic.png && rm tags/work/roadmap.md && setfattr -x user.color types/core.note/roadmap.md").status == 0)
            #expect(MountHarness.eventually { a.sh("ls archive/core.note").out == "other.md" && a.sh("ls types/core.note").out == "roadmap.md" })
            #expect(MountHarness.eventually { a.sh("ls trash/core.file").out == "pic.png" && a.sh("ls types/core.file").out.isEmpty })
            #expect(MountHarness.eventually { a.sh("ls tags/work").out.isEmpty && a.sh("getfattr --only-values -n user.marfa.tags types/core.note/roadmap.md").out.isEmpty })
            #expect(MountHarness.eventually { a.sh("getfattr -n user.color types/core.note/roadmap.md").status != 0 })
            #expect(b.sh("rm links/core.note/roadmap.md/references/other.md").status == 0)
            #expect(MountHarness.eventually { a.sh("ls links/core.note/roadmap.md/references").out.isEmpty })
            // B's edit reaches A.
            #expect(b.sh("printf 'from b\\n' >> types/core.note/roadmap.md").status == 0)
            #expect(MountHarness.eventually { cat(a, "types/core.note/roadmap.md").hasSuffix("three\nfrom b\n") }, "\(cat(a, "types/core.note/roadmap.md"))")
            // Both end with the same files, and nothing was sent twice.
            #expect(a.sh("cat .marfafs/flush").out.hasPrefix("ok") && b.sh("cat .marfafs/flush").out.hasPrefix("ok"))
            #expect(MountHarness.eventually { files(a) == files(b) }, "\(files(a))\n\(files(b))")
            if case .array(let all)? = p.server.call("GET", "/items?state=any&limit=200", key: p.key).json["data"] {
                #expect(all.count == 3, "roadmap, other, pic: \(all.count)")
            }
        }
    }

    /// What a mount's sync engine says of itself, short enough to be shown whole with a failure:
    /// its state, and the last lines of its log about the stream and the queue.
    func engine(_ m: MountHarness) -> String {
        let status = m.syncStatus
        let state = ["stream", "connection", "last_error", "last_event_id", "applied", "sent", "queue_depth"]
            .map { "\($0)=\(status[$0].map { "\($0)" } ?? "-")" }.joined(separator: " ")
        let lines = m.daemonLog(last: 200_000).split(separator: "\n")
            .filter { $0.contains("stream") || $0.contains("failed") || $0.contains("error") || $0.contains("retrying") }
        return state + "\n" + lines.suffix(8).map { String($0.prefix(240)) }.joined(separator: "\n")
    }

    @Test func FS20_offlineEditsOnBothMountsConvergeMergeAndKeepEveryByte() throws {
        try withPair { p in
            let (a, b, s) = (p.a, p.b, p.server)
            #expect(live(a) && live(b))
            #expect(a.sh("printf 'l1\\nl2\\nl3\\nl4\\nl5\\n' > types/core.note/merge.md && printf 'same\\nline\\n' > types/core.note/clash.md").status == 0)
            #expect(MountHarness.eventually { cat(b, "types/core.note/merge.md") == "l1\nl2\nl3\nl4\nl5\n" && cat(b, "types/core.note/clash.md") == "same\nline\n" })
            #expect(s.stop() == 0)
            // Offline: different items on each side, different lines of one note, the same line of another.
            #expect(a.sh("printf 'only a\\n' > types/core.note/from-a.md").status == 0)
            #expect(b.sh("printf 'only b\\n' > types/core.note/from-b.md").status == 0)
            #expect(a.sh("printf 'L1 by a\\nl2\\nl3\\nl4\\nl5\\n' > types/core.note/merge.md").status == 0)
            #expect(b.sh("printf 'l1\\nl2\\nl3\\nl4\\nL5 by b\\n' > types/core.note/merge.md").status == 0)
            #expect(a.sh("printf 'alpha wrote this\\nline\\n' > types/core.note/clash.md").status == 0)
            #expect(b.sh("printf 'beta wrote that\\nline\\n' > types/core.note/clash.md").status == 0)
            #expect(a.sh("cat .marfafs/status").out.contains("\"queue_depth\":") && a.syncStatus["queue_depth"] != .int(0), "the writes wait in the queue")
            try s.start()
            #expect(a.sh("cat .marfafs/flush").out.hasPrefix("ok") && b.sh("cat .marfafs/flush").out.hasPrefix("ok"))
            let merged = "L1 by a\nl2\nl3\nl4\nL5 by b\n"
            #expect(MountHarness.eventually(timeout: 30) { cat(a, "types/core.note/merge.md") == merged && cat(b, "types/core.note/merge.md") == merged },
                    "edits of different lines merge: \(cat(a, "types/core.note/merge.md"))|\(cat(b, "types/core.note/merge.md"))\na: \(engine(a))\nb: \(engine(b))")
            // Exactly one conflicted copy, the same on both mounts and on the server.
            #expect(MountHarness.eventually(timeout: 30) { files(a) == files(b) && files(a).count == 5 }, "\(files(a).keys.sorted())\n\(files(b).keys.sorted())")
            let copies = files(a).keys.filter { $0.contains("conflicted copy") }
            #expect(copies.count == 1, "\(files(a).keys.sorted())")
            let copy = copies.first ?? ""
            #expect(copy.hasPrefix("types/core.note/clash (conflicted copy dev-") && copy.hasSuffix(".md"), "\(copy)")
            #expect(copy.range(of: #"\(conflicted copy dev-[ab] \d{4}-\d{2}-\d{2} \d{6}\)\.md$"#, options: .regularExpression) != nil, "\(copy)")
            #expect(a.sh("getfattr --only-values -n user.marfa.tags '\(copy)'").out == "conflicted-copy")
            #expect(cat(b, ".marfafs/conflicts") == "\(copy)\ttypes/core.note/clash.md\n", "\(b.sh("cat .marfafs/conflicts").out)")
            let listed = Shell.run([MountHarness.binary, "conflicts", a.mountpoint])
            #expect(listed.stdout == "\(copy)\ttypes/core.note/clash.md\n", "\(listed.stdout)\(listed.stderr)")
            let onServer = s.call("GET", "/items?tags=conflicted-copy", key: p.key).json["data"]?.arrayValue ?? []
            #expect(onServer.count == 1)
            // Every byte of both sides is still somewhere.
            let everything = files(a).values.joined(separator: "\n")
            for text in ["only a", "only b", "L1 by a", "L5 by b", "alpha wrote this", "beta wrote that"] {
                #expect(everything.contains(text), "\(text) is kept")
            }
            #expect(cat(a, "types/core.note/clash.md") == cat(b, "types/core.note/clash.md"))
            let events = a.sh("cat .marfafs/events").out + b.sh("cat .marfafs/events").out
            #expect(events.contains("\"event\":\"conflict.merged\"") && events.contains("\"event\":\"conflict.copied\""))
        }
    }

    @Test func W17_aServerKilledMidStreamIsResumedFromLastEventIDWithoutGapOrDuplicate() throws {
        try withPair { p in
            let (b, s) = (p.b, p.server)
            #expect(live(b))
            func note(_ n: Int) -> Bool {
                s.call("POST", "/items", key: p.key, body: #"{"type":"core.note","properties":{"title":"n\#(n)","body":"b\#(n)"}}"#).status == 201
            }
            for n in 0..<20 { #expect(note(n)) }
            #expect(MountHarness.eventually { b.sh("ls types/core.note | wc -l").out == "20" })
            s.kill9()
            #expect(MountHarness.eventually { b.syncStatus["stream"] != .string("live") })
            try s.start()
            for n in 20..<40 { #expect(note(n)) }
            #expect(MountHarness.eventually(timeout: 30) { b.sh("ls types/core.note | wc -l").out == "40" }, "\(b.sh("cat .marfafs/events").out)")
            let ids = b.sh("cat .marfafs/events").out.split(separator: "\n").compactMap { line -> Int? in
                let o = (try? JSONParser.parse(String(line)))?.objectValue
                guard o?["event"] == .string("remote.event") else { return nil }
                return o?["id"]?.stringValue.flatMap { Int($0) }
            }
            #expect(ids == Array(1...40), "each event once, in order: \(ids)")
            #expect(cat(b, "types/core.note/n33.md") == "b33")
        }
    }

    @Test func W17_pastTheRetentionTheMountSweepsAndConverges() throws {
        try withPair(serverOptions: ["--event-retention", "1s"]) { p in
            let (a, b, s) = (p.a, p.b, p.server)
            #expect(live(a) && live(b))
            #expect(a.sh("printf 'before\\n' > types/core.note/kept.md && printf 'x\\n' > types/core.note/target.md").status == 0)
            #expect(a.sh("mkdir -p links/core.note/kept.md/references && ln -s ../../../../types/core.note/target.md links/core.note/kept.md/references/").status == 0)
            #expect(MountHarness.eventually { b.sh("readlink links/core.note/kept.md/references/target.md").status == 0 })
            b.unmount()
            // While B is away: edits, a delete, an edge removed; then the log forgets them.
            #expect(a.sh("printf 'after\\n' > types/core.note/kept.md && printf 'new\\n' > types/core.note/new.md && rm links/core.note/kept.md/references/target.md && rm types/core.note/target.md").status == 0)
            #expect(a.sh("cat .marfafs/flush").out.hasPrefix("ok"))
            usleep(1_500_000)
            #expect(s.call("POST", "/items", key: p.key, body: #"{"type":"core.note","properties":{"title":"late","body":"late"}}"#).status == 201)
            try b.mount()
            #expect(MountHarness.eventually(timeout: 30) { b.sh("ls types/core.note").out == "kept.md\nlate.md\nnew.md" }, "\(b.sh("ls types/core.note; cat .marfafs/events").out)")
            #expect(cat(b, "types/core.note/kept.md") == "after\n")
            #expect(b.sh("ls trash/core.note").out == "target.md")
            #expect(b.sh("ls links/core.note/kept.md/references 2>/dev/null").out.isEmpty)
            let events = b.sh("cat .marfafs/events").out
            #expect(events.contains("\"event\":\"catchup_too_old\"") && events.contains("\"event\":\"sweep.done\""), "\(events)")
            #expect(live(b), "then live again")
            #expect(a.sh("printf 'live\\n' > types/core.note/kept.md").status == 0)
            #expect(MountHarness.eventually { cat(b, "types/core.note/kept.md") == "live\n" })
        }
    }

    /// `n.md` written as `base` on A and seen on B; then, with the server stopped, A writes
    /// `fromA` and B `fromB`; then the server is back.
    func editBothOffline(_ p: MountPair, base: String, fromA: String, fromB: String) throws {
        #expect(live(p.a) && live(p.b))
        try base.write(toFile: p.a.path("types/core.note/n.md"), atomically: false, encoding: .utf8)
        #expect(MountHarness.eventually { cat(p.b, "types/core.note/n.md") == base })
        #expect(p.server.stop() == 0)
        try fromA.write(toFile: p.a.path("types/core.note/n.md"), atomically: false, encoding: .utf8)
        try fromB.write(toFile: p.b.path("types/core.note/n.md"), atomically: false, encoding: .utf8)
        try p.server.start()
    }

    /// FS-20, FS-32: a note merged after a 409 shows the merge's time on both mounts, later than
    /// either save, and keeps it. (The merged update went without the file's time: the server's
    /// answer brought back the time it held, the other mount's save, and the merging mount's file
    /// went back in time after it showed the merge — vim, having reloaded it, refused to write
    /// over a "file changed since reading it" — while the other mount showed the new bytes with
    /// its own old save time.)
    @Test func FS20_FS32_aMergedNoteShowsTheMergesTimeOnBothMountsAndKeepsIt() throws {
        try withPair { p in
            let (a, b, s) = (p.a, p.b, p.server)
            let path = "vault/m/n.md"
            let mtime = { (m: MountHarness) in Int64(m.sh("stat -c %.9Y \(path) | tr -d .").out) ?? 0 }
            #expect(live(a) && live(b))
            #expect(a.sh("mkdir -p vault/m && printf 'l1\\nl2\\nl3\\n' > \(path)").status == 0)
            #expect(MountHarness.eventually { cat(b, path) == "l1\nl2\nl3\n" })
            #expect(s.stop() == 0)
            #expect(a.sh("printf 'A\\nl2\\nl3\\n' > \(path)").status == 0)
            usleep(20_000)
            #expect(b.sh("printf 'l1\\nl2\\nB\\n' > \(path)").status == 0)
            let saved = max(mtime(a), mtime(b))
            try s.start()
            #expect(a.sh("cat .marfafs/flush").out.hasPrefix("ok") && b.sh("cat .marfafs/flush").out.hasPrefix("ok"))
            #expect(MountHarness.eventually(timeout: 30) { cat(a, path) == "A\nl2\nB\n" && cat(b, path) == "A\nl2\nB\n" && mtime(a) == mtime(b) },
                    "\(cat(a, path))|\(cat(b, path)) \(mtime(a)) \(mtime(b))")
            let merged = mtime(a)
            #expect(merged > saved, "the merge's time \(merged) is later than both saves (\(saved))")
            // Nothing that comes after (the answer, its echo) moves it.
            #expect(a.sh("cat .marfafs/flush").out.hasPrefix("ok") && b.sh("cat .marfafs/flush").out.hasPrefix("ok"))
            usleep(1_500_000)
            #expect(mtime(a) == merged && mtime(b) == merged, "\(mtime(a)) \(mtime(b)) against \(merged)")
        }
    }

    @Test func FS20_keepBothAlwaysCopiesAndManualHoldsTheConflict() throws {
        try withPair(mountOptions: ["--conflict", "keep-both"]) { p in
            let (a, b) = (p.a, p.b)
            try editBothOffline(p, base: "l1\nl2\nl3\n", fromA: "A\nl2\nl3\n", fromB: "l1\nl2\nB\n")
            #expect(a.sh("cat .marfafs/flush").out.hasPrefix("ok") && b.sh("cat .marfafs/flush").out.hasPrefix("ok"))
            #expect(MountHarness.eventually(timeout: 30) { a.sh("ls types/core.note | wc -l").out == "2" && b.sh("ls types/core.note | wc -l").out == "2" },
                    "keep-both makes a copy even where a merge would work: \(a.sh("ls types/core.note").out)")
        }
        try withPair(mountOptions: ["--conflict", "manual"]) { p in
            let (a, b) = (p.a, p.b)
            try editBothOffline(p, base: "base\n", fromA: "from a\n", fromB: "from b\n")
            #expect(MountHarness.eventually(timeout: 30) {
                [a, b].contains { $0.sh("getfattr --only-values -n user.marfa.sync types/core.note/n.md").out == "conflicted" }
            })
            let held = try #require([a, b].first { $0.sh("getfattr --only-values -n user.marfa.sync types/core.note/n.md").out == "conflicted" })
            #expect(held.sh("cat .marfafs/conflicts").out.hasPrefix("held\ttypes/core.note/n.md\t409 version_conflict"), "\(held.sh("cat .marfafs/conflicts").out)")
            let mine = cat(held, "types/core.note/n.md")
            #expect(mine == "from a\n" || mine == "from b\n", "the local bytes stay")
            // The next save settles it: sent over the server's version.
            #expect(held.sh("printf 'resolved\\n' > types/core.note/n.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { cat(a, "types/core.note/n.md") == "resolved\n" && cat(b, "types/core.note/n.md") == "resolved\n" })
            // (The other mount may show it before the server's answer reaches this one.)
            #expect(MountHarness.eventually { held.sh("getfattr --only-values -n user.marfa.sync types/core.note/n.md").out == "synced" })
        }
    }
}
