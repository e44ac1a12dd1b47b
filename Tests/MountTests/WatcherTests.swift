import Foundation
import MarfaTestSupport
import Testing

/// FS-25 (in part): an edit made on mount A, or a change of its metadata, raises on mount B the
/// inotify events the same change made on B would raise, so watchers reload; B's own changes raise
/// theirs once. Real watchers: inotifywait, entr and Python's watchdog.
@Suite(.serialized) struct WatcherTests {
    func cat(_ m: MountHarness, _ path: String) -> String { (try? String(contentsOfFile: m.path(path), encoding: .utf8)) ?? "" }
    func read(_ file: String) -> String { (try? String(contentsOfFile: file, encoding: .utf8)) ?? "" }

    @Test func FS25_aRemoteEditRaisesModifyAndCloseWriteAndAMetadataChangeAttrib() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            let note = "types/core.note/watched.md"
            #expect(a.sh("printf 'one\\n' > \(note)").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { cat(b, note) == "one\n" })
            let log = b.root + "/inotify.log"
            guard let w = Shell.spawn(["inotifywait", "-m", "-e", "modify,close_write,attrib", "--format", "%e %f", b.path("types/core.note")], stdout: log, stderr: b.root + "/inotify.err") else {
                Issue.record("inotifywait did not start"); return
            }
            defer { Shell.killAndReap(w) }
            #expect(MountHarness.eventually { read(b.root + "/inotify.err").contains("Watches established") })
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

    @Test func FS25_entrAndWatchdogReactToARemoteEdit() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            let note = "types/core.note/run.md"
            #expect(a.sh("printf 'v1\\n' > \(note)").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { cat(b, note) == "v1\n" })
            // entr re-runs a command when the file changes (it watches with inotify).
            let ran = b.root + "/entr.out"
            guard let e = Shell.spawn(["/bin/bash", "-c", "echo '\(b.path(note))' | exec entr -np sh -c 'echo ran >> \(ran)'"], stderr: b.root + "/entr.err") else {
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
        }
    }
}
