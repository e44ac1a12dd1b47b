import Foundation
import MarfaTestSupport
import Testing

/// Files of the vault's tree behave as a disk's (FS-31): permission bits kept and synced, the
/// owner and the three times as Linux keeps them, descriptors that keep every byte written.
@Suite struct TreeFileTests {
    /// Writes `v1`, overwrites it through a descriptor with `version2`, unlinks it within the
    /// second, then reads and writes through the descriptor; prints what it read.
    static let openUnlinked = #"""
    import os, sys, time
    p = sys.argv[1]
    with open(p, 'w') as f: f.write('v1')
    time.sleep(0.3)
    fd = os.open(p, os.O_RDWR)
    os.ftruncate(fd, 0)
    os.pwrite(fd, b'version2', 0)
    os.unlink(p)
    time.sleep(1.2)
    print(os.pread(fd, 100, 0).decode())
    os.pwrite(fd, b'+more', 8)
    time.sleep(0.3)
    print(os.pread(fd, 100, 0).decode(), os.fstat(fd).st_size)
    os.close(fd)
    """#

    @Test(arguments: ["types/core.file/temp.bin", "vault/temp.md"])
    func FS31_anOpenUnlinkedFileKeepsEveryByteAndTheTrashTheLast(path: String) throws {
        try MountHarness.with { h in
            try Self.openUnlinked.write(toFile: h.root + "/ou.py", atomically: true, encoding: .utf8)
            let r = h.sh("python3 '\(h.root)/ou.py' '\(path)'")
            #expect(r.status == 0, "\(r.stderr)")
            #expect(r.out == "version2\nversion2+more 13")
            let trashed = path.hasPrefix("vault/") ? "trash/core.note/temp.md" : "trash/core.file/temp.bin"
            #expect(MountHarness.eventually { h.sh("cat \(trashed)").out == "version2+more" }, "\(h.sh("ls -R trash").out)")
        }
    }

    /// A descriptor opened on a file, then the file removed and made again at once, and a file
    /// renamed over the name: the old descriptor reads and writes its own file; the name shows
    /// the new one, with another inode (the renamed file's).
    static let replaced = #"""
    import os, sys, time
    p = sys.argv[1]
    with open(p, 'w') as f: f.write('OLD')
    time.sleep(0.3)
    fd = os.open(p, os.O_RDWR)
    ino = os.fstat(fd).st_ino
    os.unlink(p)
    with open(p, 'w') as f: f.write('NEW')
    time.sleep(0.3)
    print(os.pread(fd, 10, 0).decode(), open(p).read(), os.stat(p).st_ino != ino)
    os.pwrite(fd, b'XX', 0)
    time.sleep(0.3)
    print(os.pread(fd, 10, 0).decode(), open(p).read())
    os.close(fd)
    fd = os.open(p, os.O_RDONLY)
    with open(p + '.tmp', 'w') as f: f.write('REPLACED')
    tmp = os.stat(p + '.tmp').st_ino
    os.rename(p + '.tmp', p)
    time.sleep(0.3)
    print(os.pread(fd, 20, 0).decode(), open(p).read(), os.stat(p).st_ino == tmp)
    os.close(fd)
    """#

    @Test(arguments: ["types/core.file/f.bin", "vault/f.md"])
    func FS31_anOldDescriptorKeepsItsFileAfterARecreateAndARenameOver(path: String) throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        try Self.replaced.write(toFile: h.root + "/re.py", atomically: true, encoding: .utf8)
        let r = h.sh("python3 '\(h.root)/re.py' '\(path)'")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.out == "OLD NEW True\nXXD NEW\nNEW REPLACED True")
        // The item kept its identity through both, and its inode across a remount.
        let ino = h.sh("stat -c %i '\(path)'").out
        #expect(h.sh("find trash -type f | wc -l").out == "0", "nothing trashed: the same item")
        h.unmount()
        try h.mount()
        #expect(h.sh("stat -c %i '\(path)'; cat '\(path)'").out == "\(ino)\nREPLACED")
    }

    @Test func FS31_permissionBitsAreKeptAcrossARemountAndByGit() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        let git = "git -c user.name=t -c user.email=t@example.com"
        let made = h.sh("""
            mkdir vault/repo && cd vault/repo && git init -q && printf '#!/bin/sh\\necho ran\\n' > run.sh && chmod +x run.sh \
            && printf 'x\\n' > notes.md && (umask 077 && printf 's\\n' > secret.txt && mkdir private) \
            && \(git) add -A && \(git) commit -qm one && ./run.sh
            """)
        #expect(made.status == 0 && made.out == "ran", "\(made.stderr)")
        func modes() -> String { h.sh("cd vault/repo && stat -c '%a %n' run.sh notes.md secret.txt private").out }
        #expect(modes() == "755 run.sh\n644 notes.md\n600 secret.txt\n700 private")
        #expect(h.sh("cd vault/repo && git status --porcelain").out.isEmpty)
        // A clone checks the executable bit out as git wrote it, and sees nothing changed.
        #expect(h.sh("cd vault && git clone -q repo copy && cd copy && stat -c %a run.sh && git status --porcelain").out == "755")
        h.unmount()
        try h.mount()
        #expect(modes() == "755 run.sh\n644 notes.md\n600 secret.txt\n700 private", "a remount")
        #expect(h.sh("cd vault/repo && git status --porcelain").out.isEmpty)
    }

    /// `rsync -a`'s way (FS-32): a temporary file made `0600`, written, given its bits and time,
    /// renamed to its name, in a folder made just before. It settles once, under its final name,
    /// folder and type (the temporary name never reaches the store, the queue or the other mount),
    /// with the bits and the time rsync gave it, here and on the other mount; rsync then finds
    /// nothing to send.
    @Test func FS32_rsyncTemporaryFilesSettleOnceUnderTheirNamesWithBitsAndTimes() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            let src = a.root + "/rsync-src"
            let made = Shell.run(["/bin/bash", "-c", """
                set -e; mkdir -p '\(src)/d/e' && cd '\(src)'
                printf '#!/bin/sh\\necho ran\\n' > d/run.sh && chmod 750 d/run.sh
                printf '# Plan\\nsee [[Other]]\\n' > d/e/Plan.md && printf 'other\\n' > Other.md && chmod 600 Other.md
                touch -d '2020-01-02 03:04:05 UTC' d/run.sh d/e/Plan.md Other.md
                """])
            #expect(made.status == 0, "\(made.stderr)")
            let first = a.sh("rsync -a '\(src)/' vault/")
            #expect(first.status == 0, "\(first.stderr)")
            let want = "750 1577934245 d/run.sh\n644 1577934245 d/e/Plan.md\n600 1577934245 Other.md"
            func shown(_ m: MountHarness) -> String { m.sh("cd vault && stat -c '%a %Y %n' d/run.sh d/e/Plan.md Other.md").out }
            #expect(shown(a) == want)
            #expect(a.sh("getfattr --only-values -n user.marfa.type vault/d/e/Plan.md vault/d/run.sh").out == "core.notecore.file")
            #expect(a.sh("rsync -a --itemize-changes '\(src)/' vault/").out == "", "nothing to send again")
            #expect(a.sql("SELECT count(*) FROM items") == "3")
            #expect(a.sql("SELECT count(*) FROM items WHERE file_name LIKE '.%'") == "0", "no temporary name was ever stored")
            #expect(a.sql("SELECT count(*) FROM mutations WHERE payload LIKE '%.Plan.md.%' OR payload LIKE '%.run.sh.%'") == "0")
            #expect(MountHarness.eventually { a.sh("ls backlinks/core.note/Other.md/references").out == "Plan.md" }, "the link of the moved file is read")
            // The other mount: the same names, bits and times, and nothing of the temporary names.
            #expect(MountHarness.eventually { shown(b) == want }, "\(shown(b))\n\(b.sh("ls -laR vault").out)")
            #expect(b.sh("find vault -name '.*' | wc -l").out == "0")
            #expect(b.sh("sh vault/d/run.sh").out == "ran")
        }
    }

    /// FS-14, FS-32: a temporary name that happens to look like a swap file's (rsync's
    /// `.n.md.abcsw4`, one name in a few thousand) is a scratch file; renamed to a free name, it
    /// becomes the note, with its bytes, bits and time, among files still being staged, and the
    /// scratch name is gone, here, after a crash of the daemon and on the next mount. Its tags
    /// (front matter and inline) and its links show at once: the note is made settled.
    @Test func FS32_aSwapLookingTemporaryFileRenamedToItsNameBecomesTheNote() throws {
        try MountHarness.with { h in
            let made = h.sh("""
                mkdir vault/d && cd vault/d && for i in $(seq 1 40); do printf 'n%s\n' $i > n$i.md; done
                printf -- '---\ntags: [kept]\n---\n# Kept #inl\nsee [[n1]]\n' > .kept.md.abcsw4 && chmod 640 .kept.md.abcsw4
                touch -d '2020-01-02 03:04:05 UTC' .kept.md.abcsw4 && mv .kept.md.abcsw4 kept.md
                """)
            #expect(made.status == 0, "\(made.stderr)")
            func check(_ when: String) {
                #expect(h.sh("cat vault/d/kept.md").out == "---\ntags: [kept]\n---\n# Kept #inl\nsee [[n1]]", "\(when)")
                #expect(h.sh("stat -c '%a %Y' vault/d/kept.md").out == "640 1577934245", "\(when)")
                #expect(h.sh("ls -a vault/d | grep -c sw4").out == "0", "\(when)")
                #expect(h.sh("cat vault/d/n*.md | wc -l").out == "40", "\(when)")
                #expect(h.sh("ls tags/kept; ls tags/inl | grep -cx kept.md").out == "kept.md\n1", "\(when)")
            }
            check("at once")
            #expect(h.sh("ls backlinks/core.note/n1.md/references").out == "kept.md")
            // Committed before its rename: the same, from its row.
            #expect(h.sh("printf -- '---\\ntags: [late]\\n---\\n# Late #inl\\nsee [[n2]]\\n' > vault/d/.late.md.xyzswp").status == 0)
            #expect(MountHarness.eventually { h.sql("SELECT count(*) FROM scratch") == "1" }, "committed")
            #expect(h.sh("mv vault/d/.late.md.xyzswp vault/d/late.md").status == 0)
            #expect(h.sh("ls tags/late; ls tags/inl").out == "late.md\nkept.md\nlate.md")
            #expect(h.sh("ls backlinks/core.note/n2.md/references").out == "late.md")
            #expect(h.sql("SELECT count(*) FROM scratch") == "0")
            h.killDaemon()
            try h.mount()
            check("after a kill -9 and a mount")
            #expect(MountHarness.eventually { h.sh("ls backlinks/core.note/n1.md/references 2>/dev/null").out == "kept.md" })
            #expect(h.sql("SELECT count(*) FROM items WHERE file_name LIKE '%sw4%'") == "0")
        }
    }

    @Test func FS31_ownerTimesAndCtime() throws {
        try MountHarness.with { h in
            #expect(h.sh("printf 'a\\n' > vault/n.md").status == 0)
            let before = h.sh("stat -c %Z vault/n.md").out
            usleep(1_100_000)
            #expect(h.sh("chmod 640 vault/n.md").status == 0)
            let after = h.sh("stat -c %Z vault/n.md").out
            #expect(Int(after)! > Int(before)!, "chmod changes the ctime")
            #expect(h.sh("stat -c %Y vault/n.md").out == before, "and not the mtime")
            // The owner: the mount's user's until a `chown`, which is kept, for a file and a folder,
            // across a remount; the views' own directories stay the mount's.
            #expect(h.sh("mkdir vault/o && chown 12345:23456 vault/n.md && chgrp 34567 vault/o").status == 0)
            #expect(h.sh("stat -c '%u:%g' vault/n.md vault/o").out == "12345:23456\n\(getuid()):34567")
            #expect(h.sh("stat -c '%u:%g' types/core.note/n.md").out == "12345:23456", "the same file in types/")
            #expect(h.sh("chown 12345 types/core.note").status != 0)
            h.unmount()
            try h.mount()
            #expect(h.sh("mv vault/o vault/o2 && stat -c '%u:%g' vault/n.md vault/o2").out == "12345:23456\n\(getuid()):34567")
            #expect(h.sh("chown \(getuid()):\(getgid()) vault/n.md && stat -c '%u:%g' vault/n.md").out == "\(getuid()):\(getgid())")
            #expect(h.sql("SELECT count(*) FROM owners") == "0", "the mount's own user is kept as no owner at all")
            // A file renamed over another keeps its own owner, as on a disk (an editor's save).
            #expect(h.sh("printf s > vault/s.md && chown 12345 vault/s.md && printf t > vault/t.md && mv vault/s.md vault/t.md && stat -c %u vault/t.md").out == "12345")
            #expect(h.sh("printf u > vault/u.md && mv vault/u.md vault/t.md && stat -c %u vault/t.md").out == "\(getuid())")
            // The access time is kept as set.
            #expect(h.sh("touch -a -d '2021-03-04 05:06:07 UTC' vault/n.md && stat -c %X vault/n.md").out == "1614834367")
            // A folder's time follows the names in it.
            let folder = h.sh("mkdir vault/d && stat -c %Y vault/d").out
            usleep(1_100_000)
            #expect(h.sh("printf 'b\\n' > vault/d/b.md").status == 0)
            #expect(Int(h.sh("stat -c %Y vault/d").out)! > Int(folder)!)
        }
    }

    @Test func FS31_allowOtherLetsAnotherUserInAndModesDecide() throws {
        let nobody = "runuser -u nobody --"
        try MountHarness.with { h in
            #expect(h.sh("printf 'open\\n' > vault/open.md").status == 0)
            #expect(h.sh("\(nobody) cat '\(h.mountpoint)/vault/open.md'").status != 0, "a mount is its user's alone by default")
        }
        try MountHarness.with(options: ["--allow-other"]) { h in
            // The other user reaches the mount point through the test's own folders.
            let base = URL(fileURLWithPath: h.root).deletingLastPathComponent().path
            #expect(Shell.run(["/bin/chmod", "o+x", base, h.root]).status == 0)
            #expect(h.sh("printf 'open\\n' > vault/open.md && printf 'closed\\n' > vault/closed.md && chmod 600 vault/closed.md").status == 0)
            #expect(h.sh("\(nobody) cat '\(h.mountpoint)/vault/open.md'").out == "open")
            let denied = h.sh("\(nobody) cat '\(h.mountpoint)/vault/closed.md'")
            #expect(denied.status != 0 && denied.stderr.contains("Permission denied"))
            // What another user makes is theirs; a file given to them is theirs to read, and a
            // folder of theirs in a sticky one keeps its files from others, as on a disk.
            let (u, g) = (h.sh("id -u nobody").out, h.sh("id -g nobody").out)
            #expect(h.sh("mkdir -m 1777 vault/shared && chown nobody vault/closed.md").status == 0)
            #expect(h.sh("\(nobody) cat '\(h.mountpoint)/vault/closed.md'").out == "closed")
            #expect(h.sh("\(nobody) sh -c 'cd \(h.mountpoint)/vault/shared && echo mine > n.md && mkdir d && ln -s n.md s && mkfifo p'").status == 0)
            #expect(h.sh("cd vault/shared && stat -c '%n %u:%g' n.md d s p").out == "n.md \(u):\(g)\nd \(u):\(g)\ns \(u):\(g)\np \(u):\(g)")
            #expect(h.sh("printf 'root\\n' > vault/shared/r.md && chmod 666 vault/shared/r.md").status == 0)
            let sticky = h.sh("\(nobody) rm -f '\(h.mountpoint)/vault/shared/r.md'")
            #expect(sticky.status != 0 && sticky.stderr.contains("Operation not permitted"), "\(sticky.stderr)")
            #expect(h.sh("\(nobody) rm '\(h.mountpoint)/vault/shared/n.md'").status == 0)
        }
    }

    /// A mode set on one mount shows on the other (`fs.stat`).
    @Test func FS31_permissionBitsSync() throws {
        try MountPair.with { p in
            #expect(p.a.sh("printf '#!/bin/sh\\n' > vault/tool.sh && chmod 750 vault/tool.sh").status == 0)
            #expect(MountHarness.eventually { p.b.sh("stat -c %a vault/tool.sh").out == "750" }, "\(p.b.sh("stat -c %a vault/tool.sh").out)")
            #expect(p.b.sh("chmod 644 vault/tool.sh").status == 0)
            #expect(MountHarness.eventually { p.a.sh("stat -c %a vault/tool.sh").out == "644" })
        }
    }

    /// `ln -s` in the tree makes a symlink with its target exact, whatever it names; the other
    /// mount shows it, a rename and a removal travel, and export and import keep it a symlink.
    @Test func FS31_symlinksInTheTreeRoundTripThroughTheServerAndExport() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            #expect(a.sh("mkdir -p vault/d && printf 'hi\\n' > vault/d/n.md && ln -s n.md vault/d/alias.md && ln -s '../no such/ü target' vault/dangling").status == 0)
            #expect(a.sh("readlink vault/d/alias.md vault/dangling && cat vault/d/alias.md").out == "n.md\n../no such/ü target\nhi")
            #expect(MountHarness.eventually { b.sh("readlink vault/d/alias.md vault/dangling").out == "n.md\n../no such/ü target" },
                    "\(b.sh("ls -la vault/ vault/d").out)")
            #expect(b.sh("test -L vault/d/alias.md && cat vault/d/alias.md").out == "hi")
            #expect(b.sh("mv vault/dangling vault/d/moved && rm vault/d/alias.md").status == 0)
            #expect(MountHarness.eventually { a.sh("ls vault/d").out == "moved\nn.md" })
            #expect(a.sh("readlink vault/d/moved").out == "../no such/ü target")
            // Export writes the symlink; import brings one back as a symlink.
            a.unmount()
            let out = a.root + "/exported"
            #expect(Shell.run([MountHarness.binary, "export", out, "--store", a.store]).status == 0)
            #expect(Shell.run(["/usr/bin/readlink", out + "/d/moved"]).out == "../no such/ü target")
            let other = try MountHarness()
            defer { try? FileManager.default.removeItem(atPath: other.root) }
            #expect(Shell.run([MountHarness.binary, "import", out, "--store", other.store]).status == 0)
            try other.mount()
            defer { other.unmount() }
            #expect(other.sh("readlink vault/d/moved && cat vault/d/n.md").out == "../no such/ü target\nhi")
        }
    }

    /// A name longer than 255 bytes is ENAMETOOLONG wherever it is used, as on a disk.
    @Test func FS31_aNameTooLongIsENAMETOOLONG() throws {
        try MountHarness.with { h in
            let long = String(repeating: "n", count: 256)
            for cmd in ["stat vault/\(long)", "truncate -s 1 vault/\(long)", "mkdir vault/\(long)", "cat vault/\(long)"] {
                let r = h.sh(cmd)
                #expect(r.status != 0 && r.stderr.contains("File name too long"), "\(cmd): \(r.stderr)")
            }
        }
    }

    /// `rsync` and editors rename a file into its name within the tree. The kernel moved its entry
    /// there itself: the mount does not make it forget the entry, so the next call on the name asks
    /// no lookup (counted by `.marfafs/requests`, read from its start on one descriptor before and
    /// after: opening it again costs lookups that come or not as the kernel's entries age).
    @Test func FS32_aFileRenamedInTheTreeKeepsItsEntryInTheKernel() throws {
        try MountHarness.with { m in
            #expect(m.sh("mkdir vault/r && printf 'x\\n' > vault/r/.a.md.tmp && mv vault/r/.a.md.tmp vault/r/a.md && mv vault/r/a.md vault/b.md").status == 0)
            usleep(300_000)   // the notifier's thread has sent what it was given
            let lookups = m.sh("""
                python3 -c '
                import os
                fd = os.open(".marfafs/requests", os.O_RDONLY)
                def lookups():
                    return next(int(l.split()[1]) for l in os.pread(fd, 1 << 16, 0).decode().splitlines() if l.split()[0] == "lookup")
                before = lookups()
                os.stat("vault/b.md")
                with open("vault/b.md") as f: f.read()
                print(lookups() - before)'
                """)
            #expect(lookups.out == "0", "\(lookups.out) \(lookups.stderr)")
            #expect(m.sh("ls vault/r vault").out.contains("b.md") && m.sh("ls -A vault/r").out.isEmpty)
        }
    }
}
