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
}
