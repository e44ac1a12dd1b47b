import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// A mount of a MyLifeDB server (FS-34), against the contract fake of `scripts/testing/
/// mylifedb_contract.py` (the real server cannot be built here): real mounts, the server's real
/// folder checked for what it holds, changes made on the server by a second client over HTTP.
@Suite(.serialized) struct MyLifeDBTests {
    func read(_ file: String) -> String { (try? String(contentsOfFile: file, encoding: .utf8)) ?? "" }

    /// Writes a library into the server's folder: `notes` Markdown notes and `files` small binary
    /// files across nested folders, hidden files, an empty folder and one file larger than a MiB.
    func fill(_ s: MyLifeDBContract, notes: Int, files: Int) {
        let script = """
            import os, random
            random.seed(34)
            d = \"\(s.data)\"
            for i in range(\(notes)):
                folder = os.path.join(d, "notes", "f%02d" % (i % 20), "s%d" % (i % 3))
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, "note %04d.md" % i), "w") as f:
                    f.write("# Note %d\\n\\nsee [[note %04d]] #topic%d\\n" % (i, (i + 1) % \(notes), i % 7) + "x" * random.randrange(200))
            for i in range(\(files)):
                folder = os.path.join(d, "media", "m%d" % (i % 5))
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, "blob%04d.bin" % i), "wb") as f:
                    f.write(os.urandom(random.randrange(1, 5000)))
            os.makedirs(os.path.join(d, "empty", "deeper"), exist_ok=True)
            os.makedirs(os.path.join(d, ".config"), exist_ok=True)
            with open(os.path.join(d, ".config", "settings.json"), "w") as f:
                f.write('{"theme": "dark"}\\n')
            with open(os.path.join(d, ".mcp.json"), "w") as f:
                f.write("{}\\n")
            with open(os.path.join(d, "big.pdf"), "wb") as f:
                f.write(os.urandom(3 << 20))
            os.utime(os.path.join(d, ".mcp.json"), ns=(1600000000123000000, 1600000000123000000))
            """
        #expect(Shell.run(["python3", "-c", script]).status == 0)
    }

    @Test func FS34_theFirstSyncOfANestedLibraryIsExact() throws {
        let s = try MyLifeDBContract(password: "s3cret")
        fill(s, notes: 1500, files: 497)
        let started = Date()
        try MountHarness.with(options: try s.mountOptions()) { m in
            #expect(m.syncStatus["first_sync_done"] == .bool(true), "the mount returns once the first sync is done")
            let seconds = Date().timeIntervalSince(started)
            // The tree, byte for byte: hidden files and the empty folders too.
            let diff = m.sh("diff -r '\(s.data)' vault/")
            #expect(diff.status == 0, "\(diff.stdout.prefix(2000))")
            #expect(m.sh("find vault/ -type f | wc -l").out == "2000")
            #expect(m.sh("test -d vault/empty/deeper").status == 0, "an empty folder of the server is a folder")
            // Times are the server's, to the millisecond.
            #expect(m.sh("stat -c %.3Y vault/.mcp.json").out == "1600000000.123")
            // What the server says of a file, as attributes.
            let hash = m.sh("sha256sum vault/notes/f03/s0/'note 0003.md' | cut -c1-64").out
            #expect(m.sh("getfattr --only-values -n user.mylifedb.hash vault/notes/f03/s0/'note 0003.md'").out == hash)
            #expect(m.sh("getfattr --only-values -n user.mylifedb.mime_type vault/notes/f03/s0/'note 0003.md'").out == "text/markdown")
            #expect(m.sh("getfattr --only-values -n user.mylifedb.text_preview vault/notes/f03/s0/'note 0003.md'").out.hasPrefix("# Note 3"))
            #expect(m.sh("setfattr -n user.mylifedb.hash -v x vault/notes/f03/s0/'note 0003.md'").status != 0, "the server's attributes are read-only")
            // Notes are notes: their tags and links.
            #expect(m.sh("ls tags/topic3 | wc -l").out != "0")
            #expect(m.sh("ls links/core.note/'note 0003.md'/").status == 0)
            // The large file is fetched when read, in ranges.
            #expect(m.sh("cmp '\(s.data)/big.pdf' vault/big.pdf").status == 0)
            #expect(m.syncStatus["queue_depth"] == .int(0), "nothing of the first sync is sent back")
            print("first sync of 2,000 files: \(String(format: "%.1f", seconds)) s")
        }
    }

