import Foundation
import MarfaTestSupport
import Testing

/// The vault's tree behaves as a disk (FS-31): a folder keeps its inode for its life, a process's
/// working directory survives what happens around it, an emptied folder can be removed.
@Suite struct TreeDiskTests {
    func ino(_ m: MountHarness, _ path: String) -> String { m.sh("stat -c %i '\(path)'").out }

    /// A shell that sits in `folder` of `m` and prints `pwd -P` `times` times, `every` seconds
    /// apart, while `change` runs; the lines it printed (FAIL where `getcwd` failed).
    func workingDirectory(_ m: MountHarness, _ folder: String, times: Int, every: Double, during change: () throws -> Void) throws -> [String] {
        let out = m.root + "/pwd.out"
        let script = "cd '\(m.mountpoint)/\(folder)' || exit 9; for i in $(seq 1 \(times)); do /bin/pwd -P || echo FAIL; ls > /dev/null; sleep \(every); done > '\(out)' 2>&1"
        let pid = try #require(Shell.spawn(["/bin/sh", "-c", script]))
        try change()
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        return ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    @Test func FS31_gitInitAddCommitInAFolderMadeThroughTheMount() throws {
        try MountHarness.with { h in
            let git = "git -c user.name=t -c user.email=t@example.com"
            let r = h.sh("mkdir vault/notes2 && cd vault/notes2 && git init -q && printf 'one\\n' > a.md && mkdir d && printf 'two\\n' > d/b.md"
                         + " && \(git) add -A && \(git) commit -qm first && printf 'three\\n' >> a.md && \(git) commit -qam second"
                         + " && git status --porcelain && git log --oneline | wc -l && /bin/pwd -P")
            #expect(r.status == 0, "\(r.stderr)")
            #expect(r.out == "2\n\(h.mountpoint)/.marfafs/vault/notes2", "a clean status, two commits, the folder's path")
        }
    }

    @Test func FS31_aFolderKeepsItsInodeThroughItsFirstAndLastEntryARenameAndARemount() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        #expect(h.sh("mkdir -p vault/a/b").status == 0)
        let (a, b) = (ino(h, "vault/a"), ino(h, "vault/a/b"))
        #expect(h.sh("printf 'x\\n' > vault/a/b/n.md && printf 'y\\n' > vault/a/m.md").status == 0)
        #expect(ino(h, "vault/a") == a && ino(h, "vault/a/b") == b, "the first entries")
        // Every entry that names the folder agrees: its parent's listing, `.` and `..`.
        #expect(h.sh("ls -ai vault | awk '$2 == \"a\" {print $1}'").out == a)
        #expect(h.sh("stat -c %i vault/a/. vault/a/b/..").out == "\(a)\n\(a)")
        #expect(h.sh("rm vault/a/b/n.md vault/a/m.md").status == 0)
        #expect(ino(h, "vault/a") == a && ino(h, "vault/a/b") == b, "the last entries")
        #expect(h.sh("mv vault/a vault/c").status == 0)
        #expect(ino(h, "vault/c") == a && ino(h, "vault/c/b") == b, "a rename takes the folder and its sub-folders along")
        h.unmount()
        try h.mount()
        #expect(ino(h, "vault/c") == a && ino(h, "vault/c/b") == b, "a remount")
        // A removed folder's number is not the next folder's of that name.
        #expect(h.sh("rmdir vault/c/b && mkdir vault/c/b").status == 0)
        #expect(ino(h, "vault/c/b") != b)
    }

    /// A shell in a folder whose contents change, and in a folder renamed under it: `pwd -P`
    /// (`getcwd`) keeps answering, with the folder's new path after the rename.
    @Test func FS31_aWorkingDirectorySurvivesChangesAroundItAndARename() throws {
        try MountHarness.with { h in
            #expect(h.sh("mkdir -p vault/w/inner").status == 0)
            // The process stays in the folder while the test changes it.
            let lines = try workingDirectory(h, "vault/w/inner", times: 6, every: 0.4) {
                usleep(200_000)
                #expect(h.sh("mkdir vault/w/inner/d1 && printf 'x\\n' > vault/w/inner/d1/y.md && printf 'z\\n' > vault/w/inner/z.md").status == 0)
                usleep(500_000)
                #expect(h.sh("rm vault/w/inner/z.md vault/w/inner/d1/y.md && rmdir vault/w/inner/d1").status == 0)
                usleep(500_000)
                #expect(h.sh("mv vault/w vault/w2").status == 0)
            }
            #expect(lines.count == 6 && !lines.contains("FAIL"), "\(lines)")
            #expect(lines.first == h.mountpoint + "/.marfafs/vault/w/inner")
            #expect(lines.last == h.mountpoint + "/.marfafs/vault/w2/inner")
        }
    }

