import Foundation
import MarfaTestSupport
import Testing

/// FS-5, FS-9, FS-32: a vault synced to another mount has the same file names and the same bytes
/// there, front matter as written included, through saves, renames and reformatting on either side.
@Suite(.serialized) struct SyncFileFormTests {
    /// Whether both mounts' `vault/` trees are the same, names and bytes (`diff -r`).
    func same(_ p: MountPair) -> Bool {
        Shell.run(["diff", "-r", p.a.path("vault"), p.b.path("vault")]).status == 0
    }

    func differences(_ p: MountPair) -> String {
        Shell.run(["diff", "-r", p.a.path("vault"), p.b.path("vault")]).out
    }

    @Test func FS32_aVaultSyncedToAnotherMountHasTheSameNamesAndBytes() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            let made = a.sh(#"""
                mkdir vault/d && cd vault/d
                printf -- '---\ntitle: A Different Title\n---\nbody\n' > zk-2023.md
                printf 'upper\n' > Upper.MD
                printf -- '---\ntitle: same\n---\nbody\n' > same.md
                printf -- '---\ntags:\n  - b\n  - a\nz: 1\n# a comment\ny: "q"\n---\nbody\n' > order.md
                printf 'plain\n' > todo.txt
                printf 'no front matter [[zk-2023]]\n' > plain.md
                """#)
            #expect(made.status == 0, "\(made.stderr)")
            #expect(MountHarness.eventually { same(p) }, "\(differences(p))")
            #expect(b.sh("ls vault/d").out == "Upper.MD\norder.md\nplain.md\nsame.md\ntodo.txt\nzk-2023.md")
            #expect(b.sh("cat vault/d/order.md").out == "---\ntags:\n  - b\n  - a\nz: 1\n# a comment\ny: \"q\"\n---\nbody")
            // A rename that leaves the title alone, front matter reordered: the same on B, where
            // the reordered file's time moves (a watcher hears of new bytes by it, FS-25).
            let timeBefore = b.sh("stat -c %.9Y vault/d/order.md").out
            #expect(a.sh(#"cd vault/d && mv zk-2023.md zk-2024.md && printf -- '---\ny: "q"\nz: 1\ntags: [b, a]\n---\nbody\n' > order.md"#).status == 0)
            #expect(MountHarness.eventually { same(p) }, "\(differences(p))")
            #expect((Double(b.sh("stat -c %.9Y vault/d/order.md").out) ?? 0) > (Double(timeBefore) ?? .infinity))
            // B edits the body of a note it has read: A has its name and front matter still.
            #expect(b.sh("cat vault/d/zk-2024.md > /dev/null && sed -i 's/^body$/body two/' vault/d/zk-2024.md").status == 0)
            #expect(MountHarness.eventually { a.sh("cat vault/d/zk-2024.md").out == "---\ntitle: A Different Title\n---\nbody two" },
                    "\(a.sh("ls vault/d; cat vault/d/*2024*").out)")
            #expect(MountHarness.eventually { same(p) }, "\(differences(p))")
            // A name its title gives again, and a title changed in the text: the name follows only
            // the rename.
            #expect(a.sh("cd vault/d && mv zk-2024.md 'A Different Title.md' && mv Upper.MD lower.MD").status == 0)
            #expect(MountHarness.eventually { same(p) }, "\(differences(p))")
            #expect(a.sh(#"cd vault/d && printf -- '---\ntitle: Another\n---\nbody two\n' > 'A Different Title.md'"#).status == 0)
            #expect(MountHarness.eventually { same(p) }, "\(differences(p))")
            #expect(b.sh("ls vault/d").out == "A Different Title.md\nlower.MD\norder.md\nplain.md\nsame.md\ntodo.txt")
            #expect(b.sh("cat vault/d/same.md").out == "---\ntitle: same\n---\nbody")
        }
    }

    /// FS-32 across an upgrade: files a build before `fs.name` and `fs.text` sent are on the
    /// server without their names and front matter, so another mount shows them under their
    /// titles' names, rendered. The first mount of the writer's store with this build sends what
    /// its files hold (once), and the other mount then has the same names and bytes; the writer's
    /// own names stay throughout.
    @Test func FS32_filesSentByAnEarlierBuildGetTheirNamesAndFrontMatterEverywhereAfterTheUpgrade() throws {
        let s = try ServerHarness(postgres: false)
        let (_, options) = try s.mountKey()
        let a = try MountHarness(), b = try MountHarness()
        a.mountOptions = options; b.mountOptions = options
        defer {
            a.unmount(); b.unmount()
            try? FileManager.default.removeItem(atPath: a.root); try? FileManager.default.removeItem(atPath: b.root)
        }
        try a.mount()
        let made = a.sh(#"""
            mkdir vault/d && cd vault/d
            printf -- '---\ntitle: A Different Title\ntags: [x, y]\n# a comment\n---\nbody\n' > zk-2023.md
            printf 'upper\n' > Upper.MD
            printf -- '---\ntitle: same\n---\nbody\n' > same.md
            """#)
        #expect(made.status == 0, "\(made.stderr)")
        #expect(MountHarness.eventually(timeout: 30) { a.sh("cat .marfafs/flush").out.hasPrefix("ok") })
        let listing = "Upper.MD\nsame.md\nzk-2023.md"
        a.unmount()
        // What the earlier build left: no forms on the server, none sent from the store.
        _ = s.stop()
        #expect(Shell.run(["/usr/bin/sqlite3", s.db, "UPDATE items SET extensions = '{}'"]).status == 0)
        try s.start()
        #expect(Shell.run(["/usr/bin/sqlite3", a.store, "DELETE FROM meta WHERE key = 'file_form_sent'"]).status == 0)
        try b.mount()
        #expect(b.sh("ls vault/d").out == "A Different Title.md\nUpper.md\nsame.md", "what the upgrade is for")
        try a.mount()
        #expect(a.sh("ls vault/d").out == listing)
        #expect(MountHarness.eventually(timeout: 30) { b.sh("ls vault/d").out == listing }, "\(b.sh("ls vault/d").out)")
        #expect(MountHarness.eventually { Shell.run(["diff", "-r", a.path("vault"), b.path("vault")]).status == 0 },
                "\(Shell.run(["diff", "-r", a.path("vault"), b.path("vault")]).out)")
        #expect(a.sh("ls vault/d").out == listing)
        // Once: the next mount queues nothing.
        a.unmount()
        try a.mount()
        #expect(a.sql("SELECT count(*) FROM mutations WHERE state = 'pending'") == "0")
    }
}
