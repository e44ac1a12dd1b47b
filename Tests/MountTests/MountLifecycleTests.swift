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
}