    /// The listings the kernel keeps of other directories (`tags/`, `vault/`) are dropped before
    /// the call returns, even with the daemon's invalidation thread held back half a second.
    @Test func FS31_removingAFoldersFilesEmptiesItAndARestorePutsItBack() throws {
        try MountHarness.with(environment: ["MARFAFS_NOTIFY_DELAY_MS": "500"]) { h in
            #expect(h.sh("mkdir -p vault/f vault/g/h && printf 'a\\n' > vault/f/a.md && printf 'b\\n' > vault/f/b.md && printf 'c\\n' > vault/g/h/c.md").status == 0)
            // Listed first, so the kernel keeps these listings: the removals must make it forget them.
            #expect(h.sh("ls tags vault").out.contains("folder:g"))
            let r = h.sh("rm vault/f/* && rmdir vault/f && rm -r vault/g && ls vault | wc -l")
            #expect(r.status == 0 && r.out == "0", "\(r.stderr)")
            #expect(h.sh("ls trash/core.note | sort").out == "a.md\nb.md\nc.md")
            #expect(h.sh("ls tags").out.isEmpty, "a tag only trashed items have is not in use")
            // The trash remembers the folder: a restore makes it again, with the file in it.
            #expect(h.sh("mv trash/core.note/c.md types/core.note/").status == 0)
            #expect(h.sh("cat vault/g/h/c.md").out == "c")
            #expect(h.sh("ls vault").out == "g")
        }
    }

