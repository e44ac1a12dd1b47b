import Foundation
import MarfaTestSupport
import Testing

/// `history/` (FS-33): every earlier version of an item, read-only, restorable by copying.
extension MountTests {
    /// Saves a note's new text and waits until the store has it (a read of the status settles).
    static func save(_ m: MountHarness, _ path: String, _ text: String) {
        #expect(m.sh("printf '%s\\n' '\(text)' > '\(path)' && cat .marfafs/status > /dev/null").status == 0)
    }

    @Test func FS33_historyKeepsEachEarlierVersionExactlyAndACopyRestoresOne() throws {
        try MountHarness.with { m in
            for i in 1...10 { Self.save(m, "vault/note.md", "v\(i)") }
            let dir = "history/core.note/note.md"
            let names = m.sh("ls \(dir)").out.split(separator: "\n").map(String.init)
            guard names.count == 9 else { Issue.record("v1 … v9 (v10 is the note itself): \(names)"); return }
            #expect(names.allSatisfy { $0.hasSuffix("Z.md") && $0.contains("T") && !$0.contains(":") }, "\(names)")
            // Names sort as times do: oldest first, each version's bytes exact.
            #expect(names.map { m.sh("cat '\(dir)/\($0)'").out } == (1...9).map { "v\($0)" })
            #expect(names.allSatisfy { m.sh("getfattr --only-values -n user.marfa.made_by '\(dir)/\($0)'").out.hasPrefix("local: ") })
            #expect(m.sh("stat -c '%a %s' '\(dir)/\(names[0])'").out == "444 3")
            // grep -r and find over the mount do not walk history/ (a symlink, as vault/ is).
            #expect(m.sh("readlink history").out == ".marfafs/history")
            #expect(!m.sh("grep -rl v3 . ; true").out.contains("history"))
            #expect(m.sh("find . -name '*Z.md' | wc -l").out == "0")
            // Read-only.
            #expect(m.sh("{ echo x > '\(dir)/\(names[0])'; } 2>&1").out.contains("Read-only file system"))
            #expect(m.sh("rm -f '\(dir)/\(names[0])' 2>&1; touch '\(dir)/new' 2>&1; mkdir '\(dir)/d' 2>&1").out.components(separatedBy: "Read-only file system").count == 4)
            #expect(m.sh("cat '\(dir)/\(names[0])'").out == "v1")
            // Restoring is a copy over the note: a new version, nothing rewritten.
            #expect(m.sh("cp '\(dir)/\(names[2])' vault/note.md && cat .marfafs/status > /dev/null && cat vault/note.md").out == "v3")
            let after = m.sh("ls \(dir)").out.split(separator: "\n").map(String.init)
            #expect(after.count == 10 && Array(after.prefix(9)) == names, "\(after)")
            #expect(m.sh("cat '\(dir)/\(after.last ?? "")'").out == "v10", "the text the restore replaced")
        }
    }

