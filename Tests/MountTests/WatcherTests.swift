import Foundation
import MarfaTestSupport
import Testing

/// FS-25 (in part): an edit made on mount A, or a change of its metadata, raises on mount B the
/// inotify events the same change made on B would raise, so watchers reload; B's own changes raise
/// theirs once. Real watchers: inotifywait, entr and Python's watchdog.
@Suite(.serialized) struct WatcherTests {
    func cat(_ m: MountHarness, _ path: String) -> String { (try? String(contentsOfFile: m.path(path), encoding: .utf8)) ?? "" }
    func read(_ file: String) -> String { (try? String(contentsOfFile: file, encoding: .utf8)) ?? "" }

    func inotifywait(_ m: MountHarness, _ args: [String]) -> (pid: pid_t, log: String)? { m.inotifywait(args) }

    @Test func FS25_aRemoteEditRaisesModifyAndCloseWriteAndAMetadataChangeAttrib() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            let note = "types/core.note/watched.md"
            #expect(a.sh("printf 'one\\n' > \(note)").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { cat(b, note) == "one\n" })
            guard let (w, log) = inotifywait(b, ["-e", "modify,close_write,attrib", "--format", "%e %f", b.path("types/core.note")]) else { return }
            defer { Shell.killAndReap(w) }
            let before = b.sh("stat -c %Y%N \(note) | cut -c1-10; stat -c %y \(note)").out
            // A's edit: B's watcher sees the file modified and closed after writing.
            #expect(a.sh("printf 'one\\ntwo\\n' > \(note)").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { cat(b, note) == "one\ntwo\n" })
            #expect(MountHarness.eventually { read(log).contains("MODIFY watched.md") && read(log).contains("CLOSE_WRITE,CLOSE watched.md") }, "\(read(log))")
            #expect(b.sh("stat -c %y \(note)").out != before.split(separator: "\n").last.map(String.init), "the mtime moved")
            // A's tag: B's watcher sees the attributes change.
            #expect(a.sh("mkdir tags/seen && ln -s ../../types/core.note/watched.md tags/seen/").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { read(log).contains("ATTRIB watched.md") }, "\(read(log))")
            // B's own write raises its events once: nothing is replayed for a local change.
            let lines = read(log).split(separator: "\n").count
            #expect(b.sh("printf 'local\\n' > types/core.note/local.md").status == 0)
            usleep(1_500_000)
            let mine = read(log).split(separator: "\n").dropFirst(lines).filter { $0.hasSuffix(" local.md") }
            #expect(mine.filter { $0.hasPrefix("MODIFY") }.count == 1 && mine.filter { $0.hasPrefix("CLOSE_WRITE") }.count == 1, "\(mine)")
        }
    }

    @Test func FS25_entrAndWatchdogReactToRemoteEditsCreatesAndRenames() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            let note = "types/core.note/run.md"
            #expect(a.sh("printf 'v1\\n' > \(note)").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { cat(b, note) == "v1\n" })
            // entr re-runs a command when the file changes (it watches with inotify).
            let ran = b.root + "/entr.out"
            // entr reads the files to watch on its standard input; `exec` keeps it the spawned
            // process, so the test's kill ends it.
            try (b.path(note) + "\n").write(toFile: b.root + "/entr.list", atomically: true, encoding: .utf8)
            guard let e = Shell.spawn(["/bin/bash", "-c", "exec entr -np sh -c 'echo ran >> \(ran)' < '\(b.root)/entr.list'"], stderr: b.root + "/entr.err") else {
                Issue.record("entr did not start"); return
            }
            defer { Shell.killAndReap(e) }
            // watchdog, as Obsidian- or VS Code-like tools use it.
            let events = b.root + "/watchdog.out"
            let script = """
            import sys, time
            from watchdog.observers import Observer
            from watchdog.events import FileSystemEventHandler
            class H(FileSystemEventHandler):
                def on_modified(self, e):
                    if not e.is_directory: print('modified', e.src_path, flush=True)
                def on_created(self, e):
                    print('created', e.src_path, flush=True)
                def on_moved(self, e):
                    print('moved', e.src_path, e.dest_path, flush=True)
            o = Observer(); o.schedule(H(), sys.argv[1]); o.start(); print('ready', flush=True)
            time.sleep(120)
            """
            try script.write(toFile: b.root + "/watch.py", atomically: true, encoding: .utf8)
            guard let wd = Shell.spawn(["/usr/bin/python3", b.root + "/watch.py", b.path("types/core.note")], stdout: events, stderr: b.root + "/watchdog.err") else {
                Issue.record("watchdog did not start"); return
            }
            defer { Shell.killAndReap(wd) }
            #expect(MountHarness.eventually { read(events).contains("ready") }, "\(read(b.root + "/watchdog.err"))")
            usleep(500_000)
            #expect(a.sh("printf 'v2\\n' > \(note)").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { read(ran).contains("ran") }, "entr ran: \(read(ran)) \(read(b.root + "/entr.err"))")
            #expect(MountHarness.eventually(timeout: 20) { read(events).contains("modified \(b.path(note))") }, "\(read(events))")
            // A new note and a rename from A: created and moved, as an editor's file tree wants them.
            #expect(a.sh("printf 'new\\n' > types/core.note/fresh.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { read(events).contains("created \(b.path("types/core.note/fresh.md"))") }, "\(read(events))")
            #expect(a.sh("mv types/core.note/fresh.md types/core.note/moved.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) {
                read(events).contains("moved \(b.path("types/core.note/fresh.md")) \(b.path("types/core.note/moved.md"))")
            }, "\(read(events))")
        }
    }
}

