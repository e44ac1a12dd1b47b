import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// `marfafs mount --server` returns once the first sync is done, or says why it stopped waiting
/// (issue: a mount under load returned silently before its first sync).
@Suite(.serialized) struct FirstSyncTests {
    @Test func W16_aMountUnderLoadReturnsAfterItsFirstSyncOrSaysWhy() throws {
        let s = try ServerHarness()
        let (_, options) = try s.mountKey()
        // A store of 2,000 items, drained to the server by mount A.
        let a = try MountHarness()
        defer { a.unmount(); try? FileManager.default.removeItem(atPath: a.root) }
        _ = try a.importFolder("for d in $(seq 1 20); do mkdir d$d; for i in $(seq 1 100); do printf 'note %s %s\\n' $d $i > d$d/n$i.md; done; done")
        a.mountOptions = options
        try a.mount()
        #expect(MountHarness.eventually(timeout: 120) { a.sh("cat .marfafs/flush").out.hasPrefix("ok") }, "the queue drains")
        // Write load from A while fresh stores mount and take their first sync.
        let load = Shell.spawn(["/bin/bash", "-c", "cd '\(a.mountpoint)' && for i in $(seq 1 100000); do printf 'load %s\\n' $i > types/core.note/load$((i % 50)).md; sleep 0.02; done"])
        defer { if let load { Shell.killAndReap(load) } }
        var done = 0
        for round in 0..<3 {
            let b = try MountHarness()
            defer { b.unmount(); try? FileManager.default.removeItem(atPath: b.root) }
            let r = Shell.run([MountHarness.binary, "mount", b.mountpoint, "--store", b.store] + options)
            #expect(r.status == 0, "round \(round): \(r.stderr)")
            b.adoptMount()
            let said = r.stdout
            let status = (try? JSONParser.parse(b.sh("cat .marfafs/status").out))?.objectValue ?? [:]
            if said.contains("first sync done") {
                done += 1
                #expect(status["first_sync_done"] == .bool(true), "round \(round): said done, status says \(status)")
                let items = Int(b.sh("ls types/core.note | wc -l").out) ?? 0
                #expect(items >= 2000, "round \(round): \(items) notes after the first sync")
            } else {
                // Not done: the mount must say why and where to look.
                #expect(said.contains("marfafs status"), "round \(round): returned without a word: \(said)")
            }
        }
        #expect(done >= 1, "no mount finished its first sync under load")
    }
}

extension FirstSyncTests {
    /// FS-32: the same vault imported on two devices, each store then mounted on one server: a
    /// file both have alike is one item, under its own name, on the server and on both mounts
    /// (it showed twice, the second under a collision suffix); files that differ stay both.
    @Test func FS32_theSameVaultImportedOnTwoDevicesIsOneVault() throws {
        let s = try ServerHarness()
        let (key, options) = try s.mountKey()
        let a = try MountHarness(), b = try MountHarness()
        defer { a.unmount(); b.unmount(); try? FileManager.default.removeItem(atPath: a.root); try? FileManager.default.removeItem(atPath: b.root) }
        for (h, n2) in [(a, "two\n"), (b, "two, changed on b\n")] {
            let src = h.root + "/vault"
            let made = Shell.run(["/bin/bash", "-c", """
                mkdir -p '\(src)/notes' '\(src)/.obsidian' && printf 'one [[n2]]\\n' > '\(src)/notes/n1.md' && printf '\(n2)' > '\(src)/notes/n2.md' \
                && printf '{"theme":"dark"}' > '\(src)/.obsidian/app.json' && head -c 3000 /dev/zero > '\(src)/img.png' \
                && touch -d 2021-05-06 '\(src)/notes/n1.md'
                """])
            #expect(made.status == 0, "\(made.stderr)")
            if h === b { #expect(Shell.run(["/bin/bash", "-c", "printf 'only b\\n' > '\(src)/notes/only-b.md'"]).status == 0) }
            #expect(Shell.run([MountHarness.binary, "import", src, "--store", h.store]).status == 0)
        }
        a.mountOptions = options + ["--device", "dev-a"]
        try a.mount()
        #expect(MountHarness.eventually(timeout: 30) { a.sh("cat .marfafs/flush").out.hasPrefix("ok") })
        b.mountOptions = options + ["--device", "dev-b"]
        try b.mount()
        #expect(MountHarness.eventually(timeout: 30) { b.sh("cat .marfafs/flush").out.hasPrefix("ok") && a.sh("test -f vault/notes/only-b.md").status == 0 })
        let want = ".obsidian/app.json\nimg.png\nnotes/n1.md\nnotes/n2.md\nnotes/only-b.md"
        for h in [a, b] {
            let listed = h.sh("cd vault && find . -type f | sort | sed 's|^./||' | grep -v '^notes/n2 \\['").out
            #expect(listed == want, "\(listed)")
            #expect(h.sh("ls vault/notes | grep -c '^n2'").out == "2", "the two n2.md differ: both stay \(h.sh("ls vault/notes").out)")
            #expect(h.sh("cat vault/notes/n1.md").out == "one [[n2]]" && h.sh("stat -c %y vault/notes/n1.md").out.hasPrefix("2021-05-06"))
        }
        let page = s.call("GET", "/items?limit=200", key: key).json["data"]?.arrayValue ?? []
        #expect(page.count == 6, "n1, n2 twice, only-b, app.json, img.png: \(page.count)")
    }
}
