import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// Saves after a remote edit, as tools make them, on two mounts of one server: the time a file
/// shows, a program that writes a file anew over a remote edit, and a save that changes nothing.
extension SyncTwoMountsTests {
    /// FS-32: a file given an old time (`touch -d`, an import) and then edited shows the edit's
    /// time on both mounts, and the editing mount keeps it once the server answers: the old time
    /// the server held from before never comes back as the time of the new bytes.
    @Test func FS32_anEditAfterAnOldTimeShowsTheEditsTimeOnBothMounts() throws {
        try withPair { p in
            let (a, b) = (p.a, p.b)
            #expect(a.sh("printf 'v1\\n' > vault/t.md && touch -d '2020-01-02 03:04:05' vault/t.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { b.sh("stat -c %Y vault/t.md").out == a.sh("stat -c %Y vault/t.md").out && cat(b, "vault/t.md") == "v1\n" })
            #expect(b.sh("stat -c %y vault/t.md").out.hasPrefix("2020-01-02"), "\(b.sh("stat -c %y vault/t.md").out)")
            let before = Int(Date().timeIntervalSince1970)
            #expect(b.sh("printf 'v2\\n' >> vault/t.md").status == 0)
            let written = b.sh("stat -c %Y vault/t.md").out
            #expect((Int(written) ?? 0) >= before, "\(written)")
            #expect(MountHarness.eventually(timeout: 20) { cat(a, "vault/t.md") == "v1\nv2\n" && b.sh("cat .marfafs/flush").out.hasPrefix("ok") })
            // Both show the edit's time, the editing mount after the server's answer too.
            #expect(MountHarness.eventually(timeout: 10) { a.sh("stat -c %Y vault/t.md").out == written }, "\(a.sh("stat -c %y vault/t.md").out)")
            usleep(1_500_000)
            #expect(b.sh("stat -c %Y vault/t.md").out == written, "\(b.sh("stat -c %y vault/t.md").out)")
            #expect(a.sh("stat -c %Y vault/t.md").out == written)
        }
    }

    /// FS-29: `git checkout` writes a file anew (unlink, then create): its bytes are what the file
    /// becomes, also over a remote edit it replaces on purpose; they are not merged back to the
    /// remote edit as a stale save would be.
    @Test func FS29_aFileWrittenAnewOverARemoteEditKeepsItsBytes() throws {
        try withPair { p in
            let (a, b) = (p.a, p.b)
            #expect(a.sh("printf 'one\\nshared\\n' > vault/g.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { cat(b, "vault/g.md") == "one\nshared\n" })
            let git = "git -c user.email=t@t -c user.name=t"
            #expect(a.sh("cd vault && \(git) init -q && \(git) add -A && \(git) commit -qm one").status == 0)
            #expect(b.sh("sed -i 's/one/two/' vault/g.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { cat(a, "vault/g.md") == "two\nshared\n" })
            #expect(a.sh("cd vault && \(git) commit -qam two && \(git) checkout -q HEAD~1").status == 0)
            // Settled (the in-place save's wait), the file is what git wrote, here and there.
            usleep(2_500_000)
            #expect(cat(a, "vault/g.md") == "one\nshared\n", "\(cat(a, "vault/g.md"))")
            #expect(a.sh("cd vault && git status --short").out.isEmpty, "\(a.sh("cd vault && git status --short").out)")
            #expect(MountHarness.eventually(timeout: 20) { cat(b, "vault/g.md") == "one\nshared\n" }, "\(cat(b, "vault/g.md"))")
        }
    }

    /// A remote edit that comes while a program writes the file (a save under way: the edit
    /// waits) is taken once that save settles, even when the save changed nothing and so has no
    /// answer from the server to bring it.
    @Test func FS19_aRemoteEditWaitingOnASaveThatChangedNothingIsTaken() throws {
        try withPair { p in
            let (a, b) = (p.a, p.b)
            #expect(a.sh("printf 'x\\n' > vault/h.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { cat(b, "vault/h.md") == "x\n" && a.sh("cat .marfafs/flush").out.hasPrefix("ok") })
            // A save in place on A (truncate, the same bytes again, the file held open a while:
            // it settles once quiet) while B saves by rename (sent at once).
            let writer = Process()
            writer.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            writer.arguments = ["-c", """
                import os, time
                fd = os.open('\(a.path("vault/h.md"))', os.O_RDWR); os.ftruncate(fd, 0)
                os.pwrite(fd, b'x\\n', 0); time.sleep(3)
                os.close(fd)
                """]
            try writer.run()
            usleep(200_000)
            #expect(b.sh("printf 'y\\n' > vault/.h.tmp && mv vault/.h.tmp vault/h.md").status == 0)
            writer.waitUntilExit()
            #expect(MountHarness.eventually(timeout: 15) { cat(a, "vault/h.md") == "y\n" }, "\(cat(a, "vault/h.md")) \(a.sh("tail -5 .marfafs/events").out)")
            usleep(1_000_000)
            #expect(cat(b, "vault/h.md") == "y\n" && cat(a, "vault/h.md") == "y\n")
        }
    }

    /// A file's bytes that this mount never fetched (a blob from the other mount, as Obsidian's
    /// `.obsidian/workspace.json`) are written over with `O_TRUNC` as on a disk: the old bytes are
    /// not needed, so the write never fails for want of them (it was EIO). An append needs them:
    /// they are fetched first (FS-11).
    @Test func FS28_aBlobNeverReadHereIsWrittenOverWithTruncate() throws {
        try withPair { p in
            let (a, b) = (p.a, p.b)
            #expect(a.sh("mkdir -p vault/.obsidian && printf '{\"a\":1}' > vault/.obsidian/workspace.json").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { b.sh("stat -c %s vault/.obsidian/workspace.json").out == "7" })
            let w = b.sh("printf '{\"b\":22}' > vault/.obsidian/workspace.json")
            #expect(w.status == 0, "\(w.stderr) \(b.daemonLog(last: 600))")
            #expect(cat(b, "vault/.obsidian/workspace.json") == "{\"b\":22}")
            #expect(MountHarness.eventually(timeout: 20) { cat(a, "vault/.obsidian/workspace.json") == "{\"b\":22}" }, "\(cat(a, "vault/.obsidian/workspace.json"))")
            // An append builds on the bytes: online, they are fetched first, as a read would.
            #expect(a.sh("printf 'line 1\\n' > vault/log.txt").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { b.sh("stat -c %s vault/log.txt").out == "7" })
            let appended = b.sh("printf 'line 2\\n' >> vault/log.txt")
            #expect(appended.status == 0, "\(appended.stderr)")
            #expect(cat(b, "vault/log.txt") == "line 1\nline 2\n")
            #expect(MountHarness.eventually(timeout: 20) { cat(a, "vault/log.txt") == "line 1\nline 2\n" })
        }
    }
}
