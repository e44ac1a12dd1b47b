import Foundation
import MarfaTestSupport
import Testing

/// marfafs as a system tool: `scripts/install`, `mount -t fuse.marfafs` and fstab, systemd's
/// notify protocol, a dead mount point (marfafs(1): INSTALL, MOUNT OPTIONS, SYSTEMD).
extension MountTests {
    /// What `scripts/install` puts in a DESTDIR, with modes; the pages read with `man -l`; the
    /// completions load in bash; the units pass `systemd-analyze verify`; a second run changes
    /// nothing; `--uninstall` leaves nothing.
    @Test func install_intoADestdirPutsEachFileAndUninstallLeavesNothing() throws {
        let tmp = try TempDirectory("marfafs-install")
        let dest = tmp.path + "/dest"
        let install = "DESTDIR='\(dest)' MARFAFS_BIN='\(MountHarness.binary)' '\(MountHarness.repoRoot)/scripts/install'"
        let first = Shell.run(["/bin/bash", "-c", install])
        #expect(first.status == 0, "\(first.stdout)\(first.stderr)")
        let listing = "cd '\(dest)' && find . -mindepth 1 \\( -type f -o -type l \\) -printf '%m %p %l\\n' | sort -k2"
        let files = Shell.run(["/bin/bash", "-c", listing]).out
        #expect(files == """
        777 ./sbin/mount.fuse.marfafs /usr/local/bin/marfafs
        755 ./usr/local/bin/marfafs 
        644 ./usr/local/lib/systemd/system/marfafs@.service 
        644 ./usr/local/lib/systemd/user/marfafs@.service 
        777 ./usr/local/sbin/mount.fuse.marfafs ../bin/marfafs
        644 ./usr/local/share/bash-completion/completions/marfafs 
        644 ./usr/local/share/fish/vendor_completions.d/marfafs.fish 
        644 ./usr/local/share/man/man1/marfafs.1 
        644 ./usr/local/share/man/man7/marfafs.7 
        644 ./usr/local/share/marfafs/installed 
        644 ./usr/local/share/marfafs/installed.dirs 
        644 ./usr/local/share/zsh/site-functions/_marfafs
        """, "\(files)")
        let share = dest + "/usr/local/share"
        #expect(Shell.run(["/bin/bash", "-c", "man -l '\(share)/man/man1/marfafs.1' 2>&1"]).out.contains("MOUNT OPTIONS"))
        #expect(Shell.run(["/bin/bash", "-c", "man -l '\(share)/man/man7/marfafs.7' 2>&1"]).out.contains("vault"))
        let complete = Shell.run(["/bin/bash", "-c", "source '\(share)/bash-completion/completions/marfafs' && complete -p marfafs"])
        #expect(complete.out.contains("-F _marfafs marfafs"), "\(complete.stdout)\(complete.stderr)")
        #expect(Shell.run(["/bin/bash", "-c", "grep -q 'ExecStart=/usr/local/bin/marfafs mount %f --foreground' '\(dest)'/usr/local/lib/systemd/*/marfafs@.service"]).status == 0)
        for kind in ["user", "system"] where FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze") {
            // The unit as installed, with the binary at the place it was put in DESTDIR.
            let unit = tmp.path + "/\(kind)/marfafs@tmp-kb.service"
            try FileManager.default.createDirectory(atPath: tmp.path + "/\(kind)", withIntermediateDirectories: true)
            #expect(Shell.run(["/bin/bash", "-c", "sed 's|/usr/local/bin/marfafs|\(dest)/usr/local/bin/marfafs|' '\(dest)/usr/local/lib/systemd/\(kind)/marfafs@.service' > '\(unit)'"]).status == 0)
            let verify = Shell.run(["/usr/bin/systemd-analyze", "verify", "--man=no", unit])
            #expect(verify.status == 0, "\(kind): \(verify.stdout)\(verify.stderr)")
        }
        let again = Shell.run(["/bin/bash", "-c", install])
        #expect(again.status == 0)
        #expect(Shell.run(["/bin/bash", "-c", listing]).out == files, "running it twice is harmless")
        let gone = Shell.run(["/bin/bash", "-c", "DESTDIR='\(dest)' '\(MountHarness.repoRoot)/scripts/install' --uninstall && find '\(dest)' -mindepth 1"])
        #expect(gone.status == 0)
        #expect(gone.out == "uninstalled marfafs from \(dest)/usr/local", "\(gone.stdout)")
    }

    /// `mount -t fuse.marfafs STORE MOUNTPOINT -o …` and an fstab line (`mount -T FSTAB`) mount,
    /// `umount` unmounts; an unknown option is refused and mounts nothing; `ro` is read-only;
    /// `user=` runs the mount as that user.
    @Test func install_mountTypeFuseMarfafsWithOptionsAndAnFstabLine() throws {
        guard getuid() == 0 else { Issue.record("mount(8) of a FUSE type with options needs root here"); return }
        // The helper as scripts/install puts it, for this build (one already there is set aside).
        let helper = "/sbin/mount.fuse.marfafs", aside = helper + ".before-test"
        var st = stat()
        let hadOne = lstat(helper, &st) == 0
        if hadOne { rename(helper, aside) }
        #expect(symlink(MountHarness.binary, helper) == 0)
        defer { unlink(helper); if hadOne { rename(aside, helper) } }
        let h = try MountHarness()
        defer { MountHarness.forceUnmount(h.mountpoint); try? FileManager.default.removeItem(atPath: h.root) }
        let mounted = { (Shell.run(["/bin/findmnt", "-no", "SOURCE,FSTYPE", h.mountpoint]).out) }
        let mount = Shell.run(["/bin/mount", "-t", "fuse.marfafs", h.store, h.mountpoint, "-o", "trash_days=3,device=lab\\,1,_netdev,nofail,noatime,x-systemd.automount"])
        #expect(mount.status == 0, "\(mount.stdout)\(mount.stderr)")
        #expect(mounted() == "\(h.store) fuse.marfafs", "the store is the source")
        #expect(h.sh("echo hi > types/core.note/a.md && cat types/core.note/a.md").out == "hi")
        #expect(Shell.run(["/bin/bash", "-c", "ps -o args= -p $(awk '{print $NF}' '\(h.store).lock')"]).out.contains("--device lab,1 --trash-days 3"))
        let pid = h.daemonPID
        #expect(Shell.run(["/bin/umount", h.mountpoint]).status == 0)
        #expect(MountHarness.eventually { mounted().isEmpty && pid.map { kill($0, 0) != 0 } ?? true }, "umount ends the daemon")
        // A bad option: a clear message, nothing mounted.
        let bad = Shell.run(["/bin/mount", "-t", "fuse.marfafs", h.store, h.mountpoint, "-o", "servr=http://x"])
        #expect(bad.status != 0)
        #expect(bad.stderr.contains("unknown mount option \"servr\""), "\(bad.stderr)")
        #expect(mounted().isEmpty)
        // fstab, read-only.
        let fstab = h.root + "/fstab"
        try "\(h.store) \(h.mountpoint) fuse.marfafs ro,_netdev,nofail,trash_days=0 0 0\n".write(toFile: fstab, atomically: true, encoding: .utf8)
        let viaFstab = Shell.run(["/bin/mount", "-T", fstab, h.mountpoint])
        #expect(viaFstab.status == 0, "\(viaFstab.stdout)\(viaFstab.stderr)")
        #expect(h.sh("cat types/core.note/a.md").out == "hi")
        #expect(h.sh("{ echo x > types/core.note/b.md; } 2>&1").out.contains("Read-only file system"))
        #expect(Shell.run(["/bin/umount", h.mountpoint]).status == 0)
        #expect(MountHarness.eventually { mounted().isEmpty })
    }

    /// `user=NAME` in the options: the helper, run by root, mounts as that user.
    @Test func install_userOptionRunsTheMountAsThatUser() throws {
        guard getuid() == 0 else { Issue.record("becoming another user needs root"); return }
        // Debian's /dev/fuse is 0666 (a user mounts through fusermount3); some containers make it 0600.
        var st = stat()
        #expect(stat("/dev/fuse", &st) == 0)
        let mode = st.st_mode & 0o777
        if mode & 0o006 != 0o006 { chmod("/dev/fuse", 0o666) }
        defer { chmod("/dev/fuse", mode) }
        // A place the user may reach: the binary and a folder of theirs.
        let home = "/tmp/marfafs-as-user-\(UUID().uuidString.prefix(8))"
        defer { MountHarness.forceUnmount(home + "/mnt"); _ = Shell.run(["/bin/rm", "-rf", home]) }
        #expect(Shell.run(["/bin/bash", "-c", "mkdir -p '\(home)/mnt' && cp '\(MountHarness.binary)' '\(home)/marfafs' && chown -R nobody '\(home)' && chmod 755 '\(home)'"]).status == 0)
        let r = Shell.run(["\(home)/marfafs", "\(home)/kb.sqlite", "\(home)/mnt", "-o", "user=nobody"])
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        #expect(Shell.run(["/bin/findmnt", "-no", "OPTIONS", home + "/mnt"]).out.contains("user_id=65534"))
        #expect(Shell.run(["/bin/bash", "-c", "ps -o user= -p $(awk '{print $NF}' '\(home)/kb.sqlite.lock')"]).out == "nobody")
        #expect(Shell.run(["/bin/bash", "-c", "su -s /bin/sh nobody -c 'echo mine > \(home)/mnt/types/core.note/n.md' && stat -c %U \(home)/kb.sqlite"]).out == "nobody")
        #expect(Shell.run(["/bin/umount", home + "/mnt"]).status == 0)
        let refused = Shell.run(["/bin/bash", "-c", "su -s /bin/sh nobody -c \"'\(home)/marfafs' mount '\(home)/mnt' -o user=root\" 2>&1"])
        #expect(refused.out.contains("only root can mount as another user"), "\(refused.out)")
    }

    /// systemd's notify protocol, on a datagram socket the test listens on: READY=1 only once the
    /// mount answers, STATUS= with the queue, WATCHDOG=1 at half of WATCHDOG_USEC, STOPPING=1 on
    /// SIGTERM; the queue is intact after.
    @Test func systemd_notifyReadyStatusWatchdogAndStopping() throws {
        let h = try MountHarness()
        defer { MountHarness.forceUnmount(h.mountpoint); try? FileManager.default.removeItem(atPath: h.root) }
        let listener = try NotifyListener(path: h.root + "/notify.sock")
        guard let pid = Shell.spawn(["/usr/bin/env", "NOTIFY_SOCKET=\(listener.path)", "WATCHDOG_USEC=400000",
                                     MountHarness.binary, "mount", h.mountpoint, "--foreground", "--store", h.store],
                                    stderr: h.root + "/daemon.log") else { Issue.record("cannot start the mount"); return }
        defer { Shell.killAndReap(pid) }
        let ready = listener.receive(timeout: 30)
        // The first word the manager hears is READY=1, and by then the mount answers.
        var st = stat()
        let answered = stat(h.mountpoint + "/.marfafs/status", &st) == 0
        #expect(ready?.hasPrefix("READY=1\n") == true, "\(ready ?? "nothing")")
        #expect(answered)
        #expect(ready?.contains("MAINPID=") == true && ready?.contains("STATUS=\(h.mountpoint): 0 items, queue 0") == true, "\(ready ?? "")")
        #expect(h.sh("echo a > types/core.note/a.md && echo b > types/core.note/b.md").status == 0)
        var messages: [String] = []
        let deadline = Date().addingTimeInterval(12)
        while Date() < deadline, !messages.contains(where: { $0.hasPrefix("STATUS=") && $0.contains("2 items, queue 2") }) {
            if let m = listener.receive(timeout: 1) { messages.append(m) }
        }
        #expect(messages.contains { $0.contains("2 items, queue 2") }, "\(messages)")
        #expect(messages.filter { $0 == "WATCHDOG=1" }.count >= 3, "\(messages)")
        let queued = h.sql("SELECT count(*) FROM mutations")
        kill(pid, SIGTERM)
        var stopping: String?
        while let m = listener.receive(timeout: 10) { if m.hasPrefix("STOPPING=1") { stopping = m; break } }
        #expect(stopping != nil)
        var status: Int32 = 0
        #expect(waitpid(pid, &status, 0) == pid && status == 0, "exits 0 on SIGTERM")
        #expect(!Shell.run(["/bin/cat", "/proc/self/mounts"]).out.contains(h.mountpoint))
        #expect(queued == "2" && h.sql("SELECT count(*) FROM mutations") == queued, "the queue is kept")
        try h.mount()
        #expect(h.sh("cat types/core.note/a.md types/core.note/b.md").out == "a\nb")
        h.unmount()
    }

    /// With a server, READY=1 waits for the first sync: when it comes, the mount already has the
    /// server's items.
    @Test func systemd_readyWithAServerComesAfterTheFirstSync() throws {
        let server = try ServerHarness()
        defer { _ = server.stop() }
        let (_, options) = try server.mountKey()
        let seed = try MountHarness()
        defer { seed.unmount(); try? FileManager.default.removeItem(atPath: seed.root) }
        seed.mountOptions = options
        try seed.mount()
        #expect(seed.sh("for i in $(seq 1 40); do echo $i > types/core.note/n$i.md; done").status == 0)
        #expect(MountHarness.eventually(timeout: 60) { seed.sh("cat .marfafs/flush").out.hasPrefix("ok") }, "the queue drains")
        let h = try MountHarness()
        defer { MountHarness.forceUnmount(h.mountpoint); try? FileManager.default.removeItem(atPath: h.root) }
        let listener = try NotifyListener(path: h.root + "/notify.sock")
        guard let pid = Shell.spawn(["/usr/bin/env", "NOTIFY_SOCKET=\(listener.path)", MountHarness.binary, "mount", h.mountpoint,
                                     "--foreground", "--store", h.store, "-o", "server=\(options[1]),key_file=\(options[3])"],
                                    stdout: h.root + "/daemon.out", stderr: h.root + "/daemon.log") else { Issue.record("cannot start the mount"); return }
        defer { Shell.killAndReap(pid) }
        let ready = listener.receive(timeout: 60)
        #expect(ready?.hasPrefix("READY=1") == true)
        #expect(h.sh("ls types/core.note | wc -l").out == "40", "the first sync is done when READY=1 comes")
        #expect(ready?.contains("40 items, queue 0, online") == true, "\(ready ?? "")")
        kill(pid, SIGTERM)
        var status: Int32 = 0
        #expect(waitpid(pid, &status, 0) == pid && status == 0)
    }

    /// A mount point left dead by a killed daemon ("Transport endpoint is not connected") is
    /// recovered by the next mount, which says nothing about it.
    @Test func mount_aDeadMountPointIsRecoveredByTheNextMount() throws {
        try MountHarness.with { m in
            #expect(m.sh("echo kept > types/core.note/k.md").status == 0)
            m.killDaemon()
            let dead = Shell.run(["/bin/bash", "-c", "ls '\(m.mountpoint)' 2>&1"])
            #expect(dead.out.contains("Transport endpoint is not connected"), "\(dead.out)")
            let again = Shell.run([MountHarness.binary, "mount", m.mountpoint, "--store", m.store])
            #expect(again.status == 0, "\(again.stderr)")
            #expect(again.stderr.isEmpty)
            #expect(m.sh("cat types/core.note/k.md").out == "kept")
        }
    }
}

/// A datagram socket standing for systemd's notification socket.
final class NotifyListener {
    let path: String
    let fd: Int32

    init(path: String) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        var a = sockaddr_un()
        a.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &a.sun_path) { p in for (i, b) in path.utf8.enumerated() { p[i] = b } }
        let rc = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        guard fd >= 0, rc == 0 else { throw HarnessError("cannot listen on \(path): \(String(cString: strerror(errno)))") }
    }

    deinit { close(fd); unlink(path) }

    /// The next datagram, or nil after `timeout` seconds.
    func receive(timeout: Double) -> String? {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, Int32(timeout * 1000)) == 1 else { return nil }
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        return n > 0 ? String(decoding: buf[0..<n], as: UTF8.self) : nil
    }
}
