import Foundation
import MarfaTestSupport
import Testing

/// Tools that copy a file with its extended attributes (`cp -a`, `rsync -aX`, `tar --xattrs`)
/// inside the vault's tree (FS-17, FS-28, FS-32): the copy is where the tool made it, with the
/// original's bytes, tags and attributes of the user's own, and the original stays as it was.
@Suite struct CopyAttributesTests {
    static let note = "---\ntags: [alpha]\n---\n# Hello #beta\n"

    @Test func FS28_FS32_aCopyWithItsAttributesStaysWhereTheToolMadeIt() throws {
        try MountHarness.with { m in
            #expect(m.sh("mkdir -p vault/src vault/other vault/t tags/foo && printf '%s' '\(Self.note)' > vault/src/n.md"
                          + " && setfattr -n user.c -v 7 vault/src/n.md").status == 0)
            m.settle()
            let id = m.sh("getfattr --only-values -n user.marfa.id vault/src/n.md").out
            let x = "--xattrs --xattrs-include='user.*'"
            let copies = [
                ("cp -a vault/src vault/dst", "vault/dst/n.md", "folder:dst"),
                ("cp -a vault/src/n.md vault/other/", "vault/other/n.md", "folder:other"),
                ("rsync -aX vault/src/ vault/r/", "vault/r/n.md", "folder:r"),
                ("tar \(x) -C vault -cf - src | tar \(x) -C vault/t -xf -", "vault/t/src/n.md", "folder:t/src"),
            ]
            for (cmd, _, _) in copies {
                let r = m.sh(cmd + " 2>&1")
                #expect(r.status == 0, "\(cmd): \(r.stdout)")
            }
            m.settle()
            for (cmd, path, folder) in copies {
                #expect(m.sh("cat '\(path)'").stdout == Self.note, "\(cmd)")
                #expect(m.sh("getfattr --only-values -n user.marfa.tags '\(path)'").out == "alpha,beta,\(folder)", "\(cmd)")
                #expect(m.sh("getfattr --only-values -n user.c '\(path)'").out == "7", "\(cmd)")
                #expect(m.sh("getfattr --only-values -n user.marfa.id '\(path)'").out != id, "\(cmd): a copy is an item of its own")
            }
            // The original's folder holds the original alone, which kept its id and tags.
            #expect(m.sh("ls vault/src").out == "n.md")
            #expect(m.sh("getfattr --only-values -n user.marfa.id vault/src/n.md").out == id)
            #expect(m.sh("getfattr --only-values -n user.marfa.tags vault/src/n.md").out == "alpha,beta,folder:src")
            // Made in tags/foo/, the copy keeps the tag of the place it was made.
            #expect(m.sh("cp -a vault/src/n.md tags/foo/ && getfattr --only-values -n user.marfa.tags tags/foo/n.md").out == "alpha,beta,foo")
            // Once the copy is made, a folder tag written by hand is the user's: it moves there.
            Thread.sleep(forTimeInterval: 11)
            #expect(m.sh("setfattr -n user.marfa.tags -v 'folder:other,alpha' vault/dst/n.md && ls vault/dst; ls vault/other | wc -l").out == "2")
            // A file given a folder tag by hand, not a copy, still moves there.
            #expect(m.sh("printf x > vault/other/f.md && setfattr -n user.marfa.tags -v 'folder:src,k' vault/other/f.md && ls vault/src").out
                    == "f.md\nn.md")
        }
    }

    /// `rsync -X` gives its temporary file (`.name.XXXXXX`) the original's attributes before it
    /// renames it, and its random tail ends in `sw` and a letter now and then, which makes it a
    /// scratch name (`.*.*sw?`, FS-14): every attribute was refused (EPERM, rsync exit 23, one file
    /// in a few thousand) and the file lost them. A scratch file keeps them, and the item it
    /// becomes takes them: a copy in its own folder, with the original's tags and attributes.
    @Test func FS14_FS17_aTemporaryFileWithAScratchNameKeepsItsAttributes() throws {
        try MountHarness.with { m in
            #expect(m.sh("mkdir -p vault/src vault/dst && printf '%s' '\(Self.note)' > vault/src/n.md && printf 'PNG' > vault/src/p.png"
                          + " && setfattr -n user.c -v 7 vault/src/n.md && setfattr -n user.marfa.tags -v k vault/src/p.png").status == 0)
            m.settle()
            let id = m.sh("getfattr --only-values -n user.marfa.id vault/src/n.md").out
            // What rsync -aX does for each file, with a temporary name that is a scratch name.
            let copy = """
                import os, shutil, sys
                src, tmp, dst = sys.argv[1:]
                shutil.copyfile(src, tmp)
                for name in os.listxattr(src):
                    os.setxattr(tmp, name, os.getxattr(src, name))
                print(",".join(sorted(os.listxattr(tmp))) == ",".join(sorted(os.listxattr(src))))
                os.rename(tmp, dst)
                """
            for f in ["n.md", "p.png"] {
                let r = m.sh("python3 -c '\(copy)' vault/src/\(f) vault/dst/.\(f).Ab1swQ vault/dst/\(f) 2>&1")
                #expect(r.status == 0 && r.out == "True", "\(f): \(r.stdout)")
            }
            m.settle()
            #expect(m.sh("ls -A vault/dst").out == "n.md\np.png")
            #expect(m.sh("ls vault/src").out == "n.md\np.png", "the copies stay where they were made")
            #expect(m.sh("cat vault/dst/n.md").stdout == Self.note)
            #expect(m.sh("getfattr --only-values -n user.c vault/dst/n.md").out == "7")
            #expect(m.sh("getfattr --only-values -n user.marfa.tags vault/dst/n.md").out == "alpha,beta,folder:dst")
            #expect(m.sh("getfattr --only-values -n user.marfa.tags vault/dst/p.png").out == "folder:dst,k")
            #expect(m.sh("getfattr --only-values -n user.marfa.id vault/dst/n.md").out != id)
            // A scratch file's attributes are its own: set, read, listed, removed, as on a disk.
            #expect(m.sh("printf x > vault/dst/.s.md.Zz9swq && setfattr -n user.a -v 1 vault/dst/.s.md.Zz9swq"
                         + " && setfattr -x user.a vault/dst/.s.md.Zz9swq && getfattr -d vault/dst/.s.md.Zz9swq | wc -l").out == "0")
            #expect(m.sh("getfattr -n user.a vault/dst/.s.md.Zz9swq").status != 0)
            #expect(m.sh("setfattr -x user.a vault/dst/.s.md.Zz9swq").status != 0)
            // With the room an item has for them (64 KiB, names and values): ENOSPC past it.
            let fill = "import os\nfor i in range(9):\n  try: os.setxattr(\"vault/dst/.s.md.Zz9swq\", f\"user.v{i}\", b\"v\" * 8000)\n"
                + "  except OSError as e: print(i, e.errno); break"
            #expect(m.sh("python3 -c '\(fill)'").out == "8 28", "the ninth attribute of 8 KB is refused (ENOSPC)")
        }
    }

    /// A file made with its bits (`open(O_CREAT, 0600)`) and given an item's id before anything
    /// else changed it is settled by that attribute, as it is committed (FS-14): the bits it was
    /// made with go in its row with it, and a remount shows them.
    @Test func FS31_FS28_aFileSettledByItsFirstAttributeKeepsItsBits() throws {
        try MountHarness.with { m in
            #expect(m.sh("mkdir -p vault/src vault/dst && printf x > vault/src/n.md").status == 0)
            m.settle()
            let made = """
                import os, sys
                src, dst = sys.argv[1:]
                fd = os.open(dst, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
                os.write(fd, open(src, "rb").read())
                os.close(fd)
                os.setxattr(dst, "user.marfa.id", os.getxattr(src, "user.marfa.id"))
                """
            let r = m.sh("python3 -c '\(made)' vault/src/n.md vault/dst/n.md 2>&1")
            #expect(r.status == 0, "\(r.stdout)")
            #expect(m.sh("stat -c %a vault/dst/n.md").out == "600")
            m.settle()
            m.unmount()
            try m.mount()
            #expect(m.sh("stat -c %a vault/dst/n.md").out == "600")
            #expect(m.sh("cat vault/dst/n.md").out == "x")
        }
    }

    /// `tar -x` writes a file's attributes between its create and its bytes: a copy's tags and
    /// properties written into the still empty file became a front matter that the bytes then
    /// overwrote in part ("note 1 #t" came out as "note 1 #t\n  - t\n---\n", and `git status`
    /// in the copy of a repository listed every such note as modified).
    @Test func FS28_FS32_attributesThatComeBeforeTheBytesLeaveTheBytesAlone() throws {
        try MountHarness.with { m in
            let notes = ["n1.md": "note 1 #t\n", "n2.md": "---\nstatus: draft\ntags: [a, b, c]\n---\nx\n"]
            for (name, text) in notes {
                #expect(m.sh("mkdir -p vault/p && printf '%s' '\(text)' > vault/p/\(name)").status == 0)
            }
            #expect(m.sh("setfattr -n user.marfa.favorite -v 1 vault/p/n1.md").status == 0)
            m.settle()
            let archive = m.root + "/p.tar"
            #expect(m.sh("tar --xattrs -C vault -cf '\(archive)' p && mkdir vault/t && tar --xattrs -C vault/t -xf '\(archive)' 2>&1").out.isEmpty)
            // And over the originals themselves, as a restore does.
            #expect(m.sh("tar --xattrs -C vault -xf '\(archive)' 2>&1").out.isEmpty)
            m.settle()
            for (name, text) in notes {
                #expect(m.sh("cat vault/t/p/\(name)").stdout == text, "\(name)")
                #expect(m.sh("cat vault/p/\(name)").stdout == text, "\(name) restored over itself")
            }
            #expect(m.sh("getfattr --only-values -n user.marfa.tags vault/t/p/n1.md").out == "favorite,folder:t/p,t")
            #expect(m.sh("getfattr --only-values -n user.marfa.tags vault/t/p/n2.md").out == "a,b,c,folder:t/p")
            #expect(m.sh("getfattr --only-values -n user.marfa.prop.status vault/t/p/n2.md").out == "\"draft\"")
        }
    }

    /// A backup of one store's vault, made with its attributes, restored into another store's
    /// mount: the ids name no item there; the copies keep their own, and the tools succeed.
    @Test func FS28_aBackupWithAttributesRestoresIntoAnotherStore() throws {
        try MountHarness.with { a in
            let backup = a.root + "/backup"
            #expect(a.sh("mkdir -p vault/d && printf 'short #t\\n' > vault/d/n.md && printf -- '---\\nstatus: x\\n---\\nbody\\n' > vault/d/m.md").status == 0)
            a.settle()
            #expect(a.sh("rsync -aX vault/ '\(backup)/' && tar --xattrs -C '\(backup)' -cf '\(backup).tar' .").status == 0)
            try MountHarness.with { b in
                let r = b.sh("rsync -aX '\(backup)/' vault/ 2>&1")
                #expect(r.status == 0, "\(r.stdout)")
                #expect(b.sh("mkdir vault/t && tar --xattrs -C vault/t -xf '\(backup).tar' 2>&1").out.isEmpty)
                b.settle()
                for (dir, folder) in [("vault", "d"), ("vault/t", "t/d")] {
                    #expect(Shell.run(["diff", "-r", backup + "/d", b.path(dir + "/d")]).status == 0, "\(dir)")
                    #expect(b.sh("getfattr --only-values -n user.marfa.tags \(dir)/d/n.md").out == "folder:\(folder),t")
                    #expect(b.sh("getfattr --only-values -n user.marfa.id \(dir)/d/n.md").out
                            != a.sh("getfattr --only-values -n user.marfa.id vault/d/n.md").out)
                }
                #expect(b.sh("printf x > vault/new.md && setfattr -n user.marfa.id -v other vault/new.md 2>&1").out.contains("Operation not permitted"),
                        "text that is no item id is refused")
            }
        }
    }
}