    @Test func FS33_fileVersionsKeepTheirBytesAndRetentionAndPurgingBoundTheHistory() throws {
        try MountHarness.with { m in
            // A file's versions are its earlier blobs, byte for byte; the newest five are kept.
            // (Each made an hour ago: bytes replaced within seconds are a file still being written.)
            for i in 1...7 {
                #expect(m.sh("head -c 300000 /dev/urandom > ../f\(i).bin && cp ../f\(i).bin types/core.file/f.bin && touch -d '1 hour ago' types/core.file/f.bin && cat .marfafs/status > /dev/null").status == 0)
            }
            #expect(m.sh("head -c 300000 /dev/urandom > types/core.file/young.bin && cat .marfafs/status > /dev/null && head -c 300 /dev/urandom > types/core.file/young.bin && cat .marfafs/status > /dev/null && ls history/core.file/young.bin | wc -l").out == "0",
                    "bytes that lasted a moment are no version")
            let sums = m.sh("cat history/core.file/f.bin/* | sha256sum; cat ../f2.bin ../f3.bin ../f4.bin ../f5.bin ../f6.bin | sha256sum").out.split(separator: "\n")
            #expect(sums.count == 2 && sums[0] == sums[1], "f2 … f6, in order, exact")
            #expect(m.sql("SELECT count(*) FROM sqlar WHERE sz = 300000") == "6", "f1's blob and young.bin's first went")
            // At most 50 versions of an item are kept.
            for i in 1...56 { Self.save(m, "vault/busy.md", "b\(i)") }
            let kept = m.sh("ls history/core.note/busy.md").out.split(separator: "\n").map(String.init)
            #expect(kept.count == 50, "\(kept.count)")
            #expect(m.sh("cat 'history/core.note/busy.md/\(kept[0])'").out == "b6", "the oldest go first")
            // Purging an item purges its history (and the blobs only it named).
            let id = m.sh("getfattr --only-values -n user.marfa.id types/core.file/f.bin").out
            #expect(m.sh("rm types/core.file/f.bin && \(MountHarness.binary) trash empty .").status == 0)
            #expect(m.sql("SELECT count(*) FROM versions WHERE item_id = '\(id)'") == "0")
            #expect(m.sql("SELECT count(*) FROM sqlar WHERE sz = 300000") == "0", "no blob of it is left")
        }
    }
}

extension HistorySyncTests {
    /// A version made on another mount is in the history, and says who made it.
    @Test func FS33_theHistoryHasTheVersionsOtherMountsMade() throws {
        try withPair { p in
            let (a, b) = (p.a, p.b)
            #expect(live(a) && live(b))
            #expect(a.sh("printf 'by a\\n' > vault/shared.md").status == 0)
            #expect(MountHarness.eventually { cat(b, "vault/shared.md") == "by a\n" })
            #expect(b.sh("printf 'by b\\n' > vault/shared.md").status == 0)
            #expect(MountHarness.eventually { cat(a, "vault/shared.md") == "by b\n" })
            // A change that builds on what the mount shows (a blind overwrite of the remote edit
            // would be a stale save, kept as a conflicted copy: FS-29).
            #expect(a.sh("printf 'and a\\n' >> vault/shared.md && cat .marfafs/status > /dev/null").status == 0)
            let dir = "history/core.note/shared.md"
            let names = a.sh("ls \(dir)").out.split(separator: "\n").map(String.init)
            #expect(names.map { a.sh("cat '\(dir)/\($0)'").out } == ["by a", "by b"], "\(names)")
            #expect(cat(a, "vault/shared.md") == "by b\nand a\n")
            #expect(names.map { a.sh("getfattr --only-values -n user.marfa.made_by '\(dir)/\($0)'").out } == ["local: dev-a", "remote"])
        }
    }
}

extension HistorySyncTests {
    /// A mount that was not there when versions were made shows the server's (`GET
    /// /items/{id}/versions`, asked when the history is listed), each once, exact.
    @Test func FS33_theHistoryShowsTheServersVersionsAMountNeverHad() throws {
        try withPair { p in
            let a = p.a
            #expect(live(a))
            for i in 1...4 {
                #expect(a.sh("printf 'draft \(i)\\n' >> vault/essay.md && cat .marfafs/flush > /dev/null").status == 0)
            }
            let c = try MountHarness()
            defer { c.unmount(); try? FileManager.default.removeItem(atPath: c.root) }
            c.mountOptions = ["--server", p.server.base, "--key-file", p.server.root + "/key", "--device", "dev-c"]
            try c.mount()
            #expect(c.sh("cat vault/essay.md").out == "draft 1\ndraft 2\ndraft 3\ndraft 4")
            let dir = "history/core.note/essay.md"
            let names = c.sh("ls \(dir)").out.split(separator: "\n").map(String.init)
            #expect(names.map { c.sh("cat '\(dir)/\($0)'").out } == ["draft 1", "draft 1\ndraft 2", "draft 1\ndraft 2\ndraft 3"], "\(names)")
            #expect(names.allSatisfy { c.sh("getfattr --only-values -n user.marfa.made_by '\(dir)/\($0)'").out == "server" })
            // A's own history has the same texts, made there.
            #expect(a.sh("cat history/core.note/essay.md/*").out == "draft 1\ndraft 1\ndraft 2\ndraft 1\ndraft 2\ndraft 3")
        }
    }
}

