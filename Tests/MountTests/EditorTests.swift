import Foundation
import MarfaTestSupport
import Testing

/// One way a note gets saved: a real editor driven through tmux, or a program run in a shell.
struct SaveCase: Sendable, CustomTestStringConvertible {
    var name: String
    /// An interactive program (run in `types/core.note`), with the text its first screen shows and its keys.
    var editor: String?
    var ready = "hello old"
    var keys: [[String]] = []
    /// A shell command (run in `types/core.note`) for programs with a batch mode.
    var shell: String?
    var expected: String
    /// Files the save leaves beside the note (a kept backup), with their bytes.
    var leftovers: [String: String] = [:]
    var testDescription: String { name }

    /// vim and neovim with a setting; `backupskip=` because the test root is under /tmp, where
    /// both editors skip backups by default and so would never try a rename save.
    static func vim(_ program: String, _ setting: String?, leftovers: [String: String] = [:]) -> SaveCase {
        let set = setting.map { " -c 'set \($0)'" } ?? ""
        let base = program == "vim" ? "vim -u DEFAULTS -i NONE" : "nvim --clean"
        return SaveCase(name: "\(program) \(setting ?? "default")", editor: "\(base) -c 'set backupskip='\(set) n.md",
                        keys: [[":%s/old/new/", "Enter"], [":wq", "Enter"]], expected: "hello new\nsecond line\n", leftovers: leftovers)
    }

    static let original = "hello old\nsecond line\n"

    static let all: [SaveCase] = [
        vim("vim", nil),
        vim("vim", "backupcopy=yes"),
        vim("vim", "backupcopy=no"),
        vim("vim", "backup", leftovers: ["n.md~": original]),
        vim("nvim", nil),
        vim("nvim", "backupcopy=no"),
        SaveCase(name: "nano", editor: "nano n.md", keys: [["new "], ["C-o"], ["Enter"], ["C-x"]], expected: "new " + original),
        // Emacs keeps its first backup by renaming the file to `n.md~` (outside /tmp by default).
        SaveCase(name: "emacs", editor: "emacs -nw -Q --eval '(setq backup-enable-predicate (lambda (name) t))' n.md",
                 keys: [["new "], ["C-x", "C-s"], ["C-x", "C-c"]], expected: "new " + original, leftovers: ["n.md~": original]),
        SaveCase(name: "kakoune", editor: "kak -n n.md", keys: [["i", "new ", "Escape"], [":w", "Enter"], [":q", "Enter"]], expected: "new " + original),
        SaveCase(name: "micro", editor: "micro n.md", keys: [["new "], ["C-s"], ["C-q"]], expected: "new " + original),
        SaveCase(name: "sed -i", shell: "sed -i 's/old/new/' n.md", expected: "hello new\nsecond line\n"),
        SaveCase(name: "write temp, fsync, rename", shell: "python3 -c \"import os\nf=open('n.md.tmp','wb'); f.write(b'saved\\\\n'); f.flush(); os.fsync(f.fileno()); f.close(); os.rename('n.md.tmp','n.md')\"", expected: "saved\n"),
        SaveCase(name: "cp over", shell: "printf 'copied\\n' > ../../../src && cp ../../../src n.md", expected: "copied\n"),
        SaveCase(name: "rsync", shell: "printf 'synced\\n' > ../../../src && rsync ../../../src n.md", expected: "synced\n"),
        SaveCase(name: "rsync --inplace", shell: "printf 'synced in place\\n' > ../../../src && rsync --inplace ../../../src n.md", expected: "synced in place\n"),
        SaveCase(name: "echo >>", shell: "echo third >> n.md", expected: original + "third\n"),
    ]
}

extension MountTests {
    /// FS-13: a save keeps the item's id, inode, tags, edges and xattrs, queues exactly one update
    /// and nothing for temporary names, and the program exits 0 with no complaint.
    @Test(arguments: SaveCase.all) func FS13_saveKeepsIdentity(_ c: SaveCase) throws {
        try MountHarness.with { m in
            let setup = """
                printf '\(SaveCase.original.replacingOccurrences(of: "\n", with: "\\n"))' > types/core.note/n.md && echo o > types/core.note/other.md \
                && mkdir tags/ref:k && ln -s ../../types/core.note/n.md tags/ref:k/ \
                && mkdir -p links/core.note/n.md/related && ln -s ../../../../types/core.note/other.md links/core.note/n.md/related/ \
                && setfattr -n user.c -v 1 types/core.note/n.md
                """
            #expect(m.sh(setup).status == 0)
            #expect(m.markQueueSent())
            let before = id(m, "types/core.note/n.md")
            let dir = m.path("types/core.note")
            if let editor = c.editor {
                let run = Terminal.drive(editor, cwd: dir, ready: c.ready, keys: c.keys)
                #expect(run.status == 0, "\(c.name) did not exit 0: \(run.screen)")
                #expect(!run.screen.contains("E667") && !run.screen.contains("changed since reading"), "\(run.screen)")
            } else if let shell = c.shell {
                let r = m.sh("cd types/core.note && \(shell)")
                #expect(r.status == 0, "\(r.stderr)")
            }
            #expect(m.sh("cat types/core.note/n.md").stdout == c.expected)
            #expect(id(m, "types/core.note/n.md") == before)
            // The name shows one inode at once and keeps it (FS-31: a save by rename gives the
            // item the renamed file's inode, as a disk does; the item keeps its id).
            let ino = m.sh("stat -c %i types/core.note/n.md").out
            m.settle()
            #expect(m.sh("stat -c %i types/core.note/n.md").out == ino)
            #expect(m.sh("getfattr --only-values -n user.marfa.tags types/core.note/n.md").out == "ref:k")
            #expect(m.sh("getfattr --only-values -n user.c types/core.note/n.md").out == "1")
            #expect(m.sh("ls links/core.note/n.md/related; readlink tags/ref:k/n.md").out == "other.md\n../../types/core.note/n.md")
            #expect(m.sql("SELECT kind || ' ' || item_id FROM mutations WHERE state = 'pending'") == "update \(before)")
            #expect(m.sql("SELECT count(*) FROM items") == "2", "no item made for a temporary name")
            let listed = Set(m.sh("ls -A types/core.note").out.split(separator: "\n").map(String.init))
            #expect(listed == Set(["n.md", "other.md"] + c.leftovers.keys), "left beside the note: \(listed)")
            for (name, bytes) in c.leftovers {
                #expect(m.sh("cat 'types/core.note/\(name)'").stdout == bytes, "\(name) keeps the bytes before the save")
            }
            #expect(m.sh("ls trash/core.note").out == "", "nothing trashed")
        }
    }
}