extension WatcherTests {
    /// FS-25 under load: 1,000 remote edits replayed on B while `grep -r` and an editor's save loop
    /// run there: nothing deadlocks, B converges, and B's own saves keep their bytes.
    @Test func FS25_aThousandRemoteEditsWhileGrepAndSavesRunOnB() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            #expect(a.sh("for i in $(seq 0 19); do printf 'start\\n' > types/core.note/n$i.md; done").status == 0)
            #expect(MountHarness.eventually(timeout: 30) { b.sh("ls types/core.note | wc -l").out == "20" })
            let stop = b.root + "/stop"
            let grep = Shell.spawn(["/bin/bash", "-c", "cd '\(b.mountpoint)' && while [ ! -e '\(stop)' ]; do grep -r zzz . > /dev/null; done"])
            let saves = Shell.spawn(["/bin/bash", "-c", "cd '\(b.mountpoint)/types/core.note' && i=0; while [ ! -e '\(stop)' ]; do i=$((i+1)); printf 'mine %s\\n' $i > .mine.tmp && mv .mine.tmp mine.md; done"])
            defer {
                FileManager.default.createFile(atPath: stop, contents: nil)
                for pid in [grep, saves].compactMap({ $0 }) { Shell.killAndReap(pid) }
            }
            // 1,000 edits made on the server, one request each (a mount would fold edits of one
            // note made faster than it sends them), spread over the 20 notes.
            let ids = (0..<20).map { a.sh("getfattr --only-values -n user.marfa.id types/core.note/n\($0).md").out }
            let script = """
            import json, sys, urllib.request
            base, key, ids = sys.argv[1], sys.argv[2], sys.argv[3].split(',')
            for i in range(1, 1001):
                body = json.dumps({"properties": {"title": "n%d" % (i % 20), "body": "edit %d\\n" % i}, "properties_mode": "replace"}).encode()
                req = urllib.request.Request(base + "/items/" + ids[i % 20], data=body, method="PATCH",
                                             headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
                urllib.request.urlopen(req).read()
            """
            try script.write(toFile: b.root + "/edits.py", atomically: true, encoding: .utf8)
            let sent = Shell.run(["/usr/bin/python3", b.root + "/edits.py", p.server.base, p.key, ids.joined(separator: ",")])
            #expect(sent.status == 0, "\(sent.stderr)")
            #expect(MountHarness.eventually(timeout: 120) { b.sh("cat types/core.note/n0.md").out == "edit 1000" },
                    "B converges: \(b.sh("cat types/core.note/n0.md").out)")
            #expect(MountHarness.eventually(timeout: 60) { b.sh("cat types/core.note/n19.md").out == "edit 999" })
            #expect(b.sh("cat .marfafs/events | grep -c remote.event").out != "0")
            FileManager.default.createFile(atPath: stop, contents: nil)
            usleep(300_000)
            let listed = b.sh("timeout 10 ls types/core.note | wc -l").out
            // A copy of B's own saves: what B's events and log say of them, to find why.
            let why = listed == "21" ? "" : b.sh("grep -E 'stale_save|conflict' .marfafs/events | tail -8").out + "\n" + b.daemonLog(last: 6000)
            #expect(listed == "21", "B still answers, no copy of its own saves: \(b.sh("ls -a types/core.note | tr '\\n' ' '").out)\n\(why)")
            #expect(b.sh("cat types/core.note/mine.md").out.hasPrefix("mine "), "B's saves keep their bytes")
        }
    }
}

extension WatcherTests {
    /// FS-25: a note made, renamed, tagged, untagged and trashed on A raises on B the events the
    /// same changes made on B raise: IN_CREATE, IN_MOVED_FROM/IN_MOVED_TO, IN_CREATE and
    /// IN_DELETE in `tags/<tag>/` (and for a tag directory itself), IN_MOVED_FROM/IN_MOVED_TO into
    /// `trash/`. B's own create raises its IN_CREATE once.
    @Test func FS25_remoteCreatesRenamesTagsAndDeletesRaiseTheirEvents() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            // A tag B already shows, so the watcher has its directory from the start.
            #expect(a.sh("echo x > types/core.note/seed.md && mkdir tags/proj && ln -s ../../types/core.note/seed.md tags/proj/").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { b.sh("ls tags/proj").out == "seed.md" })
            guard let (w, log) = inotifywait(b, ["-r", "-e", "create,delete,moved_from,moved_to", "--format", "%e %w%f",
                                                 b.path("types"), b.path("tags"), b.path("trash")]) else { return }
            defer { Shell.killAndReap(w) }
            func saw(_ line: String) -> Bool { MountHarness.eventually(timeout: 20) { read(log).split(separator: "\n").contains { $0 == line } } }
            let types = b.path("types/core.note") + "/", tags = b.path("tags") + "/"