extension HistorySyncTests {
    /// Edits of different lines made offline on two mounts merge; the history keeps each side,
    /// the text they started from and the merge, each exact, the merge marked as one.
    @Test func FS33_aMergeKeepsBothSidesInTheHistory() throws {
        try withPair { p in
            let (a, b, s) = (p.a, p.b, p.server)
            #expect(live(a) && live(b))
            #expect(a.sh("printf 'l1\\nl2\\nl3\\n' > vault/m.md && printf 'same\\n' > vault/c.md").status == 0)
            #expect(MountHarness.eventually { cat(b, "vault/m.md") == "l1\nl2\nl3\n" && cat(b, "vault/c.md") == "same\n" })
            #expect(s.stop() == 0)
            #expect(a.sh("printf 'L1 by a\\nl2\\nl3\\n' > vault/m.md && printf 'alpha\\n' > vault/c.md").status == 0)
            #expect(b.sh("printf 'l1\\nl2\\nL3 by b\\n' > vault/m.md && printf 'beta\\n' > vault/c.md").status == 0)
            try s.start()
            let merged = "L1 by a\nl2\nL3 by b\n"
            #expect(MountHarness.eventually(timeout: 30) { cat(a, "vault/m.md") == merged && cat(b, "vault/m.md") == merged },
                    "\(cat(a, "vault/m.md"))|\(cat(b, "vault/m.md"))")
            for m in [a, b] { #expect(m.sh("printf 'end\\n' >> vault/m.md && cat .marfafs/flush > /dev/null").status == 0) }
            func versions(_ m: MountHarness) -> [(text: String, by: String)] {
                let dir = "history/core.note/m.md"
                return m.sh("ls \(dir)").out.split(separator: "\n").map { n in
                    (m.sh("cat '\(dir)/\(n)'").out, m.sh("getfattr --only-values -n user.marfa.made_by '\(dir)/\(n)'").out)
                }
            }
            let all = versions(a) + versions(b)
            let texts = Set(all.map(\.text))
            for t in ["l1\nl2\nl3", "L1 by a\nl2\nl3", "l1\nl2\nL3 by b", "L1 by a\nl2\nL3 by b"] {
                #expect(texts.contains(t), "\(t) in \(all)")
            }
            #expect(all.contains { $0.text == "L1 by a\nl2\nL3 by b" && $0.by == "merge" }, "\(all)")
            // The same line changed on both: one side's text goes to a conflicted copy; the
            // note's history on that mount still has its own edit, and the copy is a file of its own.
            #expect(MountHarness.eventually(timeout: 30) { a.sh("ls vault | grep -c 'conflicted copy'").out == "1" && b.sh("ls vault | grep -c 'conflicted copy'").out == "1" })
            let cHistory = Set(["history/core.note/c.md"].flatMap { d in [a, b].flatMap { m in
                m.sh("ls \(d)").out.split(separator: "\n").map { m.sh("cat '\(d)/\($0)'").out } } })
            #expect(cHistory.contains("same") && (cHistory.contains("alpha") || cHistory.contains("beta")), "\(cHistory)")
            let now = Set([a, b].flatMap { m in [m.sh("cat vault/c.md").out, m.sh("cat vault/*conflicted*").out] })
            #expect(now == ["alpha", "beta"], "both texts are files now: \(now)")
        }
    }
}

/// History across two mounts on one server (SQLite: the PostgreSQL pass of scripts/test runs
/// `SyncTwoMountsTests`, about the backend, not these).
@Suite(.serialized) struct HistorySyncTests {
    func withPair(_ body: (MountPair) throws -> Void) throws { try MountPair.with(body) }
    func live(_ m: MountHarness) -> Bool { MountHarness.eventually { m.syncStatus["stream"] == .string("live") } }
    func cat(_ m: MountHarness, _ path: String) -> String { (try? String(contentsOfFile: m.path(path), encoding: .utf8)) ?? "" }
}
