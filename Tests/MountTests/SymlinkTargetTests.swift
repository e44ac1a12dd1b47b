import Foundation
import MarfaTestSupport
import Testing

/// FS-1 with the kernel keeping symlink targets (`FUSE_CAP_CACHE_SYMLINKS`): every symlink that
/// names an item by its path (`tags/`, `by-id/`, `links/`, `backlinks/`) shows the item's new path
/// at once, after a rename, a move to the trash, and when the item's name moved aside for
/// another's (FS-7), though each was read, and so cached, before.
@Suite(.serialized) struct SymlinkTargetTests {
    func id(_ m: MountHarness, _ rel: String) -> String {
        m.sh("getfattr --only-values -n user.marfa.id '\(rel)'").out
    }

    @Test func FS1_aSymlinkNamingAnItemShowsItsNewPathAtOnce() throws {
        try MountHarness.with { m in
            #expect(m.sh("printf 'alpha\\n' > types/core.note/a.md && printf 'beta\\n' > types/core.note/b.md").status == 0)
            #expect(m.sh("mkdir tags/reading && ln -s ../../types/core.note/a.md tags/reading/").status == 0)
            #expect(m.sh("mkdir -p links/core.note/b.md/references && ln -s ../../../../types/core.note/a.md links/core.note/b.md/references/").status == 0)
            let aid = id(m, "types/core.note/a.md")
            let read = "readlink tags/reading/a.md by-id/\(aid) links/core.note/b.md/references/a.md"
            #expect(m.sh(read).out == "../../types/core.note/a.md\n../types/core.note/a.md\n../../../../types/core.note/a.md")
            // Renamed: read right after the rename returns.
            #expect(m.sh("mv types/core.note/a.md types/core.note/c.md").status == 0)
            #expect(m.sh("readlink tags/reading/c.md by-id/\(aid) links/core.note/b.md/references/c.md").out
                    == "../../types/core.note/c.md\n../types/core.note/c.md\n../../../../types/core.note/c.md")
            // To the trash.
            #expect(m.sh("rm types/core.note/c.md && readlink by-id/\(aid)").out == "../trash/core.note/c.md")
            // A name moved aside for another's: two notes named x.md in two folders of the tree;
            // the second's name in types/ takes the first's once the first goes.
            #expect(m.sh("mkdir -p vault/f1 vault/f2 && echo one > vault/f1/x.md && echo two > vault/f2/x.md").status == 0)
            let second = id(m, "vault/f2/x.md")
            let before = m.sh("readlink by-id/\(second)").out
            #expect(before.hasPrefix("../types/core.note/x ") && before.hasSuffix("].md"), "\(before)")
            #expect(m.sh("rm vault/f1/x.md && readlink by-id/\(second)").out == "../types/core.note/x.md")
            // The root's `vault` symlink is followed by every absolute path into the tree.
            #expect(m.sh("cat \(m.mountpoint)/vault/f2/x.md").out == "two")
        }
    }
}
