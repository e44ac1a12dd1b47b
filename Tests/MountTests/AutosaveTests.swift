import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// FS-29: an autosaving editor on mount B holds a note read before mount A edits it, and saves
/// its buffer again and again: A's edit survives every save on B, A and the server, no line is
/// duplicated, and overlapping edits keep one conflicted copy. The editor is one long-lived
/// program (`BufferEditor`), as a real one is; in `types/` and in the vault's tree, online and
/// with B offline while it saves.
@Suite(.serialized) struct AutosaveTests {
    func cat(_ m: MountHarness, _ path: String) -> String { (try? String(contentsOfFile: m.path(path), encoding: .utf8)) ?? "" }

    /// How the editor saves between edits: in place, by a temporary file renamed over the note, or
    /// in place after reloading the file (once the mount shows what its save became).
    enum Pattern: String, CaseIterable { case inPlace, tempAndRename, reloadBetween }

    func serverBody(_ p: MountPair, _ path: String) -> String? {
        let id = p.a.sh("getfattr --only-values -n user.marfa.id '\(path)'").out
        return p.server.call("GET", "/items/\(id)", key: p.key).item["properties"]?.objectValue?["body"]?.stringValue
    }

    /// A note at `path` (types/… or vault/…) made on A with three lines, open in an editor on B,
    /// then edited on A (line 1); returns the editor once B shows A's edit.
    func openStale(_ p: MountPair, _ path: String) throws -> BufferEditor {
        let dir = (path as NSString).deletingLastPathComponent
        #expect(p.a.sh("mkdir -p '\(dir)' && printf 'l1\\nl2\\nl3\\n' > '\(path)'").status == 0)
        #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path) == "l1\nl2\nl3\n" }, "B sees the note: \(cat(p.b, path))")
        let editor = try BufferEditor(path: p.b.path(path))
        #expect(p.a.sh("printf 'l1 from A\\nl2\\nl3\\n' > '\(path)'").status == 0)
        #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path) == "l1 from A\nl2\nl3\n" }, "B sees A's edit: \(cat(p.b, path))")
        return editor
    }

