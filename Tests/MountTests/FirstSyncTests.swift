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
