import Foundation
import MarfaTestSupport
import Testing

/// The daemon's life: signals, the default store, one mount per store.
extension MountTests {
    @Test(arguments: [SIGTERM, SIGINT]) func lifecycle_signalsUnmountCleanly(signal: Int32) throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        #expect(h.sh("echo kept > types/core.note/k.md").status == 0)
        let holder = (try? String(contentsOfFile: h.store + ".lock", encoding: .utf8)) ?? ""
        let pid = holder.split(separator: " ").last.flatMap { Int32($0) }
        #expect(pid != nil)
        if let pid { kill(pid, signal) }
        var gone = false
        for _ in 0..<200 {
            let mounted = (try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8))?.contains(h.mountpoint) ?? false
            if !mounted && (pid.map { kill($0, 0) != 0 } ?? true) { gone = true; break }
            usleep(25_000)
        }
        #expect(gone, "the daemon unmounts and exits on signal \(signal)")
        try h.mount()
        #expect(h.sh("cat types/core.note/k.md").out == "kept")
    }

    @Test func cli_defaultStoreIsUnderXDGDataHome() throws {
        let tmp = try TempDirectory("marfafs-xdg")
        #expect(Shell.run(["/bin/bash", "-c", "mkdir -p '\(tmp.path)/in' && echo hi > '\(tmp.path)/in/n.md'"]).status == 0)
        let r = Shell.run(["/usr/bin/env", "XDG_DATA_HOME=\(tmp.path)/data", MountHarness.binary, "import", tmp.path + "/in"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(FileManager.default.fileExists(atPath: tmp.path + "/data/marfafs/default.sqlite"))
        let bad = Shell.run([MountHarness.binary, "import", tmp.path + "/missing", "--store", tmp.path + "/s.sqlite"])
        #expect(bad.status == 1 && bad.stderr.contains("is not a folder"))
        #expect(Shell.run([MountHarness.binary, "mount"]).status == 64, "usage errors exit 64 (EX_USAGE)")
    }

    @Test func cli_aPathInsideTheMountNamesIt() throws {
        try MountHarness.with { m in
            #expect(m.sh("mkdir -p vault/notes/deep && printf x > vault/notes/deep/n.md").status == 0)
            // The folder's real path runs through `.marfafs/vault`; either way the mount is found.
            let inside = Shell.run(["/bin/bash", "-c", "cd '\(m.mountpoint)/vault/notes/deep' && '\(MountHarness.binary)' status . && '\(MountHarness.binary)' sync ."])
            #expect(inside.status == 0 && inside.out.hasPrefix(m.mountpoint + "\n") && inside.out.contains("mutations queued"), "\(inside.out) \(inside.stderr)")
            let typed = Shell.run([MountHarness.binary, "pending", m.mountpoint + "/types/core.note", "--json"])
            #expect(typed.status == 0, "\(typed.stderr)")
            // A path outside every mount is still refused, and names itself.
            let outside = Shell.run([MountHarness.binary, "status", m.root])
            #expect(outside.status == 1 && outside.stderr.contains("\(m.root) is not a marfafs mount"), "\(outside.stderr)")
        }
    }

    @Test func mount_refusesASecondMountOfTheSameStore() throws {
        try MountHarness.with { m in
            let other = m.root + "/mnt2"
            try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
            let r = Shell.run([MountHarness.binary, "mount", other, "--store", m.store])
            #expect(r.status == 3)
            #expect(r.stderr.contains("in use"))
            MountHarness.forceUnmount(other)
        }
    }

    /// A store held by a daemon whose mount is gone (`umount` or `fusermount3 -u` returned; the
    /// daemon still commits what it was given: FS-28) is waited for by `mount`, `import` and
    /// `export`, saying so, instead of being refused with "unmount it first"; one held by a live
    /// mount is refused at once. Then the real sequence: `fusermount3 -u` right after writing 96 MiB
    /// into `vault/`, and `mount` again at once: it comes up, with every byte.
    @Test func FS28_aStoreHeldByADaemonFinishingItsUnmountIsWaitedFor() throws {
        let tmp = try TempDirectory("marfafs-finishing")
        #expect(Shell.run(["/bin/bash", "-c", "mkdir -p '\(tmp.path)/in' && echo hi > '\(tmp.path)/in/n.md'"]).status == 0)
        let store = tmp.path + "/s.sqlite"
        func hold(_ text: String) -> Int32 {
            let fd = open(store + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            #expect(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
            ftruncate(fd, 0)
            _ = text.withCString { pwrite(fd, $0, strlen($0), 0) }
            return fd
        }
        // A live mount's lock: refused at once.
        let live = hold("mounted on /nowhere by pid \(getpid())")
        let refused = Shell.run([MountHarness.binary, "import", tmp.path + "/in", "--store", store])
        #expect(refused.status == 3 && refused.stderr.contains("unmount it first"), "\(refused.stderr)")
        close(live)
        // A finishing daemon's lock: waited for until it lets go.
        let finishing = hold("finishing: unmounted from /nowhere by pid \(getpid())")
        let released = DispatchSemaphore(value: 0)
        Thread { usleep(1_500_000); close(finishing); released.signal() }.start()
        let t0 = Date()
        let waited = Shell.run([MountHarness.binary, "import", tmp.path + "/in", "--store", store])
        released.wait()
        #expect(waited.status == 0, "\(waited.stderr)")
        #expect(waited.stderr.contains("waiting for the daemon"), "\(waited.stderr)")
        #expect(Date().timeIntervalSince(t0) >= 1.4, "it waited for the lock")
        // What the last daemon left in the file once it exited is not waited for, nor said.
        let after = Shell.run([MountHarness.binary, "export", tmp.path + "/out", "--store", store])
        #expect(after.status == 0 && !after.stderr.contains("waiting"), "\(after.stderr)")

        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        #expect(h.sh("head -c 100663296 /dev/urandom > '\(h.root)/big' && cp '\(h.root)/big' vault/big.bin").status == 0)
        #expect(Shell.run(["/bin/fusermount3", "-u", h.mountpoint]).status == 0)
        try h.mount()
        #expect(h.sh("cmp '\(h.root)/big' vault/big.bin").status == 0, "every byte after the mount again")
    }

    /// The request loop (`CFuse/shim.h`): its workers answer alike whether they look for the next
    /// request awake (the default) or sleep at once (`MARFAFS_SPIN_US=0`), with four programs
    /// asking at once; and a mount left alone spends no CPU, however closely requests came before.
    @Test(arguments: ["0", "100"]) func FS32_theRequestLoopAnswersAlikeAwakeOrAsleepAndAnIdleMountSpendsNoCPU(spin: String) throws {
        try MountHarness.with(environment: ["MARFAFS_SPIN_US": spin]) { m in
            let writers = (0..<4).map { w in
                "(mkdir -p vault/w\(w) && for i in $(seq 1 150); do echo \"note \(w) $i\" > vault/w\(w)/n$i.md; "
                + "cat vault/w\(w)/n$i.md > /dev/null; ls -l vault/w\(w) > /dev/null; done) &"
            }.joined(separator: " ")
            #expect(m.sh("{ " + writers + " wait; }").status == 0)
            for w in 0..<4 {
                let seen = m.sh("cat vault/w\(w)/n*.md | sort | uniq | wc -l").out
                #expect(seen == "150", "every note of writer \(w) has its own bytes")
                #expect(m.sh("cat vault/w\(w)/n77.md").out == "note \(w) 77")
            }
            m.settle()
            // Requests back to back (an attribute asked of the daemon each time), so the loop
            // last saw requests follow its answers closely: then it looks for the next one awake.
            let asked = m.sh("python3 -c 'import os\nfor i in range(3000): os.listxattr(\"vault/w0/n1.md\")'")
            #expect(asked.status == 0, "\(asked.stderr)")
            guard let pid = m.daemonPID else { Issue.record("no daemon pid in \(m.store).lock"); return }
            /// utime + stime of the daemon, in clock ticks (man 5 proc).
            func ticks() -> Int {
                let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
                guard let close = stat.lastIndex(of: ")") else { return -1 }
                let f = stat[stat.index(after: close)...].split(separator: " ")
                return f.count > 12 ? (Int(f[11]) ?? 0) + (Int(f[12]) ?? 0) : -1
            }
            usleep(500_000)
            let before = ticks()
            sleep(3)
            let spent = ticks() - before
            #expect(before >= 0 && spent <= 5, "an idle mount spent \(spent) ticks of CPU in 3 s")
        }
    }

    /// A process with one CPU to run on does not look for requests awake (the program it would
    /// wait for needs that CPU to ask); with more it does, and `MARFAFS_SPIN_US` decides over both.
    @Test func FS32_theRequestLoopWithOneCPUToRunOnSleepsAtOnce() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/taskset") else {
            Issue.record("taskset(1) is missing (util-linux)"); return
        }
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        // The log's `fuse session ready` lines (each mount's, appended to one log).
        let sessions = { h.daemonLog(last: 10_000_000).split(separator: "\n").filter { $0.contains("fuse session ready") } }
        func budget(_ prefix: [String]) -> String {
            let before = sessions().count
            let r = Shell.run(prefix + [MountHarness.binary, "mount", h.mountpoint, "--store", h.store])
            guard r.status == 0 else { return "mount failed: \(r.stderr)" }
            h.adoptMount()
            defer { h.unmount() }
            // (The line may reach the log a moment after the mount answers.)
            MountHarness.eventually(timeout: 10) { sessions().count > before }
            let all = sessions()
            guard all.count > before else { return "no session line" }
            return all.last.flatMap { $0.split(separator: " ").first { $0.hasPrefix("spin_us=") } }.map(String.init) ?? "no budget in \(all.last ?? "")"
        }
        #expect(budget(["/usr/bin/taskset", "-c", "0"]) == "spin_us=0")
        #expect(budget(["/usr/bin/env", "MARFAFS_SPIN_US=40", "/usr/bin/taskset", "-c", "0"]) == "spin_us=40")
        if ProcessInfo.processInfo.activeProcessorCount > 1 {
            #expect(budget([]) == "spin_us=100")
        }
    }
}
