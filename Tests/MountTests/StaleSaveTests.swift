import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// FS-24: an editor on mount B holds a note while an edit made on mount A reaches B; then the
/// editor saves its stale buffer. On the real server, with the save patterns editors use.
@Suite(.serialized) struct StaleSaveTests {
    typealias Pair = MountPair
    func withPair(_ body: (MountPair) throws -> Void) throws { try MountPair.with(body) }

    func cat(_ m: MountHarness, _ path: String) -> String { (try? String(contentsOfFile: m.path(path), encoding: .utf8)) ?? "" }

    /// How editors save: in place (nano: truncate and write), a temporary file renamed over the note
    /// (vim, emacs, `sed -i`), and `cp` over it.
    enum Pattern: String, CaseIterable { case inPlace, tempAndRename, cp }

    /// Saves `text` over `path` of mount `m` the way `p` does.
    func save(_ m: MountHarness, _ path: String, _ text: String, _ p: Pattern) {
        let buffer = m.root + "/buffer"
        try? text.write(toFile: buffer, atomically: false, encoding: .utf8)
        let dir = (path as NSString).deletingLastPathComponent
        let cmd: String
        switch p {
        case .inPlace: cmd = "cat '\(buffer)' > '\(path)'"
        case .tempAndRename: cmd = "cp '\(buffer)' '\(dir)/.tmp-save' && mv '\(dir)/.tmp-save' '\(path)'"
        case .cp: cmd = "cp '\(buffer)' '\(path)'"
        }
        #expect(m.sh(cmd).status == 0, "\(cmd)")
    }

    /// A note made on A, seen on B (B's editor buffer), then edited on A and seen on B.
    /// The note is made whole at once (a scratch file renamed to its name): a file made empty and
    /// written a moment later can reach B as two remote changes, and the bytes before the first
    /// (none) are then the base of a save by a program with no record of its own (FS-24).
    func setUp(_ p: Pair, _ name: String, original: String, remote: String) {
        let path = "types/core.note/\(name)"
        #expect(p.a.sh("printf '%s' '\(original)' > '\(path)~' && mv '\(path)~' \(path)").status == 0)
        #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path) == original }, "B sees the note")
        #expect(p.a.sh("printf '%s' '\(remote)' > \(path)").status == 0)
        #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path) == remote }, "B sees A's edit")
    }

    /// A note `<prefix>-<pattern>.md` made on A and seen on B, edited to `remote` on A, then saved
    /// by B's editor with `ours` (a buffer that may or may not hold A's edit); returns its path.
    func staleSave(_ p: Pair, _ prefix: String, _ pattern: Pattern, original: String, remote: String, ours: String) -> String {
        let name = "\(prefix)-\(pattern.rawValue).md"
        setUp(p, name, original: original, remote: remote)
        save(p.b, "types/core.note/" + name, ours, pattern)
        return "types/core.note/" + name
    }

    func serverBody(_ p: Pair, _ m: MountHarness, _ path: String) -> String? {
        let id = m.sh("getfattr --only-values -n user.marfa.id \(path)").out
        return p.server.call("GET", "/items/\(id)", key: p.key).item["properties"]?.objectValue?["body"]?.stringValue
    }

    @Test func FS24_aStaleSaveOfAnotherLineMergesEverywhere() throws {
        try withPair { p in
            for pattern in Pattern.allCases {
                // B's editor still holds the original and changes line 4.
                let path = staleSave(p, "merge", pattern, original: "l1\nl2\nl3\nl4\n", remote: "L1 from A\nl2\nl3\nl4\n", ours: "l1\nl2\nl3\nl4 from B\n")
                let merged = "L1 from A\nl2\nl3\nl4 from B\n"
                #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path) == merged }, "\(pattern): B shows \(cat(p.b, path))")
                #expect(MountHarness.eventually(timeout: 20) { cat(p.a, path) == merged }, "\(pattern): A shows \(cat(p.a, path))")
                #expect(MountHarness.eventually(timeout: 20) { serverBody(p, p.a, path) == merged }, "\(pattern): the server")
                #expect(p.b.sh("ls types/core.note | grep -c 'conflicted copy'").out == "0", "\(pattern): no copy for a clean merge")
            }
            #expect(p.b.sh("cat .marfafs/events").out.contains("stale_save.merged"))
        }
    }

