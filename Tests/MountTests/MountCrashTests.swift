import Foundation
import MarfaTestSupport
import Testing

/// FS-15 under fire: the daemon killed at random moments, and random I/O checked against a local file.
/// Part of the serialized mount suite: these tests kill daemons and load the machine, so they never
/// run beside the other mount tests.
extension MountTests {
    @Test func FS15_killDashNineLosesNothingThatWasClosed() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        let log = h.root + "/written.log"
        let writer = MountHarness.repoRoot + "/scripts/testing/writer.py"
        var rng = SystemRandomNumberGenerator()
        for round in 0..<50 {
            try h.mount()
            let logSize = (try? FileManager.default.attributesOfItem(atPath: log)[.size] as? Int) ?? 0
            guard let pid = Shell.spawn(["python3", writer, h.path("types/core.note"), log, String(round)]) else {
                Issue.record("cannot start the writer"); return
            }
            // Let the writer close at least one file in this round (a "done" line appended to the
            // log), then kill at a random moment.
            var waited = 0
            while waited < 500 && !Self.appended(to: log, since: logSize, contains: "done ") {
                usleep(10_000); waited += 1
            }
            usleep(UInt32.random(in: 0...150_000, using: &rng))
            h.killDaemon()
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
        try h.mount()
        // Every file whose last logged event is "done" (closed) has exactly its logged bytes; a file
        // still open at a kill ("open" last) may hold anything.
        var expected: [String: String] = [:], inFlight = Set<String>(), closes = 0
        for line in ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n") {
            let parts = line.split(separator: " ").map(String.init)
            if parts.count == 2, parts[0] == "open" { inFlight.insert(parts[1]); expected[parts[1]] = nil }
            if parts.count == 3, parts[0] == "done" { inFlight.remove(parts[1]); expected[parts[1]] = parts[2]; closes += 1 }
        }
        #expect(closes >= 50, "the writer closed files in every round (\(closes))")
        #expect(!expected.isEmpty)
        #expect(inFlight.count <= 50)
        var lost: [String] = []
        for (name, sha) in expected.sorted(by: { $0.key < $1.key }) {
            let got = h.sh("sha256sum 'types/core.note/\(name)' | cut -d' ' -f1").out
            #expect(got == sha, "\(name) lost its closed bytes")
            if got != sha { lost.append(name) }
        }
        if !lost.isEmpty {
            // Kept for a post-mortem: the store, its journal, the daemon's log and the writer's log.
            let keep = "/tmp/marfafs-fs15-\(getpid())-\(Int(Date().timeIntervalSince1970))"
            _ = Shell.run(["cp", "-ax", h.root, keep])
            Issue.record("lost \(lost); the store and logs are kept in \(keep)")
        }
        let creates = h.sql("SELECT count(*) FROM (SELECT item_id FROM mutations WHERE kind = 'create' GROUP BY item_id HAVING count(*) > 1)")
        #expect(creates == "0", "no item is created twice")
        #expect(h.sql("SELECT count(*) - count(DISTINCT idempotency_key) FROM mutations") == "0")
        let names = Set(h.sh("ls types/core.note").out.split(separator: "\n").map(String.init))
        #expect(names.isSuperset(of: Set(expected.keys)), "every closed file still exists")
        #expect(h.sql("SELECT count(*) FROM items WHERE sync = 'pending' AND id NOT IN (SELECT item_id FROM mutations)") == "0",
                "every pending item still has its queued mutation")
    }

    /// Whether the bytes appended to a file after `offset` contain `text`.
    static func appended(to path: String, since offset: Int, contains text: String) -> Bool {
        guard let f = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? f.close() }
        try? f.seek(toOffset: UInt64(offset))
        let tail = (try? f.readToEnd()) ?? Data()
        return tail.range(of: Data(text.utf8)) != nil
    }

    @Test func FS9_fsxRandomIOMatchesALocalFile() throws {
        try MountHarness.with { m in
            let r = Shell.run(["python3", MountHarness.repoRoot + "/scripts/testing/fsx.py", m.path("types/core.note/fsx.md"),
                               m.root + "/fsx-local.bin", "20261121", "10000"])
            #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
            #expect(r.out == "10000 operations, 0 mismatches")
        }
    }

    /// Folders made with `mkdir` are recorded before the request is answered, not when the settler
    /// writes their rows: killed right after, the mount has every one, empty ones too, and their
    /// rows once it writes.
    @Test func FS15_foldersMadeJustBeforeAKillAreThereAfter() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        #expect(h.sh("mkdir -p vault/a/b vault/c tags/project && printf n > vault/a/n.md").status == 0)
        h.killDaemon()
        try h.mount()
        #expect(h.sh("find vault/ tags/project -maxdepth 2 | sort").out == "tags/project\nvault/\nvault/a\nvault/a/b\nvault/a/n.md\nvault/c")
        #expect(MountHarness.eventually {
            h.sql("SELECT group_concat(tag, ' ') FROM (SELECT tag FROM local_tags ORDER BY tag)") == "folder:a folder:a/b folder:c project"
        }, "\(h.sql("SELECT group_concat(tag, ' ') FROM local_tags"))")
        // Removed, they stay removed across the next kill.
        #expect(h.sh("rmdir vault/a/b vault/c").status == 0)
        h.killDaemon()
        try h.mount()
        #expect(h.sh("find vault/ -mindepth 1 | sort").out == "vault/a\nvault/a/n.md")
    }

    /// Files removed with `rm` are recorded before the request is answered, not when a later write
    /// moves their rows to the trash (FS-4): killed right after, the mount has them in the trash,
    /// not back in their folder, and the store's rows say so once it writes.
    @Test func FS4_FS15_filesRemovedJustBeforeAKillStayRemoved() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        #expect(h.sh("mkdir -p vault/a && for i in $(seq 1 40); do printf 'n%s\\n' $i > vault/a/n$i.md; done && cat .marfafs/status > /dev/null").status == 0)
        #expect(h.sql("SELECT count(*) FROM items WHERE state = 'active' AND type = 'core.note'") == "40")
        #expect(h.sh("rm vault/a/n*.md && printf kept > vault/a/kept.md").status == 0)
        h.killDaemon()
        try h.mount()
        #expect(h.sh("ls vault/a").out == "kept.md")
        #expect(h.sh("ls trash/core.note | grep -c '^n[0-9]*\\.md$'").out == "40")
        #expect(MountHarness.eventually {
            h.sql("SELECT count(*) FROM items WHERE state = 'trashed' AND type = 'core.note'") == "40"
        }, "\(h.sql("SELECT state, count(*) FROM items GROUP BY state"))")
        // Restored from the trash (FS-4: a move to types/), one is back in its folder across the
        // next kill too.
        #expect(h.sh("mv trash/core.note/n7.md types/core.note/n7.md").status == 0)
        h.killDaemon()
        try h.mount()
        #expect(h.sh("ls vault/a | sort | tr '\\n' ' '").out == "kept.md n7.md")
        #expect(h.sh("cat vault/a/n7.md").out == "n7")
    }

    /// FS-15: an `fsync` syncs the store through SQLite's own handles. Syncing it through a
    /// descriptor of the daemon's own, closed after, dropped SQLite's lock on the database: the
    /// next program to open and close the store with `sqlite3` took itself for its last user and
    /// deleted the WAL the mount went on writing to, and a kill lost what was stored after.
    @Test func FS15_anotherProgramReadingTheStoreAfterAnFsyncLeavesTheMountsLogInPlace() throws {
        try MountHarness.with { h in try Self.readByAnotherProgramAfterAnFsync(h) }
    }

    static func readByAnotherProgramAfterAnFsync(_ h: MountHarness) throws {
        #expect(h.sh("printf 'a\\n' > vault/a.md").status == 0)
        h.settle()
        // An editor's save: the file, then its folder, synced.
        #expect(h.sh("python3 -c \"import os; [os.fsync(os.open(p, os.O_RDONLY)) for p in ('vault/a.md', 'vault')]\"").status == 0)
        // Another program's `sqlite3`, opened and closed: the backup marfafs(1) gives for a
        // mounted store, then a query.
        let copy = h.root + "/backup.sqlite"
        #expect(Shell.run(["/usr/bin/sqlite3", h.store, ".backup '\(copy)'"]).status == 0)
        #expect(Shell.run(["/usr/bin/sqlite3", copy, "SELECT count(*) FROM items WHERE file_name = 'a.md'"]).stdout == "1\n")
        #expect(Shell.run(["/usr/bin/sqlite3", h.store, "SELECT count(*) FROM items WHERE file_name = 'a.md'"]).stdout == "1\n")
        let pid = try #require(h.daemonPID)
        let fds = Shell.run(["/bin/sh", "-c", "ls -l /proc/\(pid)/fd | grep -c 'sqlite-wal (deleted)'"]).out
        #expect(fds == "0", "the mount's WAL was deleted under it")
        // What the mount stores after: a folder, a rename and an attribute (none of them in the
        // staging journal), and a new file.
        #expect(h.sh("mkdir vault/d && mv vault/a.md vault/c.md && setfattr -n user.note -v kept vault/c.md && printf 'b\\n' > vault/b.md").status == 0)
        h.settle()
        h.killDaemon()
        try h.mount()
        #expect(h.sh("ls vault | tr '\\n' ' '").out == "b.md c.md d", "what was stored after the backup is there after a kill")
        #expect(h.sh("cat vault/c.md vault/b.md; getfattr --only-values -n user.note vault/c.md").out == "a\nb\nkept")
    }
}