    /// Three saves from the stale buffer, each adding a line; each waits until B's mount shows it.
    func saveThrice(_ p: MountPair, _ editor: BufferEditor, _ path: String, _ pattern: Pattern) throws {
        for k in 1...3 {
            try editor.append("B \(k)\n")
            try editor.save(pattern == .tempAndRename ? .tempAndRename : .inPlace)
            #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path).contains("l1 from A\n") && cat(p.b, path).contains("B \(k)\n") },
                    "\(pattern) save \(k): B shows \(cat(p.b, path))")
            if pattern == .reloadBetween { try editor.reload() }
        }
    }

    func checkEverywhere(_ p: MountPair, _ path: String, _ what: String) {
        let want = "l1 from A\nl2\nl3\nB 1\nB 2\nB 3\n"
        #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path) == want }, "\(what): B shows \(cat(p.b, path))")
        #expect(MountHarness.eventually(timeout: 30) { cat(p.a, path) == want }, "\(what): A shows \(cat(p.a, path))")
        #expect(MountHarness.eventually(timeout: 20) { serverBody(p, path) == want }, "\(what): the server has \(serverBody(p, path) ?? "nothing")")
        let dir = (path as NSString).deletingLastPathComponent
        #expect(p.b.sh("ls '\(dir)' | grep -c 'conflicted copy'").out == "0", "\(what): no conflicted copy for a clean merge")
    }

    func run(_ dir: String, offline: Bool) throws {
        try MountPair.with { p in
            for pattern in Pattern.allCases {
                let path = "\(dir)/\(pattern.rawValue)\(offline ? "-offline" : "").md"
                let editor = try openStale(p, path)
                defer { editor.close() }
                if offline { #expect(p.server.stop() == 0) }
                try saveThrice(p, editor, path, pattern)
                if offline { try p.server.start() }
                checkEverywhere(p, path, "\(pattern)\(offline ? " offline" : "") in \(dir)")
            }
        }
    }

    @Test func FS29_repeatedSavesFromAStaleBufferKeepTheRemoteEditInTypes() throws { try run("types/core.note", offline: false) }
    @Test func FS29_repeatedSavesFromAStaleBufferKeepTheRemoteEditInTheVault() throws { try run("vault/projects/2026", offline: false) }
    @Test func FS29_repeatedSavesOfflineKeepTheRemoteEditInTheVault() throws { try run("vault/offline", offline: true) }
    @Test func FS29_repeatedSavesOfflineKeepTheRemoteEditInTypes() throws { try run("types/core.note", offline: true) }

    /// The editor reads on one thread and writes on another (`BufferEditor`): the mount takes
    /// both as one program. After its stale save was merged, it reloads (a read that reaches the
    /// mount: nothing else read the merge) and rewrites the line A wrote: that is an edit of text
    /// it saw, taken as it is, with no conflicted copy. Were its threads two writers, the reload
    /// would not be its base, and the edit would overlap A's line.
    @Test func FS29_aReloadOnAnotherThreadOfTheEditorIsItsBase() throws {
        try MountPair.with { p in
            let path = "vault/threads/note.md"
            let editor = try openStale(p, path)
            defer { editor.close() }
            try editor.append("B 1\n")
            try editor.save(.inPlace)
            let merged = "l1 from A\nl2\nl3\nB 1\n"
            // Waited for by its size: a read here would fill the page cache, and the editor's
            // reload would then never reach the mount.
            #expect(MountHarness.eventually(timeout: 20) { p.b.sh("stat -c %s '\(path)'").out == "\(merged.utf8.count)" }, "the merge on B")
            try editor.reload()
            try editor.replace("l1 from A", with: "l1 by B")
            try editor.save(.inPlace)
            let want = "l1 by B\nl2\nl3\nB 1\n"
            #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path) == want }, "B shows \(cat(p.b, path))")
            #expect(MountHarness.eventually(timeout: 30) { cat(p.a, path) == want }, "A shows \(cat(p.a, path))")
            #expect(p.b.sh("ls vault/threads | grep -c 'conflicted copy'").out == "0", "\(p.b.sh("ls vault/threads").out)")
        }
    }

    /// An in-place save whose program pauses after the truncate and between its writes (a loaded
    /// machine deschedules it for longer than the settle window): the file empty, then half
    /// written, is not the save. It settles whole and merges with A's edit; no line is lost to a
    /// conflicted copy of the empty or the half-written file.
    @Test func FS29_anInPlaceSaveThatPausesBetweenItsWritesMergesWhole() throws {
        try MountPair.with { p in
            for (dir, name) in [("vault/slow", "slow-save.md"), ("types/core.note", "slow-save-in-types.md")] {
                let path = dir + "/" + name
                let editor = try openStale(p, path)
                defer { editor.close() }
                try editor.append("B 1\n")
                try editor.saveInPlaceSlowly(pause: 0.5)
                let want = "l1 from A\nl2\nl3\nB 1\n"
                #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path) == want }, "\(dir): B shows \(cat(p.b, path))")
                #expect(MountHarness.eventually(timeout: 30) { cat(p.a, path) == want }, "\(dir): A shows \(cat(p.a, path))")
                #expect(p.b.sh("ls '\(dir)' | grep -c 'conflicted copy'").out == "0", "\(dir): \(p.b.sh("ls '\(dir)'").out)")
            }
        }
    }

    @Test func FS29_overlappingAutosavesKeepOneConflictedCopy() throws {
        try MountPair.with { p in
            for how in BufferEditor.Save.allCases {
                let path = "vault/clash/\(how.rawValue).md"
                let editor = try openStale(p, path)
                defer { editor.close() }
                // B changes the line A changed, then keeps typing and saving.
                try editor.replace("l1", with: "l1 from B")
                for k in 1...3 {
                    try editor.append("B \(k)\n")
                    try editor.save(how)
                    #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path).contains("B \(k)\n") || k == 1 }, "save \(k): \(cat(p.b, path))")
                    usleep(300_000)
                }
                let copies = "ls vault/clash | grep -F '\(how.rawValue) (conflicted copy'"
                #expect(MountHarness.eventually(timeout: 20) { p.b.sh(copies + " | wc -l").out == "1" }, "\(how): \(p.b.sh("ls vault/clash").out)")
                let copy = p.b.sh(copies).out
                #expect(cat(p.b, "vault/clash/\(copy)").contains("l1 from B\n"), "B's line is kept in the copy: \(cat(p.b, "vault/clash/\(copy)"))")
                let note = cat(p.b, path)
                #expect(note.hasPrefix("l1 from A\n"), "the note keeps A's line: \(note)")
                #expect(note.split(separator: "\n").filter { $0 == "B 3" }.count <= 1, "no line twice: \(note)")
                #expect(MountHarness.eventually(timeout: 30) { p.a.sh(copies + " | wc -l").out == "1" }, "A has the one copy: \(p.a.sh("ls vault/clash").out)")
            }
        }
    }
}
