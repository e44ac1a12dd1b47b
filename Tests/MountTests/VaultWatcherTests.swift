import Foundation
import MarfaTestSupport
import Testing

/// FS-30: changes made on mount A raise, in B's vault tree (`vault/`, where Obsidian, VS Code
/// and git are pointed), the events the same change made on B would raise: an edit, a new note, a
/// move between folders (one cookie), a delete, a folder made and removed, an attribute. Real
/// watchers: `inotifywait -m -r`, Python's watchdog (recursive), Node's `fs.watch` with
/// `recursive: true`, and chokidar (Debian's node-chokidar).
@Suite(.serialized) struct VaultWatcherTests {
    func cat(_ m: MountHarness, _ path: String) -> String { (try? String(contentsOfFile: m.path(path), encoding: .utf8)) ?? "" }
    func read(_ file: String) -> String { (try? String(contentsOfFile: file, encoding: .utf8)) ?? "" }
    func lines(_ file: String) -> [String] { read(file).split(separator: "\n").map(String.init) }

    static let watchdog = """
    import sys, time
    from watchdog.observers import Observer
    from watchdog.events import FileSystemEventHandler
    root = sys.argv[1]
    class H(FileSystemEventHandler):
        def on_any_event(self, e):
            if e.event_type in ("opened", "closed", "closed_no_write"): return
            kind = "dir" if e.is_directory else "file"
            dest = getattr(e, "dest_path", "")
            rel = lambda p: p[len(root):].lstrip("/") if p else ""
            print(e.event_type, kind, rel(e.src_path), rel(dest), flush=True)
    o = Observer(); o.schedule(H(), root, recursive=True); o.start(); print("ready", flush=True)
    time.sleep(300)
    """

    static let nodeWatch = """
    const fs = require('fs');
    fs.watch(process.argv[2], { recursive: true }, (ev, name) => console.log(ev, name));
    console.log('ready');
    setTimeout(() => process.exit(0), 300000);
    """

    static let chokidar = """
    const chokidar = require('chokidar');
    const root = process.argv[2];
    const w = chokidar.watch(root, { ignoreInitial: true, followSymlinks: false });
    w.on('all', (ev, p) => console.log(ev, require('path').relative(root, p)));
    w.on('ready', () => console.log('ready'));
    setTimeout(() => process.exit(0), 300000);
    """

    struct Watchers { var pids: [pid_t]; var inotify, watchdog, fsWatch, chokidar: String }

