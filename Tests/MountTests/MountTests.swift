import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// Mount tests: the built binary on a temporary mount point, driven by real programs.
@Suite(.serialized) struct MountTests {
    /// The queue as `kind item_id` lines, oldest first.
    func queue(_ m: MountHarness) -> [String] {
        m.sql("SELECT kind || ' ' || item_id FROM mutations ORDER BY seq").split(separator: "\n").map(String.init)
    }

    func id(_ m: MountHarness, _ rel: String) -> String {
        m.sh("getfattr --only-values -n user.marfa.id '\(rel)'").out
    }

    @Test func FS1_everyItemHasOneRegularFileAndRelativeSymlinks() throws {
        try MountHarness.with { m in
            #expect(m.sh("printf 'alpha zettelkasten\\n' > types/core.note/a.md && printf 'beta\\n' > types/core.note/b.md").status == 0)
            #expect(m.sh("ln -s ../../types/core.note/a.md tags/reading/ 2>&1").status != 0, "no such tag yet")
            #expect(m.sh("mkdir tags/reading && ln -s ../../types/core.note/a.md tags/reading/").status == 0)
            #expect(m.sh("mkdir -p links/core.note/b.md/references && ln -s ../../../../types/core.note/a.md links/core.note/b.md/references/").status == 0)
            // grep -r and rg report the one match once: everything else is a symlink.
            #expect(m.sh("grep -r zettelkasten .").out == "./types/core.note/a.md:alpha zettelkasten")
            #expect(m.sh("rg -c zettelkasten").out == "types/core.note/a.md:1")
            #expect(m.sh("find . -type f | sort").out == "./types/core.note/a.md\n./types/core.note/b.md")
            #expect(m.sh("readlink tags/reading/a.md").out == "../../types/core.note/a.md")
            #expect(m.sh("readlink links/core.note/b.md/references/a.md").out == "../../../../types/core.note/a.md")
            #expect(m.sh("readlink backlinks/core.note/a.md/references/b.md").out == "../../../../types/core.note/b.md")
            let aid = id(m, "types/core.note/a.md")
            #expect(m.sh("readlink by-id/\(aid)").out == "../types/core.note/a.md")
            // FS-26: the tag is written into the note's front matter.
            let tagged = "---\ntags:\n  - reading\n---\nalpha zettelkasten"
            #expect(m.sh("cat tags/reading/a.md by-id/\(aid)").out == "\(tagged)\n\(tagged)")
        }
    }

    @Test func FS2_typesAndTagsAreListed() throws {
        try MountHarness.with { m in
            #expect(m.sh("ls").out == "archive\nbacklinks\nby-id\nhistory\nlinks\ntags\ntrash\ntypes\nvault")
            let types = m.sh("ls types").out.split(separator: "\n").map(String.init)
            for t in ["core.bookmark", "core.file", "core.file.image", "core.highlight", "core.note"] { #expect(types.contains(t)) }
            #expect(m.sh("mkdir tags/someday && ls tags").out == "someday")
            #expect(m.sh("ls -a .marfafs 2>/dev/null; ls -a | grep -c marfafs").out.hasSuffix("0"), ".marfafs is never listed")
            #expect(m.sh("ls .marfafs/status && cat .marfafs/status").status == 0)
        }
    }

    @Test func FS3_listingsAreSortedAndInodesSurviveARemount() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        #expect(h.sh("for n in zeta alpha Mid 'with space'; do echo $n > \"types/core.note/$n.md\"; done").status == 0)
        #expect(h.sh("setfattr -n user.marfa.tags -v t1,t2 types/core.note/alpha.md").status == 0)
        #expect(h.sh("ls -f types/core.note | grep -v '^\\.'").out == "Mid.md\nalpha.md\nwith space.md\nzeta.md")
        let before = h.sh("stat -c '%i %s %n' types/core.note/*").out
        let bytes = h.sh("cat types/core.note/*").stdout
        let q = queue(h)
        let keys = h.sql("SELECT idempotency_key FROM mutations ORDER BY seq")
        h.unmount()
        try h.mount()
        #expect(h.sh("stat -c '%i %s %n' types/core.note/*").out == before)
        #expect(h.sh("cat types/core.note/*").stdout == bytes)
        #expect(queue(h) == q)
        #expect(h.sql("SELECT idempotency_key FROM mutations ORDER BY seq") == keys)
        #expect(h.sh("ls tags").out == "t1\nt2")
    }

