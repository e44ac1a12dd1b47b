import Foundation
import MarfaTestSupport
import Testing

/// FIFOs, sockets and device nodes in the vault's tree (FS-32): made with `mkfifo`, `bind(2)`
/// and `mknod`, they live among the local-only files whatever their name, work as the kernel's
/// own, and are never items; `rename(2)` and `link(2)` keep them local, over a tree file too.
@Suite struct SpecialFilesTests {
    /// `os.rename`/`os.link` through Python: `mv` and `ln` would fall back to a copy on EXDEV.
    func py(_ h: MountHarness, _ code: String) -> Shell.Result {
        h.sh("python3 -c \"import os, socket, errno\ntry:\n  \(code)\n  print('ok')\nexcept OSError as e:\n  print(errno.errorcode[e.errno])\"")
    }

    @Test func FS32_aFIFOASocketAndADeviceNodeInTheTreeAreLocalAndWork() throws {
        try MountHarness.with { h in
            #expect(h.sh("mkdir vault/d && printf n > vault/d/n.md && mkfifo vault/d/p && stat -c %F vault/d/p").out == "fifo")
            // The kernel's own FIFO: what one process writes, another reads.
            let out = h.root + "/fifo-out"
            #expect(h.sh("(cat vault/d/p > '\(out)' &) ; printf hello > vault/d/p; sleep 0.2; cat '\(out)'").out == "hello")
            #expect(py(h, "s = socket.socket(socket.AF_UNIX); s.bind('vault/d/s')").out == "ok")
            #expect(h.sh("stat -c %F vault/d/s").out == "socket")
            // A device node needs privilege, as on any disk (and opens nothing: FUSE mounts are `nodev`).
            let root = h.sh("id -u").out == "0"
            let dev = h.sh("mknod vault/d/null c 1 3 && stat -c '%F %t,%T' vault/d/null")
            #expect(root ? dev.out == "character special file 1,3" : dev.status != 0, "\(dev.stdout) \(dev.stderr)")
            #expect(h.sh("ls vault/d").out == (root ? "n.md\nnull\np\ns" : "n.md\np\ns"))
            // Never items: only the note is one.
            #expect(MountHarness.eventually { h.sql("SELECT group_concat(file_name) FROM items") == "n.md" })
            #expect(h.sql("SELECT count(*) FROM mutations WHERE payload LIKE '%\"p\"%'") == "0")
            #expect(h.sh("test -p '\(h.store)-local/d/p'").status == 0, "the FIFO is on the local disk")
            // Only the tree holds them.
            #expect(h.sh("mkfifo types/core.note/q").status != 0)
            #expect(h.sh("ls types/core.note").out == "n.md")

            // rename(2) keeps a FIFO local, to another folder and over a tree file (which goes);
            // a tree file moved over one takes its name.
            #expect(py(h, "os.rename('vault/d/p', 'vault/p2')").out == "ok")
            #expect(h.sh("printf t > vault/d/t.md").status == 0)
            #expect(py(h, "os.rename('vault/p2', 'vault/d/t.md')").out == "ok")
            #expect(h.sh("stat -c %F vault/d/t.md && ls vault").out == "fifo\nd")
            #expect(py(h, "os.rename('vault/d/n.md', 'vault/d/t.md')").out == "ok")
            #expect(h.sh("stat -c %F vault/d/t.md && cat vault/d/t.md").out == "regular file\nn")
            #expect(MountHarness.eventually { h.sql("SELECT group_concat(file_name) FROM items WHERE state = 'active'") == "t.md" })

            // A hard link of one is the disk's own; a folder holding one is not empty.
            #expect(h.sh("mkdir vault/e vault/f && mkfifo vault/f/p").status == 0)
            #expect(py(h, "os.link('vault/f/p', 'vault/f/p2')").out == "ok")
            #expect(h.sh("stat -c %h vault/f/p").out == "2")
            #expect(py(h, "os.rename('vault/e', 'vault/f')").out == "ENOTEMPTY")
            #expect(h.sh("rmdir vault/f").status != 0)
            #expect(h.sh("ls vault").out == "d\ne\nf")

            // Across a remount they are where they were.
            h.unmount()
            try h.mount()
            #expect(h.sh("stat -c %F vault/f/p vault/d/s").out == "fifo\nsocket")
            #expect(h.sh("rm vault/f/p vault/f/p2 && rmdir vault/f && ls vault").out == "d\ne")
        }
    }
    /// Local-only files deeper than PATH_MAX from `/` (pjdfstest mkfifo/03, mknod/03): the tree
    /// takes any depth relative to a working directory, and so does the local disk below it. A
    /// FIFO, a `.git` folder with a file, its attribute, a rename and a removal at the bottom of
    /// 17 folders of 250 bytes each, reached a folder at a time.
    @Test func FS32_localFilesDeeperThanPathMaxWorkAsOnADisk() throws {
        try MountHarness.with { h in
            let script = """
            import os
            name = 'd' * 250
            os.chdir('vault')
            for _ in range(17):
                os.mkdir(name); os.chdir(name)
            os.mkfifo('p', 0o640)
            os.mkdir('.git'); os.chdir('.git')
            with open('HEAD', 'w') as f: f.write('ref: main')
            os.setxattr('HEAD', 'user.k', b'v', follow_symlinks=False)
            os.rename('HEAD', 'HEAD2'); os.symlink('HEAD2', 'L')
            print(os.path.getsize('HEAD2'), open('HEAD2').read(), os.getxattr('HEAD2', 'user.k').decode(), os.readlink('L'),
                  sorted(os.listdir('.')), oct(os.stat('../p').st_mode & 0o7777))
            os.unlink('L'); os.unlink('HEAD2'); os.chdir('..'); os.rmdir('.git'); os.unlink('p')
            print(sorted(os.listdir('.')))
            """
            try script.write(toFile: h.root + "/deep.py", atomically: true, encoding: .utf8)
            let r = h.sh("python3 '\(h.root)/deep.py'")
            #expect(r.status == 0, "\(r.stderr)")
            #expect(r.out == "9 ref: main v HEAD2 ['HEAD2', 'L'] 0o640\n[]", "\(r.out)")
            #expect(MountHarness.eventually { h.sql("SELECT count(*) FROM items WHERE file_name IN ('p', 'HEAD', 'HEAD2')") == "0" })
        }
    }
}