            #expect(a.sh("printf 'hi\\n' > types/core.note/fresh.md").status == 0)
            #expect(saw("CREATE \(types)fresh.md"), "\(read(log))")
            #expect(b.sh("cat types/core.note/fresh.md").out == "hi", "the created name reads the item")

            #expect(a.sh("mv types/core.note/fresh.md types/core.note/renamed.md").status == 0)
            #expect(saw("MOVED_FROM \(types)fresh.md") && saw("MOVED_TO \(types)renamed.md"), "\(read(log))")
            let ino = b.sh("stat -c %i types/core.note/renamed.md").out

            #expect(a.sh("ln -s ../../types/core.note/renamed.md tags/proj/").status == 0)
            #expect(saw("CREATE \(tags)proj/renamed.md"), "\(read(log))")
            #expect(a.sh("mkdir tags/brand-new && ln -s ../../types/core.note/renamed.md tags/brand-new/").status == 0)
            // (Whether the watcher sees the entry made right after the directory depends on how
            // fast it watches the new directory, as for the same commands run on B.)
            #expect(saw("CREATE,ISDIR \(tags)brand-new"), "\(read(log))")
            #expect(b.sh("ls tags/brand-new").out == "renamed.md")
            #expect(a.sh("rm tags/proj/renamed.md").status == 0)
            #expect(saw("DELETE \(tags)proj/renamed.md"), "\(read(log))")
            // The tag's last item leaves it: on B (where no one made the directory) it goes away.
            #expect(a.sh("rm tags/brand-new/renamed.md").status == 0)
            #expect(saw("DELETE \(tags)brand-new/renamed.md") && saw("DELETE,ISDIR \(tags)brand-new"), "\(read(log))")
            #expect(b.sh("ls tags").out == "proj")

            #expect(a.sh("rm types/core.note/renamed.md").status == 0)
            #expect(saw("MOVED_FROM \(types)renamed.md"), "\(read(log))")
            #expect(saw("MOVED_TO \(b.path("trash/core.note"))/renamed.md"), "\(read(log))")
            #expect(b.sh("stat -c %i trash/core.note/renamed.md").out == ino, "the inode stays the item's")
            #expect(b.sh("ls types/core.note").out == "seed.md")

            // B's own create: its events once, nothing replayed.
            let lines = read(log).split(separator: "\n").count
            #expect(b.sh("echo mine > types/core.note/mine.md").status == 0)
            usleep(1_500_000)
            let mine = read(log).split(separator: "\n").dropFirst(lines).filter { $0.hasSuffix("/mine.md") }
            #expect(mine == ["CREATE \(types)mine.md"], "\(mine)")
            #expect(b.sh("cat types/core.note/mine.md").out == "mine")
        }
    }

    /// FS-25: vim with `autoread` reloads a clean buffer on `:checktime` after a remote edit, and
    /// its save then keeps the remote edit (nothing merged twice, no conflicted copy).
    @Test func FS25_vimAutoreadReloadsARemoteEdit() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            let note = "types/core.note/auto.md"
            #expect(a.sh("printf 'first line\\nsecond line\\n' > \(note)").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { cat(b, note) == "first line\nsecond line\n" })
            let run = Terminal.drive("vim -u DEFAULTS -i NONE -c 'set autoread' -c 'set backupskip=' auto.md", cwd: b.path("types/core.note"),
                                     ready: "second line", keys: [[":checktime", "Enter"], ["G", "o", "from vim", "Escape"], [":wq", "Enter"]]) { i in
                guard i == 0 else { return }
                _ = a.sh("printf 'first line edited on A\\nsecond line\\n' > \(note)")
                _ = MountHarness.eventually(timeout: 20) { cat(b, note).hasPrefix("first line edited on A") }
            }
            #expect(run.status == 0, "\(run.screen)")
            #expect(run.screen.contains("first line edited on A"), "the buffer reloaded: \(run.screen)")
            let expected = "first line edited on A\nsecond line\nfrom vim\n"
            #expect(cat(b, note) == expected)
            #expect(MountHarness.eventually(timeout: 20) { cat(a, note) == expected }, "\(cat(a, note))")
            #expect(b.sh("ls types/core.note").out == "auto.md", "no conflicted copy")
        }
    }
}

extension MountHarness {
    /// `inotifywait -m ARGS` on this mount, its events in `<root>/<name>.log`, once its watches are
    /// in place; nil (and an issue) if it did not start.
    func inotifywait(_ args: [String], name: String = "inotify") -> (pid: pid_t, log: String)? {
        let log = root + "/\(name).log", err = root + "/\(name).err"
        guard let pid = Shell.spawn(["inotifywait", "-m"] + args, stdout: log, stderr: err) else {
            Issue.record("inotifywait did not start"); return nil
        }
        #expect(MountHarness.eventually { ((try? String(contentsOfFile: err, encoding: .utf8)) ?? "").contains("Watches established") })
        return (pid, log)
    }
}