    /// inotifywait -m -r (on `vault/` and `also`), watchdog, Node's recursive fs.watch and chokidar
    /// on B's vault tree, once each is ready; their logs.
    func startWatchers(_ b: MountHarness, also: String) -> Watchers {
        let root = b.path(".marfafs/vault")
        for (name, text) in [("watch.py", Self.watchdog), ("watch.js", Self.nodeWatch), ("chokidar.js", Self.chokidar)] {
            try? text.write(toFile: b.root + "/" + name, atomically: true, encoding: .utf8)
        }
        let ino = b.root + "/inotify.log", inoErr = b.root + "/inotify.err"
        let wd = b.root + "/watchdog.log", nw = b.root + "/fswatch.log", ck = b.root + "/chokidar.log"
        let node = ["/usr/bin/env", "NODE_PATH=/usr/share/nodejs", "node"]
        let pids = [
            Shell.spawn(["inotifywait", "-m", "-r", "--format", "%e %c %w%f", b.path("vault/"), also], stdout: ino, stderr: inoErr),
            Shell.spawn(["/usr/bin/python3", b.root + "/watch.py", root], stdout: wd, stderr: b.root + "/watchdog.err"),
            Shell.spawn(node + [b.root + "/watch.js", root], stdout: nw, stderr: b.root + "/fswatch.err"),
            Shell.spawn(node + [b.root + "/chokidar.js", root], stdout: ck, stderr: b.root + "/chokidar.err"),
        ].compactMap { $0 }
        #expect(pids.count == 4)
        #expect(MountHarness.eventually {
            read(inoErr).contains("Watches established") && read(wd).contains("ready") && read(nw).contains("ready") && read(ck).contains("ready")
        }, "watchers ready: \(read(inoErr)) \(read(b.root + "/watchdog.err")) \(read(b.root + "/fswatch.err")) \(read(b.root + "/chokidar.err"))")
        return Watchers(pids: pids, inotify: ino, watchdog: wd, fsWatch: nw, chokidar: ck)
    }

    /// A line of inotifywait's (`%e %c %w%f`): the events, the cookie, the path.
    static func events(_ l: String) -> (String, String, String) {
        let f = l.split(separator: " ", maxSplits: 2).map(String.init)
        return f.count == 3 ? (f[0], f[1], f[2]) : ("", "", "")
    }

    /// Whether B's inotifywait (its log `ino`) heard `line` ("EVENTS path") within 20 s; if not,
    /// what B's daemon did meanwhile (the events it applied, a replay it could not make) is shown
    /// beside the caller's failed expectation.
    func heard(_ line: String, in ino: String, on b: MountHarness) -> Bool {
        let want = line.split(separator: " ", maxSplits: 1).map(String.init)
        let heard = MountHarness.eventually(timeout: 20) { lines(ino).contains { let e = Self.events($0); return e.0 == want[0] && e.2 == want[1] } }
        if !heard {
            FileHandle.standardError.write(Data("\n=== not heard on B: \(line)\nB's log:\n\(b.daemonLog())\nB's events:\n\(b.sh("tail -n 40 .marfafs/events").out)\n".utf8))
        }
        return heard
    }

    /// A remote `rm -rf` of notes this mount made, in several folders, arrives in several batches;
    /// the one that empties a folder removes its files and the folder together. Every file's
    /// DELETE is heard, then its folder's: the folder's removal is replayed after the files that
    /// left it, and a replay whose folder a later batch took away still walks through it.
    @Test func FS30_aRemoteRmRfOfNotesMadeHereRaisesEveryDelete() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            let folders = 8, perFolder = 60
            #expect(b.sh("for d in $(seq 1 \(folders)); do mkdir -p vault/rr/d$d; for i in $(seq 1 \(perFolder)); do printf 'n %s\\n' $i > vault/rr/d$d/n$i.md; done; done").status == 0)
            #expect(MountHarness.eventually(timeout: 60) { a.sh("find vault/rr -name '*.md' | wc -l").out == "\(folders * perFolder)" },
                    "A sees \(a.sh("find vault/rr -name '*.md' | wc -l").out)")
            #expect(b.sh("cat .marfafs/flush > /dev/null; find vault/rr -type d | wc -l").out == "\(folders + 1)")
            let ino = b.root + "/rr.log", err = b.root + "/rr.err"
            let pid = Shell.spawn(["inotifywait", "-m", "-r", "-e", "delete", "--format", "%e %w%f", b.path("vault/rr")], stdout: ino, stderr: err)
            defer { pid.map(Shell.killAndReap) }
            // chokidar rescans a folder as its files go: one listed after the folder was removed here
            // but before the kernel heard (its number retired) must read as gone, not as an error.
            try? Self.chokidar.write(toFile: b.root + "/chokidar.js", atomically: true, encoding: .utf8)
            let ck = b.root + "/rr-chokidar.log", ckErr = b.root + "/rr-chokidar.err"
            let ckPid = Shell.spawn(["/usr/bin/env", "NODE_PATH=/usr/share/nodejs", "node", b.root + "/chokidar.js", b.path(".marfafs/vault/rr")], stdout: ck, stderr: ckErr)
            defer { ckPid.map(Shell.killAndReap) }
            #expect(MountHarness.eventually { read(err).contains("Watches established") && read(ck).contains("ready") }, "\(read(err)) \(read(ckErr))")
            #expect(a.sh("rm -rf vault/rr").status == 0)
            let v = b.path("vault/rr")
            let dirs = (1...folders).map { "DELETE,ISDIR \(v)/d\($0)" }
            #expect(MountHarness.eventually(timeout: 60) { Set(lines(ino)).isSuperset(of: dirs) }, "\(read(ino))")
            func files() -> Set<String> { Set(lines(ino).filter { $0.hasPrefix("DELETE ") && $0.hasSuffix(".md") }) }
            let want = Set((1...folders).flatMap { d in (1...perFolder).map { "DELETE \(v)/d\(d)/n\($0).md" } })
            #expect(MountHarness.eventually(timeout: 20) { files() == want },
                    "\(want.subtracting(files()).count) of \(want.count) DELETEs not heard, e.g. \(want.subtracting(files()).sorted().prefix(5))")
            // Each folder's DELETE after its files'.
            let order = lines(ino)
            for d in 1...folders {
                guard let dir = order.firstIndex(of: "DELETE,ISDIR \(v)/d\(d)") else { continue }
                let late = order[dir...].filter { $0.hasPrefix("DELETE \(v)/d\(d)/") }
                #expect(late.isEmpty, "d\(d): \(late.count) files' DELETEs after their folder's")
            }
            #expect(MountHarness.eventually(timeout: 20) { lines(ck).filter { $0.hasPrefix("unlink ") }.count == folders * perFolder },
                    "chokidar: \(lines(ck).filter { $0.hasPrefix("unlink ") }.count) unlinks of \(folders * perFolder); \(read(ckErr).prefix(600))")
            #expect(!read(ckErr).contains("Error"), "chokidar: \(read(ckErr).prefix(600))")
            #expect(!b.daemonLog(last: 1 << 22).contains("was not replayed"), "\(b.daemonLog(last: 1 << 22).split(separator: "\n").filter { $0.contains("not replayed") }.prefix(5))")
        }
    }

    /// A remote `rm -rf` whose files are replayed after their folders left the tree, while a
    /// program keeps looking those folders up (a watcher's rescan: each look answered "no such
    /// file" and kept by the kernel for a second). The folders keep their numbers while deeper
    /// removals are replayed through them; the replays drop the names looked up since and are
    /// all heard. (Failed with the names dropped only for folders whose numbers had retired: the
    /// top folder's stale "no such file" answered the replays of everything under it.)
    @Test func FS30_aFolderLookedUpAfterItLeftTheTreeDoesNotHideTheDeletesUnderIt() throws {
        try MountPair.with(environment: ["MARFAFS_NOTIFY_DELAY_MS": "300"]) { p in
            let (a, b) = (p.a, p.b)
            let folders = 6, perFolder = 20
            #expect(b.sh("for d in $(seq 1 \(folders)); do mkdir -p vault/top/d$d; for i in $(seq 1 \(perFolder)); do printf 'n %s\\n' $i > vault/top/d$d/n$i.md; done; done").status == 0)
            #expect(MountHarness.eventually(timeout: 60) { a.sh("find vault/top -name '*.md' | wc -l").out == "\(folders * perFolder)" },
                    "A sees \(a.sh("find vault/top -name '*.md' | wc -l").out)")
            #expect(b.sh("cat .marfafs/flush > /dev/null").status == 0)
            let ino = b.root + "/top.log", err = b.root + "/top.err"
            let pid = Shell.spawn(["inotifywait", "-m", "-r", "-e", "delete", "--format", "%e %w%f", b.path("vault/top")], stdout: ino, stderr: err)
            defer { pid.map(Shell.killAndReap) }
            #expect(MountHarness.eventually { read(err).contains("Watches established") }, "\(read(err))")
            let v = b.path("vault/top")
            let looks = (1...folders).map { "\(v)/d\($0)" }.joined(separator: " ")
            let prober = Shell.spawn(["/bin/sh", "-c", "while :; do stat \(v) \(looks) >/dev/null 2>&1; done"])
            defer { prober.map(Shell.killAndReap) }
            #expect(a.sh("rm -rf vault/top").status == 0)
            let want = Set((1...folders).flatMap { d in (1...perFolder).map { "DELETE \(v)/d\(d)/n\($0).md" } } + (1...folders).map { "DELETE,ISDIR \(v)/d\($0)" })
            func heard() -> Set<String> { Set(lines(ino)).intersection(want) }
            #expect(MountHarness.eventually(timeout: 60) { heard() == want },
                    "\(want.subtracting(heard()).count) of \(want.count) DELETEs not heard, e.g. \(want.subtracting(heard()).sorted().prefix(5))")
            let log = b.daemonLog(last: 1 << 22).split(separator: "\n").filter { $0.contains("not replayed") }
            #expect(log.isEmpty, "\(log.count) not replayed: \(log.prefix(3))")
        }
    }

    @Test func FS30_remoteChangesRaiseTheirEventsInTheVaultTree() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            #expect(a.sh("mkdir -p vault/w/sub && printf 'one\\n' > vault/w/a.md && printf 's\\n' > vault/w/sub/s.md").status == 0)
            #expect(a.sh("printf 'see [[a]]\\n' > vault/w/linker.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { cat(b, "vault/w/sub/s.md") == "s\n" && cat(b, "vault/w/a.md") == "one\n" })
            let refs = "backlinks/core.note/a.md/references"
            #expect(MountHarness.eventually(timeout: 20) { b.sh("ls \(refs)").out == "linker.md" }, "\(b.sh("ls \(refs)").out)")
            let w = startWatchers(b, also: b.path(refs))
            defer { w.pids.forEach(Shell.killAndReap) }
            let (ino, wd, nw, ck) = (w.inotify, w.watchdog, w.fsWatch, w.chokidar)
            let v = b.path("vault/")
            func inotify(_ line: String) -> Bool { heard(line, in: ino, on: b) }

            // An edit.
            #expect(a.sh("printf 'one\\ntwo\\n' > vault/w/a.md").status == 0)
            #expect(inotify("MODIFY \(v)w/a.md"), "\(read(ino))")
            #expect(inotify("CLOSE_WRITE,CLOSE \(v)w/a.md"), "\(read(ino))")
            // A new note.
            #expect(a.sh("printf 'n\\n' > vault/w/new.md").status == 0)
            #expect(inotify("CREATE \(v)w/new.md"), "\(read(ino))")
            // A move between folders (and a new name): renames on B, each MOVED_FROM paired with its
            // MOVED_TO by one cookie.
            #expect(a.sh("mv vault/w/new.md vault/w/sub/moved.md").status == 0)
            #expect(inotify("MOVED_FROM \(v)w/new.md") && inotify("MOVED_TO \(v)w/sub/moved.md"), "\(read(ino))")
            let moves = lines(ino).map(Self.events).filter { $0.0.hasPrefix("MOVED_") }
            for m in moves where m.0 == "MOVED_FROM" {
                #expect(moves.contains { $0.0 == "MOVED_TO" && $0.1 == m.1 && m.1 != "0" }, "a MOVED_TO with cookie \(m.1): \(moves)")
            }
            // A delete.
            #expect(a.sh("rm vault/w/sub/moved.md").status == 0)
            #expect(inotify("DELETE \(v)w/sub/moved.md"), "\(read(ino))")
            // A folder made (with a note in it) and removed.
            #expect(a.sh("mkdir vault/w/fresh && printf 'f\\n' > vault/w/fresh/f.md").status == 0)
            #expect(inotify("CREATE,ISDIR \(v)w/fresh"), "\(read(ino))")
            #expect(MountHarness.eventually(timeout: 20) { cat(b, "vault/w/fresh/f.md") == "f\n" })
            let prober = Shell.spawn(["/bin/sh", "-c", "while :; do stat -c %i \(v)w/fresh/f.md \(v)w/fresh >/dev/null 2>&1; done"])
            defer { prober.map(Shell.killAndReap) }
            #expect(a.sh("mv vault/w/fresh/f.md vault/w/f.md && rmdir vault/w/fresh").status == 0)
            #expect(inotify("DELETE,ISDIR \(v)w/fresh"), "\(read(ino))")
            // `rm -rf` of a folder of folders: each file's DELETE, then each folder's, deepest
            // first (the last file's removal empties its folders: a file moved to the trash keeps
            // its tags, and its folders were taken for still in use).
            #expect(a.sh("mkdir -p vault/w/tree/deep && printf '1\\n' > vault/w/tree/deep/t1.md && printf '2\\n' > vault/w/tree/deep/t2.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { cat(b, "vault/w/tree/deep/t2.md") == "2\n" })
            #expect(a.sh("rm -rf vault/w/tree").status == 0)
            #expect(inotify("DELETE \(v)w/tree/deep/t1.md") && inotify("DELETE \(v)w/tree/deep/t2.md"), "\(read(ino))")
            #expect(inotify("DELETE,ISDIR \(v)w/tree/deep") && inotify("DELETE,ISDIR \(v)w/tree"), "\(read(ino))")
            // An attribute: a tag given on A.
            #expect(a.sh("mkdir -p tags/seen && ln -s ../../types/core.note/a.md tags/seen/").status == 0)
            #expect(inotify("ATTRIB \(v)w/a.md"), "\(read(ino))")

            // A link made on A: a new entry in the target's backlinks on B; gone with the link.
            #expect(a.sh("printf 'also [[a]]\\n' > vault/w/more.md").status == 0)
            #expect(inotify("CREATE \(b.path(refs))/more.md"), "\(read(ino))")
            #expect(a.sh("printf 'no link now\\n' > vault/w/more.md").status == 0)
            #expect(inotify("DELETE \(b.path(refs))/more.md"), "\(read(ino))")

            // The other watchers saw the same changes.
            func has(_ file: String, _ line: String) -> Bool { MountHarness.eventually(timeout: 10) { lines(file).contains(line) } }
            for line in ["modified file w/a.md ", "created file w/new.md ", "deleted file w/sub/moved.md ", "created dir w/fresh ", "deleted dir w/fresh "] {
                #expect(has(wd, line), "watchdog: \(line)\n\(read(wd))")
            }
            #expect(lines(wd).contains { $0.hasPrefix("moved file w/new.md w/sub/") }, "watchdog: the move\n\(read(wd))")
            for line in ["change w/a.md", "rename w/new.md", "rename w/sub/moved.md", "rename w/fresh"] {
                #expect(has(nw, line), "fs.watch: \(line)\n\(read(nw))")
            }
            for line in ["change w/a.md", "add w/new.md", "unlink w/new.md", "add w/sub/moved.md", "unlink w/sub/moved.md", "addDir w/fresh", "unlinkDir w/fresh", "add w/f.md"] {
                #expect(has(ck, line), "chokidar: \(line)\n\(read(ck))")
            }
        }
    }
}