    @Test func FS9_truncatingOpenIsKeptAcrossARemount() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        #expect(h.sh("head -c 5000 /dev/zero | tr '\\0' a > types/core.note/t.md").status == 0)
        h.unmount()
        try h.mount()
        // O_TRUNC on an existing file, in a fresh mount: the old bytes past the new end must go.
        #expect(h.sh("python3 -c \"import os;f=os.open('types/core.note/t.md',os.O_WRONLY|os.O_TRUNC);os.write(f,b'short');os.close(f)\"").status == 0)
        h.unmount()
        try h.mount()
        #expect(h.sh("cat types/core.note/t.md").out == "short")
    }

    /// Of two imported files with one name, the first in the folder's order keeps the plain name
    /// (FS-7), however the import's readers share the files: the files of an import are made at
    /// one instant, so their ids (minted in order) decide.
    @Test func FS7_theFirstOfTwoImportedFilesWithOneNameKeepsIt() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        _ = try h.importFolder("for i in $(seq 0 999); do mkdir p${i}a p${i}b; echo first > p${i}a/x$i.md; echo second > p${i}b/x$i.md; done")
        // No file is older than one read before it (ids are minted in the folder's order).
        #expect(h.sql("SELECT count(*) FROM items x JOIN items y ON x.id < y.id WHERE x.created_at > y.created_at") == "0")
        try h.mount()
        #expect(h.sh("for i in $(seq 0 999); do cat types/core.note/x$i.md; done | sort | uniq -c | sed 's/^ *//'").out == "1000 first")
    }

    @Test func FS7_collidingNamesTakeTheIdSuffix() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        _ = try h.importFolder("mkdir -p a b && echo first > a/x.md && echo second > b/x.md")
        try h.mount()
        let names = h.sh("ls types/core.note").out.split(separator: "\n").map(String.init)
        #expect(names.count == 2)
        #expect(names.contains("x.md"))
        let second = names.first { $0 != "x.md" } ?? ""
        #expect(second.hasPrefix("x [") && second.hasSuffix("].md"))
        let secondID = id(h, "types/core.note/\(second)")
        #expect(second == "x [\(secondID.filter(\.isHexDigit).suffix(8))].md")
        #expect(h.sh("cat 'types/core.note/x.md'").out == "first")
        // Inside each folder tag the name is unique again.
        #expect(h.sh("ls 'tags/folder:a' 'tags/folder:b'").out == "tags/folder:a:\nx.md\n\ntags/folder:b:\nx.md")
        #expect(h.sh("cat tags/folder:b/x.md").out == "second")
    }

    @Test func FS8_FS9_whatYouWriteIsWhatYouRead() throws {
        try MountHarness.with(bound: true) { m in
            let text = "---\ndue: 2026-12-01\nstatus: draft\ncount: 3\n---\nthe body, verbatim  \n\ttabs\r\n"
            try Data(text.utf8).write(to: URL(fileURLWithPath: m.path("types/core.note/plan.md")))
            let back = try Data(contentsOf: URL(fileURLWithPath: m.path("types/core.note/plan.md")))
            #expect(back == Data(text.utf8))
            #expect(m.sh("stat -c %s types/core.note/plan.md").out == "\(text.utf8.count)")
            #expect(m.sh("getfattr --only-values -n user.marfa.prop.due types/core.note/plan.md").out == "\"2026-12-01\"")
            #expect(m.sh("getfattr --only-values -n user.marfa.prop.count types/core.note/plan.md").out == "3")
            #expect(m.sh("getfattr --only-values -n user.marfa.prop.title types/core.note/plan.md").out == "\"plan\"")
            // Writes at offsets and truncation, read back exactly.
            #expect(m.sh("printf 'ABCDEFGHIJ' > types/core.note/o.md && printf 'xy' | dd of=types/core.note/o.md bs=1 seek=3 conv=notrunc status=none && truncate -s 8 types/core.note/o.md && cat types/core.note/o.md").out == "ABCxyFGH")
            #expect(m.sh("echo more >> types/core.note/o.md && cat types/core.note/o.md").out == "ABCxyFGHmore")
            // One create for each new item: writes fold into the create not yet sent. The front
            // matter as written (a rendering would quote the date) follows its create (FS-32).
            #expect(queue(m).map { $0.split(separator: " ")[0] } == ["create", "update", "create"])
            #expect(m.sql(#"SELECT json_extract(payload, '$.extensions."fs.text".head') FROM mutations WHERE kind = 'update'"#)
                    == "---\ndue: 2026-12-01\nstatus: draft\ncount: 3\n---")
            // Once sent, writes and truncates of an item fold into one update based on the sent version.
            #expect(m.markQueueSent())
            #expect(m.sh("echo again >> types/core.note/o.md && truncate -s 3 types/core.note/o.md && printf 'Z' >> types/core.note/o.md && cat types/core.note/o.md").out == "ABCZ")
            #expect(m.sql("SELECT kind || ' ' || json_extract(payload, '$.properties.body') || ' ' || json_extract(payload, '$.base_version') FROM mutations WHERE state = 'pending'") == "update ABCZ 1")
        }
    }

    @Test func FS10_invalidFrontMatterIsKeptAndMarked() throws {
        try MountHarness.with { m in
            #expect(m.sh("printf 'fine\\n' > types/core.note/n.md").status == 0)
            let bad = "---\ntags: [unclosed\n---\nbody\n"
            try Data(bad.utf8).write(to: URL(fileURLWithPath: m.path("types/core.note/n.md")))
            #expect(try String(contentsOfFile: m.path("types/core.note/n.md"), encoding: .utf8) == bad)
            #expect(m.sh("getfattr --only-values -n user.marfa.sync types/core.note/n.md").out == "invalid")
            let status = m.sh("cat .marfafs/status").out
            #expect(status.contains(id(m, "types/core.note/n.md")))
            let payload = m.sql("SELECT payload FROM mutations")
            #expect(!payload.contains("unclosed"), "invalid bytes are not queued")
        }
    }

    @Test func FS11_blobBytesComeFromTheSqlarCache() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        let vault = try h.importFolder("head -c 3000000 /dev/urandom > photo.png")
        try h.mount()
        #expect(h.sh("cmp types/core.file.image/photo.png '\(vault)/photo.png'").status == 0)
        #expect(h.sh("dd if=types/core.file.image/photo.png bs=1000 skip=1234 count=3 status=none | md5sum").out
                == Shell.run(["/bin/bash", "-c", "dd if='\(vault)/photo.png' bs=1000 skip=1234 count=3 status=none | md5sum"]).out)
        let hash = h.sh("getfattr --only-values -n user.marfa.blob types/core.file.image/photo.png").out
        #expect(hash.hasPrefix("sha256:") && hash.count == 71)
        #expect(h.sh("sqlite3 '\(h.store)' -At").out.contains(hash))
        #expect(h.sh("python3 -c \"import mmap;f=open('types/core.file.image/photo.png','rb');m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ);print(len(m))\"").out == "3000000", "FS-16: mmap works")
    }

    @Test func FS12_statShowsSizeModesAndOwner() throws {
        try MountHarness.with { m in
            #expect(m.sh("printf 'four' > types/core.note/s.md && mkdir tags/x:t && ln -s ../../types/core.note/s.md tags/x:t/").status == 0)
            #expect(m.sh("stat -c '%s %a %U %F' types/core.note/s.md").out == "4 644 \(NSUserName()) regular file")
            #expect(m.sh("stat -c '%a %F' types").out == "755 directory")
            #expect(m.sh("stat -c '%a %F' tags/x:t/s.md").out == "777 symbolic link")
            let mtime = m.sh("stat -c %Y types/core.note/s.md").out
            let updated = m.sh("getfattr --only-values -n user.marfa.updated_at types/core.note/s.md").out
            #expect(Int(mtime).map { abs(Double($0) - (ISO8601DateFormatter.fractional.date(from: updated)?.timeIntervalSince1970 ?? 0)) < 2 } == true)
        }
    }

    @Test func FS4_createInTypesMakesAnItemTitledByItsName() throws {
        try MountHarness.with { m in
            #expect(m.sh("printf 'x' > 'types/core.bookmark/My Link.md'").status == 0)
            #expect(m.sh("getfattr --only-values -n user.marfa.type 'types/core.bookmark/My Link.md'").out == "core.bookmark")
            #expect(m.sh("getfattr --only-values -n user.marfa.prop.title 'types/core.bookmark/My Link.md'").out == "\"My Link\"")
            #expect(m.sh("printf 'x' > types/core.note/todo.txt && ls types/core.note").out == "todo.txt", "FS-5: the chosen name is kept")
            #expect(queue(m).count == 2)
        }
    }

    @Test func ops_createInATagMakesATaggedNoteShownAsASymlink() throws {
        try MountHarness.with(bound: true) { m in
            #expect(m.sh("mkdir tags/inbox && printf 'idea\\n' > tags/inbox/idea.md").status == 0)
            #expect(m.sh("stat -c %F tags/inbox/idea.md").out == "symbolic link")
            #expect(m.sh("readlink tags/inbox/idea.md").out == "../../types/core.note/idea.md")
            #expect(m.sh("cat types/core.note/idea.md").out == "idea")
            let q = m.sql("SELECT kind, json_extract(payload, '$.tags') FROM mutations")
            #expect(q == "create|[\"inbox\"]")
        }
    }

    @Test func ops_renameChangesTheTitleAndQueuesAnUpdate() throws {
        try MountHarness.with(bound: true) { m in
            #expect(m.sh("echo x > types/core.note/old.md").status == 0)
            m.sql("SELECT 1") // the store is readable while mounted
            #expect(m.markQueueSent())
            let before = id(m, "types/core.note/old.md")
            #expect(m.sh("mv types/core.note/old.md 'types/core.note/New Title.md' && ls types/core.note").out == "New Title.md")
            #expect(id(m, "types/core.note/New Title.md") == before)
            #expect(m.sh("getfattr --only-values -n user.marfa.prop.title 'types/core.note/New Title.md'").out == "\"New Title\"")
            #expect(m.sql("SELECT kind || ' ' || json_extract(payload, '$.properties.title') FROM mutations WHERE state = 'pending'") == "update New Title")
            #expect(m.sh("python3 -c \"import os;os.rename('types/core.note/New Title.md','types/core.note/New Title.md')\"").status == 0,
                    "FS-6: renaming to the same name is a no-op")
            #expect(m.sql("SELECT count(*) FROM mutations WHERE state = 'pending'") == "1")
        }
    }

    @Test func FS13_renameOntoAnItemKeepsTheTargetsIdentity() throws {
        try MountHarness.with { m in
            #expect(m.sh("echo v1 > types/core.note/note.md && mkdir tags/ref:keep && ln -s ../../types/core.note/note.md tags/ref:keep/ && setfattr -n user.color -v blue types/core.note/note.md").status == 0)
            #expect(m.markQueueSent())
            let before = id(m, "types/core.note/note.md")
            let save = m.sh("python3 -c \"import os;f=open('types/core.note/note.md.tmp','w');f.write('v2\\n');f.flush();os.fsync(f.fileno());f.close();print(os.stat('types/core.note/note.md.tmp').st_ino);os.rename('types/core.note/note.md.tmp','types/core.note/note.md')\"")
            #expect(save.status == 0)
            #expect(m.sh("cat types/core.note/note.md").out == "v2")
            #expect(id(m, "types/core.note/note.md") == before)
            // The name has the renamed file's inode at once, and keeps it (FS-31).
            #expect(m.sh("stat -c %i types/core.note/note.md").out == save.out)
            m.settle()
            #expect(m.sh("stat -c %i types/core.note/note.md").out == save.out)
            #expect(m.sh("ls types/core.note").out == "note.md")
            #expect(m.sh("getfattr --only-values -n user.marfa.tags types/core.note/note.md").out == "ref:keep")
            #expect(m.sh("getfattr --only-values -n user.color types/core.note/note.md").out == "blue")
            #expect(m.sql("SELECT kind || ' ' || item_id FROM mutations WHERE state = 'pending'") == "update \(before)")
            #expect(m.sh("ls trash/core.note").out == "", "the temporary file never reached the server, so nothing is trashed")
        }
    }

    @Test func FS14_scratchFilesAreLocalRealFilesThatSurviveARemount() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        #expect(h.sh("echo note > types/core.note/n.md").status == 0 && h.markQueueSent())
        let names = [".n.md.swp", ".n.md.swx", "4913", "n.md~", ".#n.md", "#n.md#", ".goutputstream-AB12", "x.part", "y.crdownload", "~$doc.md"]
        for n in names {
            #expect(h.sh("printf 'scratch %s' '\(n)' > 'types/core.note/\(n)' && cat 'types/core.note/\(n)'").out == "scratch \(n)", "\(n)")
        }
        #expect(h.sh("python3 -c \"import os;f=os.open('types/core.note/.n.md.swp',os.O_RDWR);os.pwrite(f,b'XY',3);os.fsync(f)\" && cat types/core.note/.n.md.swp").out == "scrXYch .n.md.swp")
        #expect(h.sh("mv types/core.note/x.part types/core.note/z.part && ls types/core.note | grep -c part").out == "1")
        #expect(h.sh("ls -a types/core.note | grep -c swp; ls types/core.bookmark | wc -l").out == "1\n0", "visible only where they were made")
        #expect(h.sh("mkdir tags/t && echo x > tags/t/.a.swp && ls -a tags/t").out.contains(".a.swp"))
        #expect(h.sh("grep -c . .marfafs/pending; true").out == "0", "never queued")
        #expect(h.sh("rm types/core.note/4913 && ls types/core.note | grep -c 4913; true").out == "0")
        h.unmount()
        try h.mount()
        #expect(h.sh("cat types/core.note/.n.md.swp").out == "scrXYch .n.md.swp", "kept across a remount, so vim -r can recover")
        #expect(h.sh("cat types/core.note/z.part tags/t/.a.swp").out == "scratch x.partx")
        #expect(h.sql("SELECT count(*) FROM mutations WHERE state = 'pending'") == "0")
    }

    @Test func FS13_backupRenameThenNewFileReattachesTheItem() throws {
        try MountHarness.with { m in
            #expect(m.sh("echo v1 > types/core.note/n.md && mkdir tags/ref:k && ln -s ../../types/core.note/n.md tags/ref:k/ && setfattr -n user.c -v 1 types/core.note/n.md").status == 0)
            #expect(m.markQueueSent())
            let before = id(m, "types/core.note/n.md"), ino = m.sh("stat -c %i types/core.note/n.md").out
            // vim with backupcopy=no: rename to the backup, write a new file, remove the backup.
            #expect(m.sh("mv types/core.note/n.md types/core.note/n.md~ && printf 'v2\\n' > types/core.note/n.md").status == 0)
            #expect(m.sh("cat types/core.note/n.md~").out == "v1", "the backup keeps the bytes as they were")
            #expect(m.sh("rm types/core.note/n.md~").status == 0)
            #expect(m.sh("cat types/core.note/n.md && ls -a types/core.note | grep -v '^\\.'").out == "v2\nn.md")
            #expect(id(m, "types/core.note/n.md") == before)
            // The new file is a new inode (the old one went to the backup name: FS-31).
            #expect(m.sh("stat -c %i types/core.note/n.md").out != ino)
            #expect(m.sh("getfattr --only-values -n user.marfa.tags types/core.note/n.md; echo; getfattr --only-values -n user.c types/core.note/n.md").out == "ref:k\n1")
            #expect(m.sql("SELECT kind || ' ' || item_id FROM mutations WHERE state = 'pending'") == "update \(before)")
            // Renaming to a backup name and removing it deletes the item (to the trash).
            #expect(m.sh("mv types/core.note/n.md types/core.note/n.md~ && rm types/core.note/n.md~ && ls trash/core.note").out == "n.md")
        }
    }

    @Test func ops_unlinkingAnItemNeverSentLeavesNothingToSend() throws {
        try MountHarness.with { m in
            #expect(m.sh("echo x > types/core.note/t.md && rm types/core.note/t.md && ls trash/core.note").out == "t.md")
            // Once the removal is written (a read of `.marfafs/status` waits for it).
            #expect(m.sh("cat .marfafs/status > /dev/null").status == 0)
            #expect(m.sql("SELECT count(*) FROM mutations") == "0")
            #expect(m.sh("mv trash/core.note/t.md types/core.note/ && cat types/core.note/t.md").out == "x")
            #expect(m.sql("SELECT kind FROM mutations") == "create")
        }
    }

    @Test func ops_archiveTrashAndBackAreTransitions() throws {
        try MountHarness.with(bound: true) { m in
            #expect(m.sh("echo x > types/core.note/n.md").status == 0 && m.markQueueSent())
            #expect(m.sh("mv types/core.note/n.md archive/core.note/ && ls archive/core.note types/core.note").out == "archive/core.note:\nn.md\n\ntypes/core.note:")
            #expect(m.sh("getfattr --only-values -n user.marfa.state archive/core.note/n.md").out == "archived")
            #expect(m.sh("mv archive/core.note/n.md types/core.note/ && rm types/core.note/n.md && ls trash/core.note").out == "n.md")
            #expect(m.sh("mv trash/core.note/n.md types/core.note/ && cat types/core.note/n.md").out == "x")
            #expect(m.sql("SELECT json_extract(payload, '$.state') FROM mutations WHERE state = 'pending' ORDER BY seq") == "archived\nactive\ntrashed\nactive")
            // Removed from the trash: purged here (FS-28); the server keeps it trashed and is told so.
            let id = m.sh("getfattr --only-values -n user.marfa.id types/core.note/n.md").out
            #expect(m.sh("rm types/core.note/n.md && rm trash/core.note/n.md && ls trash/core.note").out.isEmpty)
            #expect(m.sql("SELECT count(*) FROM items WHERE id = '\(id)'") == "0")
            #expect(m.sql("SELECT count(*) FROM purged WHERE id = '\(id)'") == "1")
            #expect(m.sql("SELECT json_extract(payload, '$.state') FROM mutations WHERE state = 'pending' ORDER BY seq") == "archived\nactive\ntrashed\nactive\ntrashed")
        }
    }

    @Test func ops_tagsByLnRmMkdirRmdirMv() throws {
        try MountHarness.with(bound: true) { m in
            #expect(m.sh("echo a > types/core.note/a.md && echo b > types/core.note/b.md && mkdir tags/c:red").status == 0)
            #expect(m.markQueueSent())
            #expect(m.sh("ln -s ../../types/core.note/a.md tags/c:red/ && ln types/core.note/b.md tags/c:red/b.md && ls tags/c:red").out == "a.md\nb.md")
            #expect(m.sh("stat -c %F tags/c:red/b.md").out == "symbolic link", "a hard-linked tag shows as a symlink afterwards")
            #expect(m.sh("rmdir tags/c:red 2>&1").out.contains("Directory not empty"))
            #expect(m.sh("rm tags/c:red/a.md && ls tags/c:red && cat types/core.note/a.md").out == "b.md\na")
            #expect(m.sh("mv tags/c:red tags/c:blue && ls tags && getfattr --only-values -n user.marfa.tags types/core.note/b.md").out == "c:blue\nc:blue")
            #expect(m.sh("rm tags/c:blue/b.md && rmdir tags/c:blue && ls tags").out == "")
            let kinds = m.sql("SELECT kind || ' ' || json_extract(payload, '$.tags') FROM mutations WHERE state = 'pending' ORDER BY seq")
            #expect(kinds == "set_tags []\nset_tags []", "coalesced per item: a ends with no tags, b with none after its last change")
        }
    }

    @Test func ops_edgesByMkdirLnAndRm() throws {
        try MountHarness.with { m in
            #expect(m.sh("echo a > types/core.note/a.md && echo b > types/core.note/b.md").status == 0)
            #expect(m.markQueueSent())
            #expect(m.sh("mkdir -p links/core.note/a.md/about && ln -s ../../../../types/core.note/b.md links/core.note/a.md/about/ && ls links/core.note/a.md/about").out == "b.md")
            #expect(m.sh("ls backlinks/core.note/b.md/about").out == "a.md")
            #expect(m.sql("SELECT kind || ' ' || json_extract(payload, '$.edge_type') FROM mutations WHERE state = 'pending'") == "create_edge about")
            #expect(m.markQueueSent())
            #expect(m.sh("rmdir links/core.note/a.md/about 2>&1").out.contains("Directory not empty"))
            #expect(m.sh("rm links/core.note/a.md/about/b.md && ls links/core.note/a.md/about && ls backlinks").out == "")
            #expect(m.sql("SELECT kind FROM mutations WHERE state = 'pending'") == "delete_edge")
        }
    }

    @Test func ops_backlinksAndByIdAreReadOnly() throws {
        try MountHarness.with { m in
            #expect(m.sh("echo a > types/core.note/a.md").status == 0)
            #expect(m.sh("touch backlinks/x 2>&1").out.contains("Read-only file system"))
            #expect(m.sh("mkdir by-id/x 2>&1").out.contains("Read-only file system"))
            let aid = id(m, "types/core.note/a.md")
            #expect(m.sh("rm by-id/\(aid) 2>&1").out.contains("Read-only file system"))
        }
    }

    @Test func FS16_unsupportedOperationsGivePreciseErrors() throws {
        try MountHarness.with { m in
            #expect(m.sh("echo a > types/core.note/a.md").status == 0)
            #expect(m.sh("chmod 600 types/core.note/a.md && chown root types/core.note/a.md && touch types/core.note/a.md").status == 0)
            #expect(m.sh("stat -c %a types/core.note/a.md").out == "600", "permission bits are kept (FS-31)")
            #expect(m.sh("ln types/core.note/a.md types/core.note/hard.md 2>&1").out.contains("Operation not permitted"))
            #expect(m.sh("mv types/core.note/a.md types/core.bookmark/ 2>&1; echo $?").out.hasSuffix("0"), "EXDEV: mv copies and deletes")
            #expect(m.sh("mkfifo types/core.note/fifo 2>&1").out.contains("Operation not permitted"))
            #expect(m.sh("mkdir types/core.note/sub 2>&1").out.contains("Operation not permitted"))
            #expect(m.sh("echo x > .marfafs/status 2>&1").status != 0)
            let long = String(repeating: "n", count: 300)
            #expect(m.sh("{ echo x > types/core.note/\(long).md; } 2>&1").out.contains("File name too long"))
        }
    }

    @Test func robustness_badInputIsRefusedAndTheDaemonStaysUp() throws {
        try MountHarness.with { m in
            #expect(m.sh("echo a > types/core.note/a.md").status == 0)
            #expect(m.sh("{ printf x | dd of=types/core.note/a.md bs=1 seek=1099511627776 conv=notrunc status=none; } 2>&1").out.contains("File too large"))
            #expect(m.sh("{ truncate -s 1G types/core.note/a.md; } 2>&1").out.contains("File too large"))
            #expect(m.sh("{ touch $'types/core.note/\\xff.md'; } 2>&1").out.contains("Invalid argument"))
            #expect(m.sh("{ touch $'types/core.note/a\\x01b.md'; } 2>&1").out.contains("Invalid argument"))
            #expect(m.sh("{ mkdir 'tags/a,b'; } 2>&1").out.contains("Invalid argument"))
            #expect(m.sh("cat types/core.note/a.md && ls types/core.note").out == "a\na.md", "nothing changed, the daemon still answers")
            #expect(m.sql("SELECT count(*) FROM items") == "1")
        }
    }

    @Test func robustness_aOneGiBWriteStopsAtTheLimitAndChangesNothingElse() throws {
        try MountHarness.with { m in
            #expect(m.sh("echo keep > types/core.note/n.md").status == 0)
            let r = m.sh("dd if=/dev/zero of=types/core.note/big.md bs=1M count=1024 2>&1")
            #expect(r.status != 0 && r.out.contains("File too large"), "\(r.out)")
            #expect(m.sh("stat -c %s types/core.note/big.md").out == "\(16 << 20)", "a text file stops at 16 MiB")
            #expect(m.sh("getfattr --only-values -n user.marfa.sync types/core.note/big.md").out == "invalid", "NUL bytes are not text")
            // A write past the limit is refused whole and leaves the file as it was.
            #expect(m.sh("printf x | dd of=types/core.note/n.md bs=1 seek=\(16 << 20) conv=notrunc 2>&1").status != 0)
            #expect(m.sh("cat types/core.note/n.md; stat -c %s types/core.note/n.md").out == "keep\n5")
            #expect(m.sql("SELECT kind FROM mutations") == "create", "only n.md is queued; the invalid file is kept, not sent")
            #expect(m.sh("ls types/core.note").out == "big.md\nn.md", "the daemon is still up")
        }
    }

    @Test func FS17_xattrsReadWriteAndRefuseBadValues() throws {
        try MountHarness.with { m in
            #expect(m.sh("echo a > types/core.note/a.md").status == 0)
            #expect(m.sh("getfattr -n security.selinux types/core.note/a.md 2>&1").out.contains("No such attribute"))
            #expect(m.sh("getfattr -n system.posix_acl_access types/core.note/a.md 2>&1").out.contains("No such attribute"))
            #expect(m.sh("setfattr -n trusted.x -v 1 types/core.note/a.md 2>&1").out.contains("Operation not supported"))
            let before = m.sh("getfattr -d -m - types/core.note/a.md").out
            for bad in ["-n user.marfa.tier -v gold", "-n user.marfa.state -v deleted", "-n user.marfa.tags -v 'a,,b'",
                        "-n user.marfa.favorite -v yes", "-n user.marfa.prop.x -v '{not json'", "-n user.marfa.id -v other"] {
                let r = m.sh("setfattr \(bad) types/core.note/a.md 2>&1")
                #expect(r.status != 0, "\(bad) must be refused")
            }
            #expect(m.sh("setfattr -n user.marfa.tier -v gold types/core.note/a.md 2>&1").out.contains("Invalid argument"))
            #expect(m.sh("getfattr -d -m - types/core.note/a.md").out == before, "refused writes change nothing")
            #expect(m.sh("setfattr -n user.marfa.favorite -v 1 types/core.note/a.md && ls tags").out == "favorite")
            #expect(m.sh("setfattr -n user.marfa.tier -v feed types/core.note/a.md && getfattr --only-values -n user.marfa.tier types/core.note/a.md").out == "feed")
            #expect(m.sh("setfattr -n user.marfa.prop.due -v 2026-12-01 types/core.note/a.md && cat types/core.note/a.md").out == "---\ndue: \"2026-12-01\"\n---\na")
            #expect(m.sh("setfattr -n user.marfa.prop.n -v 0x3432 types/core.note/a.md && getfattr --only-values -n user.marfa.prop.n types/core.note/a.md").out == "42")
            #expect(m.sh("setfattr -x user.marfa.prop.n types/core.note/a.md").status == 0)
            #expect(m.sh("setfattr -x user.marfa.prop.due types/core.note/a.md && cat types/core.note/a.md").out == "a")
            #expect(m.sh("setfattr -n user.project -v apollo types/core.note/a.md && getfattr --only-values -n user.project types/core.note/a.md").out == "apollo")
            #expect(m.sh("setfattr -x user.project types/core.note/a.md && getfattr -n user.project types/core.note/a.md 2>&1").out.contains("No such attribute"))
            #expect(m.sh("setfattr -n user.marfa.state -v archived types/core.note/a.md && ls archive/core.note").out == "a.md")
        }
    }

    @Test func controlFiles_statusAndPending() throws {
        try MountHarness.with { m in
            #expect(m.sh("echo a > types/core.note/a.md").status == 0)
            let status = try JSONSerialization.jsonObject(with: Data(m.sh("cat .marfafs/status").stdout.utf8)) as? [String: Any]
            #expect(status?["mode"] as? String == "local")
            #expect(status?["queue_depth"] as? Int == 1)
            let pending = m.sh("cat .marfafs/pending").out
            #expect(pending.hasPrefix("vault/a.md\tcreate\t") && pending.hasSuffix("s\tpending"), "path, kind, age, state (FS-33): \(pending)")
            let json = (try? JSONParser.parse(m.sh("cat .marfafs/pending.json").out))?.arrayValue?.first?.objectValue ?? [:]
            #expect(json["item"] == .string(id(m, "types/core.note/a.md")) && json["path"] == .string("vault/a.md"), "\(json)")
            let viaCLI = try JSONSerialization.jsonObject(with: Data(m.sh("\(MountHarness.binary) status '\(m.mountpoint)' --json").stdout.utf8)) as? [String: Any]
            #expect(viaCLI?["queue_depth"] as? Int == 1)
            #expect(viaCLI?["store"] as? String == m.store)
            #expect(m.sh("cat .marfafs/flush").out.contains("none is configured"))
            #expect(m.sh("find . -name status | wc -l").out == "0", "find does not walk .marfafs")
        }
    }

    @Test func FS23_importThenExportReproducesEveryFile() throws {
        let root = NSTemporaryDirectory() + "marfafs-vault-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: root) }
        let setup = """
        set -e
        mkdir -p '\(root)/in/projects/alpha' '\(root)/in/daily' '\(root)/in/.obsidian'
        printf -- '---\\ntags: [x]\\ncreated: 2024-01-01\\n---\\n# Alpha\\n\\nbody\\n' > '\(root)/in/projects/alpha/Alpha.md'
        printf 'no front matter, no newline' > '\(root)/in/daily/2026-01-01.md'
        printf -- '---\\nbroken: [\\n---\\nkept anyway\\n' > '\(root)/in/broken.md'
        printf '{}' > '\(root)/in/.obsidian/app.json'
        head -c 70000 /dev/urandom > '\(root)/in/projects/diagram.png'
        """
        #expect(Shell.run(["/bin/bash", "-c", setup]).status == 0)
        let store = root + "/s.sqlite"
        #expect(Shell.run([MountHarness.binary, "import", root + "/in", "--store", store]).status == 0)
        let again = Shell.run([MountHarness.binary, "import", root + "/in", "--store", store])
        #expect(again.out.contains("0 new, 0 changed, 5 unchanged"), "running it again makes no duplicates")
        #expect(Shell.run([MountHarness.binary, "export", root + "/out", "--store", store]).status == 0)
        #expect(Shell.run(["/bin/bash", "-c", "diff -r '\(root)/in' '\(root)/out'"]).status == 0, "hidden files too (FS-32)")
    }

    /// An import goes in batches: a file the store refuses (a note past 16 MiB) is reported by
    /// name and the others of its batch still come in.
    @Test func FS23_aFileAnImportCannotTakeIsNamedAndTheRestComeIn() throws {
        let tmp = try TempDirectory("marfafs-import-batch")
        #expect(Shell.run(["/bin/bash", "-c", "mkdir -p '\(tmp.path)/in' && cd '\(tmp.path)/in' && echo a > a.md && head -c 17000000 /dev/zero | tr '\\0' x > big.md && echo c > c.md"]).status == 0)
        let r = Shell.run([MountHarness.binary, "import", tmp.path + "/in", "--store", tmp.path + "/s.sqlite"])
        #expect(r.status != 0)
        #expect(r.stdout.contains("2 new") && r.stdout.contains("1 failed"), "\(r.stdout)")
        #expect(r.stderr.contains("big.md"), "\(r.stderr)")
        let names = Shell.run(["sqlite3", tmp.path + "/s.sqlite", "SELECT group_concat(file_name, ' ') FROM (SELECT file_name FROM items ORDER BY 1)"]).out
        #expect(names == "a.md c.md")
    }

    /// FS-31: a folder whose path has a comma or is longer than a tag can be (128 characters) is
    /// kept as it is: import brings its notes into it and mkdir makes one (its tag travels in a
    /// short form); a tag that is not a folder still follows the tag rule.
    @Test func FS31_foldersNoWireTagCanNameAreKeptAsTheyAre() throws {
        let tmp = try TempDirectory("marfafs-commafolder")
        let long = String(repeating: "x", count: 130)
        #expect(Shell.run(["/bin/bash", "-c", "mkdir -p '\(tmp.path)/in/Notes, misc' '\(tmp.path)/in/\(long)' '\(tmp.path)/in/ok' && echo a > '\(tmp.path)/in/Notes, misc/a.md' && echo b > '\(tmp.path)/in/\(long)/b.md' && echo c > '\(tmp.path)/in/ok/c.md'"]).status == 0)
        let store = tmp.path + "/s.sqlite"
        let r = Shell.run([MountHarness.binary, "import", tmp.path + "/in", "--store", store])
        #expect(r.status == 0 && !r.stderr.contains("not kept"), "\(r.stderr)")
        try MountHarness.with(store: store) { m in
            #expect(m.sh("ls vault/").out.split(separator: "\n").sorted() == ["Notes, misc", "ok", Substring(long)])
            #expect(m.sh("cat 'vault/Notes, misc/a.md' 'vault/\(long)/b.md'").out == "a\nb")
            #expect(m.sh("mkdir 'vault/Other, things' && ls -d 'vault/Other, things'").status == 0)
            #expect(m.sh("mkdir 'tags/\(long)'").stderr.contains("Invalid argument"))
        }
    }
}

extension ISO8601DateFormatter {
    static var fractional: ISO8601DateFormatter {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f
    }
}