    @Test func FS24_aStaleSaveOfTheSameLineKeepsOneConflictedCopy() throws {
        try withPair { p in
            for pattern in Pattern.allCases {
                let path = staleSave(p, "same", pattern, original: "l1\nl2\n", remote: "l1 from A\nl2\n", ours: "l1 from B\nl2\n")
                // The note keeps A's text; B's save is one conflicted copy, on both mounts and the server.
                let copyGlob = "same-\(pattern.rawValue) (conflicted copy dev-b"
                #expect(MountHarness.eventually(timeout: 20) { p.b.sh("ls types/core.note | grep -cF '\(copyGlob)'").out == "1" },
                        "\(pattern): \(p.b.sh("ls types/core.note").out)")
                #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path) == "l1 from A\nl2\n" }, "\(pattern): B shows \(cat(p.b, path))")
                let copy = p.b.sh("ls types/core.note | grep -F '\(copyGlob)'").out
                #expect(cat(p.b, "types/core.note/\(copy)") == "l1 from B\nl2\n", "every byte of B's save is kept")
                #expect(MountHarness.eventually(timeout: 20) { p.a.sh("ls types/core.note | grep -cF '\(copyGlob)'").out == "1" }, "\(pattern): A has the copy")
                #expect(cat(p.a, path) == "l1 from A\nl2\n")
                #expect(p.b.sh("cat .marfafs/conflicts").out.contains(copy), "listed in .marfafs/conflicts (FS-21)")
            }
            #expect(p.b.sh("cat .marfafs/events").out.contains("stale_save.copied"))
        }
    }

    @Test func FS24_aSaveOfAReloadedBufferDuplicatesNothing() throws {
        try withPair { p in
            for pattern in Pattern.allCases {
                // The editor reloaded (its buffer holds A's edit) and adds a line.
                let path = staleSave(p, "reload", pattern, original: "l1\nl2\nl3\n", remote: "l1\nl2 from A\nl3\n", ours: "l1\nl2 from A\nl3\nl4 from B\n")
                #expect(MountHarness.eventually(timeout: 20) { cat(p.a, path) == "l1\nl2 from A\nl3\nl4 from B\n" }, "\(pattern): A shows \(cat(p.a, path))")
                #expect(cat(p.b, path) == "l1\nl2 from A\nl3\nl4 from B\n")
                #expect(p.b.sh("ls types/core.note | grep -c 'conflicted copy'").out == "0")
            }
        }
    }

    @Test func FS24_offlineAStaleSaveMergesAndReachesTheServerLater() throws {
        try withPair { p in
            let path = "types/core.note/offline.md"
            setUp(p, "offline.md", original: "a\nb\nc\n", remote: "a from A\nb\nc\n")
            #expect(p.server.stop() == 0)
            save(p.b, path, "a\nb\nc from B\n", .inPlace)
            #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path) == "a from A\nb\nc from B\n" }, "merged offline: \(cat(p.b, path))")
            try p.server.start()
            #expect(MountHarness.eventually(timeout: 60) { cat(p.a, path) == "a from A\nb\nc from B\n" }, "A after the server is back: \(cat(p.a, path))")
        }
    }

    /// FS-29: a new note saved over while it is still staged (a program's save loop: `printf >
    /// tmp && mv tmp note`), read in between by another program through the mount, then saved
    /// over again once committed: each save builds on the last, and no conflicted copy is made
    /// of the note's own saves (the record of what the read showed outlived the save that
    /// followed it, and became the next save's base).
    @Test func FS29_savesOverANewNoteWhileItIsStagedAreNotItsOwnConflicts() throws {
        try MountHarness.with { h in
            let dir = h.path("vault")
            let script = """
            import os, sys, time
            d = sys.argv[1]
            def save(text):
                with open(d + '/.loop.tmp', 'w') as f: f.write(text)
                os.rename(d + '/.loop.tmp', d + '/loop.md')
            def read():
                # Past the kernel's page cache: the mount serves the read (and records it).
                fd = os.open(d + '/loop.md', os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                data = os.read(fd, 100)
                os.close(fd)
                return data.decode()
            save('mine 1\\n'); r1 = read(); save('mine 2\\n')
            time.sleep(1.5)   # quiet: the settler commits the new note, settling it as it commits
            save('mine 3\\n')
            open(sys.argv[2] + '/.marfafs/status').read()
            print(r1.strip())
            """
            let run = Shell.run(["/usr/bin/python3", "-c", script, dir, h.mountpoint])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.out == "mine 1", "the read between the saves reached the mount")
            #expect(h.sh("cat vault/loop.md").out == "mine 3")
            #expect(h.sh("ls vault types/core.note | grep -c conflicted").out == "0", "\(h.sh("ls -a vault").out)")
        }
    }
}