    @Test func FS34_editsCreatesRenamesMovesFoldersAndDeletesReachTheServer() throws {
        let s = try MyLifeDBContract()
        s.put("notes/a.md", "alpha\n")
        s.put("notes/b.md", "beta\n")
        s.put("notes/old/c.md", "gamma\n")
        s.put("pics/p.bin", "PNG")
        try MountHarness.with(options: try s.mountOptions()) { m in
            #expect(m.sh("printf 'more\\n' >> vault/notes/a.md").status == 0)
            #expect(m.sh("printf 'new note\\n' > vault/notes/new.md").status == 0)
            #expect(m.sh("mv vault/notes/b.md vault/notes/b2.md").status == 0)
            #expect(m.sh("mkdir -p vault/archive/2026 && mv vault/notes/old/c.md vault/archive/2026/").status == 0)
            #expect(m.sh("mkdir vault/empty-here").status == 0)
            #expect(m.sh("rm vault/pics/p.bin && rmdir vault/pics").status == 0)
            #expect(MountHarness.eventually { s.read("notes/a.md") == "alpha\nmore\n" })
            #expect(MountHarness.eventually { s.read("notes/new.md") == "new note\n" })
            #expect(MountHarness.eventually { s.read("notes/b2.md") == "beta\n" && s.read("notes/b.md") == nil })
            #expect(MountHarness.eventually { s.read("archive/2026/c.md") == "gamma\n" && s.read("notes/old/c.md") == nil })
            #expect(MountHarness.eventually { FileManager.default.fileExists(atPath: s.data + "/empty-here") }, "mkdir reaches the server")
            #expect(MountHarness.eventually { !FileManager.default.fileExists(atPath: s.data + "/pics") }, "rm and rmdir reach the server")
            // A folder left empty by a move stays, as on a disk, until it is removed.
            #expect(m.sh("test -d vault/notes/old").status == 0)
            #expect(FileManager.default.fileExists(atPath: s.data + "/notes/old"))
            #expect(m.sh("rmdir vault/notes/old").status == 0)
            #expect(MountHarness.eventually { !FileManager.default.fileExists(atPath: s.data + "/notes/old") }, "rmdir reaches the server")
            #expect(MountHarness.eventually { m.syncStatus["queue_depth"] == .int(0) })
            // A name the server refuses (a folder the mount has not heard of holds it there) is
            // refused here with its reason, and kept.
            s.quiet(true)
            _ = s.call("POST", "/api/data/folders", body: #"{"parent":"","name":"clash.md"}"#)
            #expect(m.sh("printf 'mine\\n' > vault/clash.md").status == 0)
            #expect(MountHarness.eventually { m.sh("getfattr --only-values -n user.marfa.sync vault/clash.md").out == "rejected" })
            #expect(m.sh("cat vault/clash.md").out == "mine", "the refused file keeps its bytes")
            #expect(m.syncStatus["last_error"]?.stringValue?.contains("LIBRARY_FILE_CONFLICT") == true, "\(m.syncStatus["last_error"] ?? .null)")
            s.quiet(false)
            // What the server cannot keep is refused at once, and nothing is made.
            let ln = m.sh("ln -s notes/a.md vault/link.md")
            #expect(ln.status != 0 && ln.stderr.contains("Operation not permitted"), "\(ln.stderr)")
            #expect(m.sh("test -L vault/link.md").status != 0)
        }
    }

    /// rsync writes each file under a temporary name and renames it; the server hears both, and its
    /// events come back while the mount is still sending: nothing is taken back from them.
    @Test func FS34_rsyncIntoTheTreeTwiceSendsEachFileOnceAndThenNothing() throws {
        let s = try MyLifeDBContract()
        try MountHarness.with(options: try s.mountOptions()) { m in
            let src = m.root + "/src"
            #expect(Shell.run(["/bin/bash", "-c", "mkdir -p \(src)/sub && for i in $(seq 1 300); do echo \"note $i\" > \(src)/n$i.md; done && echo deep > \(src)/sub/d.md"]).status == 0)
            #expect(m.sh("rsync -a \(src)/ vault/synced/").status == 0)
            #expect(MountHarness.eventually { m.syncStatus["queue_depth"] == .int(0) })
            sleep(2)   // the server's events for the last files are heard
            let again = m.sh("rsync -ai \(src)/ vault/synced/")
            #expect(again.status == 0 && again.out.isEmpty, "the second rsync sends nothing: \(again.out.prefix(500))")
            #expect(Shell.run(["diff", "-r", src, s.data + "/synced"]).status == 0, "the server has every file, under its own name")
            #expect(m.sql("SELECT count(*) FROM items WHERE state = 'trashed'") == "0", "no file was taken back as removed")
            #expect(m.sh("ls -a vault/synced | grep -c '^\\.n'").out == "0", "no temporary name is left")
        }
    }

    @Test func FS34_changesOnTheServerShowWithInotifyEvents() throws {
        let s = try MyLifeDBContract(password: "pw")
        s.put("notes/a.md", "one\n")
        s.put("notes/b.md", "bee\n")
        s.put("notes/gone.md", "bye\n")
        try MountHarness.with(options: try s.mountOptions()) { m in
            let log = m.root + "/inotify.log", err = m.root + "/inotify.err"
            guard let pid = Shell.spawn(["inotifywait", "-m", "-r", "--format", "%e %w%f", m.path("vault/")], stdout: log, stderr: err) else {
                Issue.record("inotifywait did not start"); return
            }
            defer { Shell.killAndReap(pid) }
            #expect(MountHarness.eventually { read(err).contains("Watches established") })
            s.put("notes/a.md", "one\ntwo\n")
            s.put("notes/fresh.md", "fresh\n")
            _ = s.call("PATCH", "/api/data/files/notes/b.md", body: #"{"name":"bee.md"}"#)
            _ = s.call("POST", "/api/data/folders", body: #"{"parent":"","name":"moved"}"#)
            _ = s.call("PATCH", "/api/data/files/notes/fresh.md", body: #"{"parent":"moved"}"#)
            _ = s.call("DELETE", "/api/data/files/notes/gone.md")
            #expect(MountHarness.eventually { m.sh("cat vault/notes/a.md").out == "one\ntwo" })
            #expect(MountHarness.eventually { m.sh("cat vault/moved/fresh.md").out == "fresh" })
            #expect(MountHarness.eventually { m.sh("cat vault/notes/bee.md").out == "bee" && m.sh("test -e vault/notes/b.md").status != 0 })
            #expect(MountHarness.eventually { m.sh("test -e vault/notes/gone.md").status != 0 })
            let vault = m.path("vault/")
            #expect(MountHarness.eventually {
                let l = read(log)
                return l.contains("MODIFY \(vault)notes/a.md") && l.contains("MOVED_FROM \(vault)notes/b.md") && l.contains("MOVED_TO \(vault)notes/bee.md")
                    && l.contains("DELETE \(vault)notes/gone.md") && l.contains("CREATE,ISDIR \(vault)moved")
                    // inotifywait -r watches `moved` only once it has read its CREATE: a move into it
                    // right after may come first and be heard from `notes` alone, as on any disk.
                    && (l.contains("MOVED_TO \(vault)moved/fresh.md") || l.contains("MOVED_FROM \(vault)notes/fresh.md"))
            }, "\(read(log))")
            #expect(m.syncStatus["queue_depth"] == .int(0), "the server's changes are not sent back")
            #expect(s.read("notes/a.md") == "one\ntwo\n")
        }
    }

    /// A reading of the tree lists one folder, then others: a file moved from a folder listed after
    /// the move, into one listed before it (here: not there yet), is not taken for a removal and a
    /// new file. It keeps its item and inode.
    @Test func FS34_aMoveDuringAReadingThatListsTheOldFolderAfterItIsAMove() throws {
        try moveDuringAReading(holding: "notes", into: "moved", made: true)
    }

    /// The other order: the old folder listed before the move, the new one after it. The file is
    /// in both listings; the server, asked, no longer has the old one.
    @Test func FS34_aMoveDuringAReadingThatListsTheNewFolderAfterItIsAMove() throws {
        try moveDuringAReading(holding: "moved", into: "moved", made: false)
    }

    /// Moves `notes/x.md` into `folder` on the server (made then, if `made`) while a reading of the
    /// whole tree waits for its listing of `held`; the mount must move the file it has.
    func moveDuringAReading(holding held: String, into folder: String, made: Bool) throws {
        let s = try MyLifeDBContract()
        s.put("notes/x.md", "ex\n")
        if !made { s.put(folder + "/other.md", "o\n") }
        s.put("top.md", "top\n")
        try MountHarness.with(options: try s.mountOptions()) { m in
            let inode = m.sh("stat -c %i vault/notes/x.md").out
            s.hold(held)
            // A rename makes the mount read the whole tree: the root is listed, `held` waits.
            _ = s.call("PATCH", "/api/data/files/top.md", body: #"{"name":"top2.md"}"#)
            #expect(MountHarness.eventually { s.waitingListings == 1 })
            if made {
                _ = s.call("POST", "/api/data/folders", body: #"{"parent":"","name":"\#(folder)"}"#)
            } else {
                usleep(300_000)   // the other folders are listed meanwhile
            }
            _ = s.call("PATCH", "/api/data/files/notes/x.md", body: #"{"parent":"\#(folder)"}"#)
            s.release(held)
            #expect(MountHarness.eventually { m.sh("cat vault/\(folder)/x.md").out == "ex" && m.sh("test -e vault/notes/x.md").status != 0 })
            #expect(m.sh("stat -c %i vault/\(folder)/x.md").out == inode, "the moved file is the same file")
            #expect(m.sh("ls vault/").out.split(separator: "\n").map(String.init).sorted() == [folder, "notes", "top2.md"].sorted())
            #expect(s.read("notes/x.md") == nil && s.read(folder + "/x.md") == "ex\n", "nothing sent back")
        }
    }

    @Test func FS34_aStreamThatMissedChangesLosesNothing() throws {
        let s = try MyLifeDBContract()
        s.put("a.md", "a\n")
        s.put("b.md", "b\n")
        try MountHarness.with(options: try s.mountOptions()) { m in
            // The stream hears nothing of these, then drops.
            s.quiet(true)
            s.put("a.md", "a changed\n")
            s.put("sub/new.md", "new\n")
            _ = s.call("DELETE", "/api/data/files/b.md")
            sleep(1)
            #expect(m.sh("cat vault/a.md").out == "a", "the stream missed the change")
            s.quiet(false)
            s.dropStreams()
            #expect(MountHarness.eventually(timeout: 20) { m.sh("cat vault/a.md").out == "a changed" }, "a reconnect reads the tree again")
            #expect(MountHarness.eventually { m.sh("cat vault/sub/new.md").out == "new" && m.sh("test -e vault/b.md").status != 0 })
        }
    }

    @Test func FS34_aFolderTheServerRefusesToListLosesNothingHere() throws {
        let s = try MyLifeDBContract()
        s.put("private/p.md", "mine\n")
        s.put("open/o.md", "o\n")
        s.put("closed/c.md", "c\n")
        s.call("POST", "/_contract/forbid?path=closed")
        try MountHarness.with(options: try s.mountOptions()) { m in
            #expect(m.syncStatus["first_sync_done"] == .bool(true), "a folder refused does not hold up the first sync")
            #expect(m.sh("cat vault/open/o.md").out == "o")
            #expect(m.sh("cat vault/private/p.md").out == "mine")
            // Refused later: a whole reading (a reconnection, no event for the new file) still
            // takes the rest of the tree, and takes nothing known in that folder as removed.
            s.call("POST", "/_contract/forbid?path=private")
            s.quiet(true)
            s.put("open/o2.md", "o2\n")
            s.quiet(false)
            s.dropStreams()
            #expect(MountHarness.eventually(timeout: 20) { m.sh("cat vault/open/o2.md").out == "o2" }, "the rest of the tree is read")
            #expect(m.sh("cat vault/private/p.md").out == "mine", "what is known in the refused folder stays")
            #expect(m.sql("SELECT count(*) FROM items WHERE state = 'trashed'") == "0")
        }
    }

    /// A reading the server is too busy for (503) is made again a moment later: the change whose
    /// only event it was does not wait for the next event or the minute's rescan.
    @Test func FS34_aReadingTheServerRefusesForAMomentIsMadeAgainSoon() throws {
        let s = try MyLifeDBContract()
        s.put("open/o.md", "o\n")
        try MountHarness.with(options: try s.mountOptions()) { m in
            #expect(m.sh("cat vault/open/o.md").out == "o")
            s.call("POST", "/_contract/busy?count=2")
            s.put("open/late.md", "late\n")
            // (The rescan is a minute away.)
            #expect(MountHarness.eventually(timeout: 20) { m.sh("cat vault/open/late.md").out == "late" }, "\(m.syncStatus)")
        }
    }

    @Test func FS34_offlineEditsDrainOnReconnect() throws {
        let s = try MyLifeDBContract()
        s.put("n.md", "start\n")
        try MountHarness.with(options: try s.mountOptions()) { m in
            s.stop()
            #expect(m.sh("printf 'offline\\n' >> vault/n.md && printf 'made offline\\n' > vault/off.md && mkdir vault/offdir").status == 0)
            #expect(MountHarness.eventually { m.syncStatus["connection"] == .string("offline") }, "\(m.syncStatus)")
            #expect(m.sh("cat vault/n.md").out == "start\noffline", "reads come from the store")
            #expect(m.syncStatus["queue_depth"] != .int(0))
            try s.start()
            #expect(MountHarness.eventually(timeout: 40) { s.read("n.md") == "start\noffline\n" && s.read("off.md") == "made offline\n" })
            #expect(MountHarness.eventually { FileManager.default.fileExists(atPath: s.data + "/offdir") })
            #expect(MountHarness.eventually { m.syncStatus["connection"] == .string("online") && m.syncStatus["queue_depth"] == .int(0) })
        }
    }

    @Test func FS34_concurrentEditsMergeOrKeepAConflictedCopy() throws {
        let s = try MyLifeDBContract()
        s.put("m.md", "one\ntwo\nthree\nfour\nfive\n")
        s.put("o.md", "same line\n")
        try MountHarness.with(options: try s.mountOptions()) { m in
            // Both sides edit while the mount hears nothing of the server's edit.
            s.quiet(true)
            s.put("m.md", "ONE\ntwo\nthree\nfour\nfive\n")
            s.put("o.md", "server line\n")
            #expect(m.sh("sed -i 's/five/FIVE/' vault/m.md && printf 'mount line\\n' > vault/o.md").status == 0)
            #expect(MountHarness.eventually { s.read("m.md") == "ONE\ntwo\nthree\nfour\nFIVE\n" }, "\(s.read("m.md") ?? "")")
            #expect(MountHarness.eventually { m.sh("cat vault/m.md").out == "ONE\ntwo\nthree\nfour\nFIVE" }, "the merge shows here too")
            // Overlapping edits: the file keeps the server's text, the local one is a sibling copy, on both sides.
            #expect(MountHarness.eventually { m.sh("ls vault/ | grep -c 'o (conflicted copy'").out == "1" }, "\(m.sh("ls vault/").out)")
            #expect(m.sh("cat vault/o.md").out == "server line")
            #expect(m.sh("cat vault/o\\ \\(conflicted\\ copy*").out == "mount line")
            #expect(MountHarness.eventually { m.sh("ls '\(s.data)' | grep -c 'o (conflicted copy'").out == "1" }, "the copy reaches the server")
            #expect(s.read("o.md") == "server line\n")
            #expect(m.sh("cat .marfafs/conflicts").out.contains("conflicted copy"), "listed as a conflicted copy (FS-21)")
            // Deleted here, written there: the edit wins.
            s.put("d.md", "base\n")
            s.quiet(false)
            s.dropStreams()
            #expect(MountHarness.eventually(timeout: 20) { m.sh("cat vault/d.md").out == "base" })
            s.quiet(true)
            s.put("d.md", "edited there\n")
            #expect(m.sh("rm vault/d.md").status == 0)
            #expect(MountHarness.eventually { m.syncStatus["queue_depth"] == .int(0) })
            #expect(s.read("d.md") == "edited there\n", "not deleted on the server")
            s.quiet(false)
            s.dropStreams()
            #expect(MountHarness.eventually(timeout: 20) { m.sh("cat vault/d.md").out == "edited there" }, "and back here")
        }
    }

    @Test func FS34_aLargeFileStreamsInAndOutInRanges() throws {
        let s = try MyLifeDBContract()
        #expect(Shell.run(["/bin/bash", "-c", "head -c 200M /dev/urandom > '\(s.data)/video.mp4'"]).status == 0)
        try MountHarness.with(options: try s.mountOptions()) { m in
            #expect(m.sh("stat -c %s vault/video.mp4").out == String(200 << 20), "listed with its size before it is fetched")
            #expect(m.sh("cmp '\(s.data)/video.mp4' vault/video.mp4").status == 0)
            let ranged = s.call("GET", "/_contract/requests").body
            #expect(ranged.contains("\"GET /raw/video.mp4\":") && !ranged.contains("\"GET /raw/video.mp4\":1,"), "fetched in several ranges: \(ranged)")
            #expect(m.sh("head -c 200M /dev/urandom > \(m.root)/up.bin && cp \(m.root)/up.bin vault/up.bin").status == 0)
            #expect(MountHarness.eventually(timeout: 120) { Shell.run(["cmp", m.root + "/up.bin", s.data + "/up.bin"]).status == 0 })
        }
    }

    @Test(arguments: ["legacy", "legacy-only"]) func FS34_theLegacyRoutesWork(routes: String) throws {
        let s = try MyLifeDBContract(routes: routes)
        s.put("notes/doc.md", "doc\n")
        s.put("notes/x.md", "x\n")
        let h = try MountHarness()
        h.mountOptions = try s.mountOptions()
        h.environment = ["MARFAFS_RESCAN_SECONDS": "2"]
        try h.mount()
        defer { h.unmount() }
        #expect(h.sh("cat vault/notes/doc.md").out == "doc")
        #expect(h.sh("mkdir vault/notes/arch && mv vault/notes/doc.md vault/notes/arch/doc2.md && rm vault/notes/x.md").status == 0)
        #expect(MountHarness.eventually { s.read("notes/arch/doc2.md") == "doc\n" && s.read("notes/x.md") == nil })
        // A PUT on these routes makes no event: the tree is read again every few seconds.
        s.put("notes/late.md", "late\n")
        #expect(MountHarness.eventually(timeout: 20) { h.sh("cat vault/notes/late.md").out == "late" })
        // A server with both route versions is spoken to in the current one; one without, in its own.
        let counts = s.call("GET", "/_contract/requests").body
        let old = counts.contains("/api/library/move") && counts.contains("/api/library/rename") && counts.contains("/api/library/file")
            && counts.contains("/api/notifications/stream")
        #expect(old == (routes == "legacy-only"), "\(counts)")
    }

    @Test func FS34_aWrongPasswordIsAClearErrorAndLosesNothing() throws {
        let s = try MyLifeDBContract(password: "right")
        s.put("n.md", "server\n")
        let h = try MountHarness()
        let options = try s.mountOptions(secret: "wrong")
        h.mountOptions = options
        try h.mount()
        defer { h.unmount() }
        #expect(MountHarness.eventually { h.syncStatus["connection"] == .string("unauthorized") }, "\(h.syncStatus)")
        #expect(h.syncStatus["last_error"]?.stringValue?.contains("password") == true, "\(h.syncStatus["last_error"] ?? .null)")
        #expect(h.sh("printf 'kept\\n' > vault/local.md").status == 0, "the mount works offline")
        // The right password in the same file: it is read again, and everything goes.
        try "right\n".write(toFile: options[3], atomically: true, encoding: .utf8)
        chmod(options[3], 0o600)
        #expect(MountHarness.eventually(timeout: 30) { s.read("local.md") == "kept\n" })
        #expect(MountHarness.eventually { h.sh("cat vault/n.md").out == "server" })
    }

    @Test func FS34_previewImagesAreReadableUnderMarfafsPreviews() throws {
        let s = try MyLifeDBContract()
        s.put("docs/report.pdf", "%PDF-1.4 a report")
        s.put("docs/notes.md", "no preview\n")
        try MountHarness.with(options: try s.mountOptions()) { m in
            #expect(m.sh("getfattr --only-values -n user.mylifedb.preview_sqlar vault/docs/report.pdf").out.hasPrefix("previews/"))
            #expect(m.sh("ls .marfafs/previews/docs").out == "report.pdf.jpg", "only files with a preview are listed")
            #expect(m.sh("cat .marfafs/previews/docs/report.pdf.jpg").out.contains("preview of docs/report.pdf"))
            #expect(m.sh("stat -c %s .marfafs/previews/docs/report.pdf.jpg").out != "0")
            #expect(m.sh("echo x > .marfafs/previews/docs/report.pdf.jpg").status != 0, "previews are read-only")
            // Kept once fetched: readable offline.
            s.stop()
            #expect(m.sh("cat .marfafs/previews/docs/report.pdf.jpg").out.contains("preview of docs/report.pdf"))
        }
    }

    @Test func FS34_aServerWhosePasswordIsNotSetYetTakesTheLoginSession() throws {
        let s = try MyLifeDBContract(password: "first", unset: true)
        try "x\n".write(toFile: s.data + "/n.md", atomically: true, encoding: .utf8)
        try MountHarness.with(options: try s.mountOptions()) { m in
            #expect(m.sh("cat vault/n.md").out == "x")
            #expect(m.sh("printf 'y\\n' > vault/y.md").status == 0)
            #expect(MountHarness.eventually { s.read("y.md") == "y\n" })
            #expect(s.call("GET", "/api/data/root").status == 200, "the login set the password, which HTTP Basic now takes")
            // A restarted server knows no session (and here, no password): the mount logs in again.
            s.stop()
            try s.start()
            #expect(m.sh("printf 'z\\n' > vault/z.md").status == 0)
            #expect(MountHarness.eventually(timeout: 40) { s.read("z.md") == "z\n" })
        }
    }

    @Test func FS34_aStoreFollowsOneKindOfServer() throws {
        let s = try MyLifeDBContract()
        s.put("n.md", "x\n")
        let h = try MountHarness()
        h.mountOptions = try s.mountOptions()
        try h.mount()
        h.unmount()
        let key = h.root + "/key"
        try "some-key\n".write(toFile: key, atomically: true, encoding: .utf8)
        chmod(key, 0o600)
        let r = Shell.run([MountHarness.binary, "mount", h.mountpoint, "--store", h.store, "--server", "http://127.0.0.1:9", "--key-file", key])
        defer { h.unmount() }
        #expect(r.status != 0)
        #expect((r.stderr + r.stdout).contains("syncs with the MyLifeDB server"), "\(r.stderr)")
        #expect(h.sh("mountpoint -q .").status != 0, "nothing is mounted")
        #expect(h.sql("SELECT value FROM meta WHERE key = 'server'").hasPrefix("mylifedb+"), "the store is unchanged")
    }
}
