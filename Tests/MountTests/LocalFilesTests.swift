import Foundation
import MarfaTestSupport
import Testing

/// Local-only directories (FS-32): a git repository made in the vault's tree lives on the local
/// disk beside the store, exactly where git put it, and never becomes items, mutations or tags.
@Suite struct LocalFilesTests {
    let git = "git -c user.name=t -c user.email=t@example.com"

    @Test func FS32_aGitRepositoryInTheTreeStaysLocalAndWorks() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            let r = a.sh("mkdir vault/notes2 && cd vault/notes2 && git init -q && printf 'one\\n' > a.md && mkdir d && printf 'two\\n' > d/b.md"
                         + " && \(git) add -A && \(git) commit -qm first && printf 'three\\n' >> a.md && \(git) commit -qam second"
                         + " && git gc -q && git fsck --no-progress && git status --porcelain && git log --oneline | wc -l")
            #expect(r.status == 0 && r.out == "2", "\(r.stdout) \(r.stderr)")
            #expect(a.sh("ls -A vault/notes2").out == ".git\na.md\nd")
            // The notes are items and travel; nothing of .git does.
            #expect(MountHarness.eventually { b.sh("cat vault/notes2/a.md vault/notes2/d/b.md").out == "one\nthree\ntwo" })
            #expect(b.sh("ls -A vault/notes2").out == "a.md\nd", "the other mount has no .git")
            #expect(a.sql("SELECT count(*) FROM items") == "2")
            #expect(a.sql("SELECT count(*) FROM tags WHERE tag LIKE '%.git%'") == "0")
            #expect(a.sql("SELECT count(*) FROM mutations WHERE payload LIKE '%.git%'") == "0")
            #expect(a.sh("ls tags").out == "folder:notes2", "\(a.sh("ls -R tags").out)")
            #expect(a.sh("test -d '\(a.store)-local/notes2/.git/objects'").status == 0, "the repository is on the local disk")
            // Hard links are the disk's own there.
            #expect(a.sh("ln vault/notes2/.git/HEAD vault/notes2/.git/HEAD2 && stat -c %h vault/notes2/.git/HEAD && rm vault/notes2/.git/HEAD2").out == "2")
            // Across a remount and a rename of its folder, the repository is the same and clean.
            a.unmount()
            try a.mount()
            #expect(a.sh("cd vault/notes2 && git status --porcelain && git log --oneline | wc -l").out == "2")
            #expect(a.sh("mv vault/notes2 vault/notes3 && cd vault/notes3 && git status --porcelain && git log --oneline | wc -l").out == "2")
            // A folder holding a repository is not empty; `rm -r` takes both away.
            let rm = a.sh("rm vault/notes3/a.md vault/notes3/d/b.md && rmdir vault/notes3/d && rmdir vault/notes3")
            #expect(rm.status != 0 && rm.stderr.contains("rmdir: failed to remove 'vault/notes3'"), "\(rm.stderr)")
            #expect(a.sh("ls -A vault/notes3").out == ".git", "\(a.sql("SELECT file_name, state, version, sync FROM items")) \(a.sql("SELECT kind, state, item_id FROM mutations"))")
            #expect(a.sh("rm -rf vault/notes3 && ls -A vault && ls -A '\(a.store)-local'").out == "")
        }
    }

    /// What `.marfafsignore` names (gitignore's syntax) is made local; other names are items.
    @Test func FS32_marfafsignoreNamesWhatStaysLocal() throws {
        try MountHarness.with { h in
            #expect(h.sh("printf '# local things\\n*.tmp\\nbuild/\\n/top-only.md\\n!keep.tmp\\n' > vault/.marfafsignore").status == 0)
            #expect(h.sh("mkdir -p vault/sub vault/build && printf a > vault/x.tmp && printf b > vault/sub/y.tmp && printf c > vault/keep.tmp"
                         + " && printf d > vault/build/out.md && printf e > vault/top-only.md && printf f > vault/sub/top-only.md && printf g > vault/n.md").status == 0)
            #expect(h.sh("cd vault && cat x.tmp sub/y.tmp keep.tmp build/out.md top-only.md sub/top-only.md n.md").out == "abcdefg")
            #expect(MountHarness.eventually {
                h.sql("SELECT group_concat(file_name, ' ') FROM (SELECT file_name FROM items ORDER BY file_name)") == ".marfafsignore keep.tmp n.md top-only.md"
            }, "\(h.sql("SELECT group_concat(file_name, ' ') FROM items"))")
            #expect(h.sh("ls '\(h.store)-local' '\(h.store)-local/sub'").out == "\(h.store)-local:\nbuild\nsub\ntop-only.md\nx.tmp\n\n\(h.store)-local/sub:\ny.tmp")
            // Local files are files like any: renamed, truncated, removed; a move to the tree is EXDEV (mv copies).
            #expect(h.sh("mv vault/x.tmp vault/z.tmp && truncate -s 0 vault/z.tmp && stat -c %s vault/z.tmp").out == "0")
            #expect(h.sh("mv vault/z.tmp vault/z.md && cat vault/z.md | wc -c").out == "0")
            #expect(MountHarness.eventually { h.sql("SELECT count(*) FROM items WHERE file_name = 'z.md'") == "1" })
        }
    }

    /// A file's own time travels (FS-32): set by `touch -d` on a settled note, and brought by
    /// `rsync -a` with a new file, the other mount shows the time the writer set.
    @Test func FS32_twoMountsAgreeOnTheTimesFilesWereGiven() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            let src = a.root + "/src"
            #expect(Shell.run(["/bin/bash", "-c", "mkdir -p '\(src)/d' && printf 'old\\n' > '\(src)/d/old.md' && touch -d '2019-03-04 05:06:07.5' '\(src)/d/old.md'"]).status == 0)
            #expect(a.sh("printf 'n\\n' > vault/n.md").status == 0)
            #expect(MountHarness.eventually { b.sh("cat vault/n.md").out == "n" })
            #expect(a.sh("touch -d '2020-01-02 03:04:05' vault/n.md && rsync -a '\(src)/' vault/").status == 0)
            let want = "2020-01-02 03:04:05.000000000 +0000 vault/n.md\n2019-03-04 05:06:07.500000000 +0000 vault/d/old.md"
            #expect(a.sh("stat -c '%y %n' vault/n.md vault/d/old.md").out == want)
            #expect(MountHarness.eventually(timeout: 20) { b.sh("stat -c '%y %n' vault/n.md vault/d/old.md").out == want },
                    "\(b.sh("stat -c '%y %n' vault/n.md vault/d/old.md; ls -la vault/d; find vault").out) A: \(a.sql("SELECT kind, state, payload FROM mutations")) \(a.sh("find vault").out)")
            // A new write is a new time, on both.
            #expect(a.sh("printf 'again\\n' >> vault/n.md").status == 0)
            #expect(MountHarness.eventually { b.sh("cat vault/n.md").out == "n\nagain" })
            #expect(!b.sh("stat -c %y vault/n.md").out.hasPrefix("2020"))
        }
    }

    /// Thousands of local-only files made, written and read: the daemon keeps a bounded number of
    /// descriptors open (it ran out at git's 20,000th object).
    @Test func FS32_manyLocalFilesKeepTheDaemonsDescriptorsBounded() throws {
        try MountHarness.with { h in
            let r = h.sh("mkdir vault/node_modules && cd vault/node_modules && for i in $(seq 1 3000); do printf \"$i\\n\" > f$i; done && cat f* | wc -l && ls | wc -l")
            #expect(r.status == 0 && r.out == "3000\n3000", "\(r.stdout) \(r.stderr)")
            let pid = try #require(h.daemonPID)
            let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? 0
            #expect(open > 0 && open < 600, "\(open) descriptors open")
            #expect(h.sql("SELECT count(*) FROM items") == "0")
        }
    }

    /// A folder of the tree with no local side is asked of the disk once (FS-32): its missing
    /// names, its link count and its listing, asked before a local folder is made in it, before
    /// a rename brings one, and before `.marfafsignore` makes a name local, are right after each.
    @Test func FS32_namesAskedBeforeALocalFolderIsMadeAreFoundAfter() throws {
        try MountHarness.with { h in
            #expect(h.sh("mkdir -p vault/p/q && stat vault/p/.git vault/p/q/.hg; stat -c %h vault/p vault/p/q").out == "3\n2")
            #expect(h.sh("cd vault/p && git init -q && stat -c %h . && ls -A && test -f .git/HEAD").out == "4\n.git\nq", "a repository made after the misses")
            #expect(h.sh("stat vault/p/q/.hg/x; mkdir vault/p/q/.hg && echo x > vault/p/q/.hg/x && cat vault/p/q/.hg/x && stat -c %h vault/p/q").out == "x\n3")
            // Moved under a folder whose missing names were asked: the folder's local side follows.
            #expect(h.sh("mkdir vault/r && stat vault/r/p; mv vault/p vault/r/p && cat vault/r/p/q/.hg/x && ls -A vault/r/p").out == "x\n.git\nq")
            #expect(h.sh("ls -A '\(h.store)-local/r/p'").out == ".git\nq")
            // A name asked for, then made local by the rules, then found.
            #expect(h.sh("mkdir vault/s && stat vault/s/a.tmp; printf '*.tmp\n' > vault/.marfafsignore && echo t > vault/s/a.tmp && cat vault/s/a.tmp && ls vault/s").out == "t\na.tmp")
            #expect(h.sh("test -f '\(h.store)-local/s/a.tmp'").status == 0, "the file is local")
            #expect(h.sql("SELECT count(*) FROM items WHERE file_name = 'a.tmp'") == "0")
        }
    }
}