    /// Another mount changes the folder a shell of this mount sits in: the shell keeps it.
    @Test func FS31_aWorkingDirectorySurvivesRemoteChanges() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            #expect(a.sh("mkdir -p vault/shared && printf 'one\\n' > vault/shared/one.md").status == 0)
            #expect(MountHarness.eventually { b.sh("cat vault/shared/one.md").out == "one" })
            let lines = try workingDirectory(b, "vault/shared", times: 20, every: 0.25) {
                #expect(a.sh("printf 'two\\n' > vault/shared/two.md && mkdir vault/shared/sub && printf 's\\n' > vault/shared/sub/s.md").status == 0)
                #expect(MountHarness.eventually { b.sh("cat vault/shared/sub/s.md").out == "s" })
                #expect(a.sh("rm vault/shared/one.md vault/shared/sub/s.md").status == 0)
                #expect(MountHarness.eventually { b.sh("ls vault/shared").out == "two.md" })
            }
            #expect(lines.count == 20 && Set(lines) == [b.mountpoint + "/.marfafs/vault/shared"], "\(lines)")
        }
    }

    /// A folder path far past a tag's 128 characters, and one with a comma, with notes in them:
    /// the other mount shows them where they are, and a move between them travels.
    @Test func FS31_folderPathsOfAnyLengthSyncToTheOtherMount() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            let deep = (1...6).map { "level-\($0)-" + String(repeating: "x", count: 42) }.joined(separator: "/")
            #expect(deep.utf8.count > 300)
            #expect(a.sh("mkdir -p 'vault/\(deep)' 'vault/a, b' && printf 'deep\\n' > 'vault/\(deep)/n.md' && printf 'c\\n' > 'vault/a, b/c.md'").status == 0)
            #expect(a.sh("cat 'vault/\(deep)/n.md' 'vault/a, b/c.md'").out == "deep\nc")
            #expect(MountHarness.eventually { b.sh("cat 'vault/\(deep)/n.md' 'vault/a, b/c.md'").out == "deep\nc" },
                    "\(b.sh("find vault/ | head -20").out)")
            #expect(b.sh("find vault/ -type f | sort").out == "vault/a, b/c.md\nvault/\(deep)/n.md")
            // The other way, and a move from the long folder into the one with a comma.
            #expect(b.sh("printf 'b\\n' > 'vault/\(deep)/from-b.md' && mv 'vault/\(deep)/n.md' 'vault/a, b/'").status == 0)
            #expect(MountHarness.eventually { a.sh("ls 'vault/a, b' && cat 'vault/\(deep)/from-b.md'").out == "c.md\nn.md\nb" },
                    "\(a.sh("find vault/ | head -20").out)")
        }
    }

    /// stress-ng's filesystem stressors, twenty at once with verification, in a folder of the
    /// tree: every one completes without a failure, the mount answers after, and what they leave
    /// behind is gone. (A large file being written while folders came and went was copied into
    /// the cache for every `mkdir` nearby, which made writing it quadratic.)
    @Test func FS31_stressNgFilesystemStressorsPassWithVerificationOnTheTree() throws {
        try MountHarness.with { h in
            // The stressors that go through the filesystem (not flock, lockf or mmap, which the
            // kernel answers itself and which would only spin the CPU the rest of the suite needs).
            let stressors = "--hdd 1 --hdd-bytes 32M --dentry 1 --dir 1 --dirdeep 1 --rename 1 --chmod 1 --utime 1"
                + " --fallocate 1 --fallocate-bytes 16M --symlink 1 --filename 1 --open 1 --seek 1 --seek-size 16M"
                + " --copy-file 1 --copy-file-bytes 128M --getdent 1 --fcntl 1 --fsize 1 --fstat 1 --access 1"
                + " --sync-file 1 --sync-file-bytes 16M"
            let r = h.sh("mkdir vault/stress && cd vault/stress && timeout -k 10 300 stress-ng --temp-path . \(stressors) --verify -t 8 2>&1")
            #expect(r.status == 0, "\(r.out)")
            #expect(r.out.contains("successful run completed"), "\(r.out)")
            #expect(!r.out.contains("fail:"), "\(r.out)")
            #expect(h.sh("ls -A vault/stress").out == "", "the stressors' files are gone")
            #expect(h.sh("printf 'after\\n' > vault/stress/n.md && cat vault/stress/n.md").out == "after")
        }
    }

    /// `fallocate(2)`: an allocation grows the file with zeros (or keeps its size when asked), a
    /// punched hole and a zeroed range read as zeros, collapsing a range is EOPNOTSUPP, and an
    /// allocation past the disk's room is ENOSPC; nothing changes on a refusal.
    @Test func FS31_fallocateGrowsPunchesAndZeroesAndRefusesWhatItCannot() throws {
        try MountHarness.with { h in
            let f = "vault/alloc.bin"
            #expect(h.sh("fallocate -l 100000 \(f) && stat -c %s \(f) && od -An -c -N4 \(f)").out == "100000\n  \\0  \\0  \\0  \\0")
            #expect(h.sh("printf abcdefghij | dd of=\(f) conv=notrunc status=none && fallocate -p -o 2 -l 3 \(f) && head -c 10 \(f) | od -An -c").out
                    == "a   b  \\0  \\0  \\0   f   g   h   i   j")
            #expect(h.sh("fallocate -z -o 99990 -l 20 \(f) && stat -c %s \(f)").out == "100010", "a zeroed range past the end grows the file")
            #expect(h.sh("fallocate -n -l 1M \(f) && stat -c %s \(f)").out == "100010", "FALLOC_FL_KEEP_SIZE")
            let collapse = h.sh("fallocate -c -o 0 -l 4096 \(f)")
            #expect(collapse.status != 0 && collapse.stderr.contains("not supported"), "\(collapse.stderr)")
            let huge = h.sh("fallocate -l 100T \(f)")
            #expect(huge.status != 0 && huge.stderr.contains("No space left"), "\(huge.stderr)")
            #expect(h.sh("stat -c %s \(f) && head -c 2 \(f)").out == "100010\nab", "nothing changed")
        }
    }

    /// Permission bits all clear are kept as such (a stored 0 used to mean the default): made so
    /// by `open(O_CREAT, 0)` or by `chmod 000`, on a file and a folder, across a remount; a folder
    /// made now has the times of now (pjdfstest open/26, mkdir/00).
    @Test func FS31_noPermissionBitsAreKeptAndANewFolderHasTheTimeOfNow() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        #expect(h.sh("python3 -c \"import os; os.close(os.open('vault/made0', os.O_CREAT | os.O_WRONLY, 0))\" && printf x > vault/later && chmod 000 vault/later && mkdir vault/d && chmod 000 vault/d").status == 0)
        #expect(h.sh("stat -c '%a %n' vault/made0 vault/later vault/d").out == "0 vault/made0\n0 vault/later\n0 vault/d")
        #expect(h.sh("chmod 640 vault/later && stat -c %a vault/later").out == "640")
        #expect(h.sh("chmod 000 vault/later").status == 0)
        let before = Int(h.sh("date +%s").out) ?? 0
        sleep(1)
        #expect(h.sh("mkdir vault/fresh").status == 0)
        let times = h.sh("stat -c '%X %Y %Z' vault/fresh").out.split(separator: " ").compactMap { Int($0) }
        #expect(times.count == 3 && times.allSatisfy { $0 > before }, "\(times) after \(before)")
        h.unmount()
        try h.mount()
        #expect(h.sh("stat -c '%a %n' vault/made0 vault/later vault/d").out == "0 vault/made0\n0 vault/later\n0 vault/d", "across a remount")
    }
    /// A folder's link count is 2 and one per folder in it, as a disk counts them, tree folders and
    /// local-only ones alike, before and after a folder moves between them (pjdfstest rename/24);
    /// `tags/` counts its tag directories.
    @Test func FS31_aFoldersLinkCountCountsTheFoldersInIt() throws {
        try MountHarness.with { h in
            #expect(h.sh("mkdir -p vault/p/src vault/q && printf 'x\\n' > vault/p/n.md").status == 0)
            #expect(h.sh("stat -c %h vault/p vault/q").out == "3\n2")
            #expect(h.sh("mv vault/p/src vault/q/dst && stat -c %h vault/p vault/q").out == "2\n3")
            #expect(h.sh("mkdir -p vault/q/.git/objects && stat -c %h vault/q vault/q/.git").out == "4\n3", "a local-only folder counts")
            #expect(h.sh("rmdir vault/q/dst && stat -c %h vault/q").out == "3")
            let tags = Int(h.sh("ls -d tags/*/ | wc -l").out) ?? -1
            #expect(h.sh("stat -c %h tags").out == "\(tags + 2)")
        }
    }
    /// A listing's entries whose inodes the kernel already holds come without attributes (FS-31:
    /// so it keeps their cached POSIX ACLs, and `ls -l` does not ask for each again); what a
    /// listing shows after the kernel dropped its cached pages (a page-cache drop, memory
    /// reclaim) is still every entry with its type, size and mode, including one changed through
    /// another path and one renamed since.
    @Test func FS31_aListingAfterThePageCacheWentShowsEveryEntryAsItIs() throws {
        try MountHarness.with { h in
            #expect(h.sh("mkdir -p vault/d/sub && for i in $(seq 1 40); do printf 'n%s\\n' $i > vault/d/n$i.md; done && ln -s n1.md vault/d/link && chmod 600 vault/d/n2.md").status == 0)
            #expect(h.sh("ls -l vault/d > /dev/null && ls -l types/core.note > /dev/null").status == 0)
            // Changed elsewhere, and renamed, after the kernel took the entries in.
            #expect(h.sh("printf 'longer text now\\n' > types/core.note/n3.md && mv vault/d/n4.md vault/d/moved.md").status == 0)
            let root = h.sh("id -u").out == "0"
            if root { #expect(h.sh("sync && echo 1 > /proc/sys/vm/drop_caches").status == 0) }
            let listed = h.sh("ls -l vault/d | awk 'NR > 1 {print substr($1, 1, 10), $5, $9}'").out.split(separator: "\n")
            #expect(listed.count == 42, "\(listed)")
            #expect(listed.contains("-rw-r--r-- 16 n3.md"), "the size written through types/")
            #expect(listed.contains("-rw------- 3 n2.md"))
            #expect(listed.contains("-rw-r--r-- 3 moved.md") && !listed.contains { $0.hasSuffix(" n4.md") })
            #expect(listed.contains { $0.hasPrefix("lrwxrwxrwx") && $0.hasSuffix(" link") })
            #expect(listed.contains { $0.hasPrefix("drwxr-xr-x") && $0.hasSuffix(" sub") })
            #expect(h.sh("find vault/d -type f | wc -l; find vault/d -type d | wc -l; find vault/d -type l | wc -l").out == "40\n2\n1")
        }
    }

    /// Notes moved to another folder of the tree and back right after they were copied in, while
    /// the settler is still taking them: each keeps every byte, its own tags included (a move that
    /// took the note's tags from what the mount had seen of it so far wrote them out of the text).
    @Test func FS27_notesMovedRightAfterACopyKeepTheirTags() throws {
        try MountHarness.with { m in
            let src = m.root + "/src"
            let make = "mkdir -p \(src) && for i in $(seq 1000 2999); do printf -- '---\\ntitle: Note %s\\ntags: [alpha, beta%s]\\n---\\nbody %s #inline\\n' $i $i $i > \(src)/n$i.md; done"
            #expect(Shell.run(["/bin/bash", "-c", make]).status == 0)
            let r = m.sh("rsync -a \(src)/ vault/r/ && mkdir vault/b && mv vault/r/n1* vault/b/ && mv vault/b/* vault/r/ && diff -r \(src) vault/r")
            #expect(r.status == 0, "\(r.out.prefix(600))")
            _ = m.sh("cat .marfafs/status")
            #expect(m.sh("diff -r \(src) vault/r").status == 0, "settled")
            // rsync's temporary names look like swap files' now and then (`.n2134.md.Xabswp`,
            // FS-14): the notes made from them are listed under their tags too.
            #expect(m.sh("ls tags/alpha | wc -l; ls tags/inline | wc -l").out == "2000\n2000")
        }
    }
}
