import Foundation
import MarfaTestSupport
import Testing

/// FS-15, FS-28: a disk with no room at all, with and without a server; the store as a file
/// after an unmount.
extension RealFilesTests {
    /// FS-28: after a full disk the store gives back the room its log took; the next mount, on a
    /// disk another program has since filled to the last byte (the reserve included), comes up
    /// and shows every note. (The log was cut to nothing; opening a store whose log is empty
    /// writes to it, which the full disk refused, and the daemon exited.)
    @Test func FS28_aMountOnADiskWithNoRoomAtAllAfterTheLogWasCut() throws {
        try Self.onSmallDisk("16m") { h2, disk, elsewhere in
            let wal = { Int(Shell.run(["/usr/bin/stat", "-c", "%s", h2.store + "-wal"]).out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1 }
            try h2.mount()
            #expect(h2.sh("for i in $(seq 1 40); do printf 'note %s\\n' $i > vault/n$i.md; done; mkdir -p vault/sub && printf 'deep\\n' > vault/sub/d.md").status == 0)
            h2.settle()
            // Another program fills the disk; a note written meanwhile cannot be stored.
            let filled = Int64(Date().timeIntervalSince1970)
            _ = Shell.run(["/bin/sh", "-c", "dd if=/dev/zero of='\(disk)'/filler bs=4k 2>/dev/null"])
            #expect(h2.sh("head -c 300000 /dev/urandom | base64 > vault/late.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { h2.sh("cat .marfafs/status").out.contains("no space left") })
            // Room again: the note is stored and the log's room given back: cut (and a row of
            // `meta` says when) since the disk filled: once there was room, or before if the cut
            // could be made on the full disk (its pages checkpointed without growing the
            // database file). (Its size after says nothing: the settling of the note that waited
            // grows it again.)
            let cut = { Int64(h2.sql("SELECT value FROM meta WHERE key = 'wal_cut'")) ?? 0 }
            // Another program reads the store for three seconds as the room comes back: the cuts
            // tried meanwhile cannot be made, and the passes that make them go on (each read of
            // `.marfafs/status` below settles too: it once stopped them for good).
            let reader = Shell.spawn(["/bin/sh", "-c", "printf 'BEGIN;\\nSELECT count(*) FROM items;\\n.shell sleep 3\\nCOMMIT;\\n' | sqlite3 -readonly '\(h2.store)'"])
            defer { reader.map(Shell.killAndReap) }
            #expect(Shell.run(["/bin/rm", "-f", disk + "/filler"]).status == 0)
            #expect(MountHarness.eventually(timeout: 30) { h2.sql("SELECT count(*) FROM items WHERE unsettled = 0") == "42" },
                    "\(h2.sql("SELECT count(*) FROM items WHERE unsettled = 0")) settled")
            #expect(MountHarness.eventually(timeout: 30) { cut() >= filled },
                    "log \(wal()) bytes, cut at \(cut()) (the disk filled at \(filled))\n\(h2.sh("cat .marfafs/status").out)\n\(h2.daemonLog(last: 2000))")
            let late = h2.sh("md5sum < vault/late.md").out
            h2.unmount()
            #expect(cut() >= filled, "the log's room is given back by the unmount at the latest")
            #expect(wal() > 0, "the log is not left empty")
            _ = Shell.run(["/bin/sh", "-c", "rm -f '\(disk)'/kb.sqlite-reserve; dd if=/dev/zero of='\(disk)'/filler bs=4k 2>/dev/null; sync"])
            #expect(Shell.run(["/bin/sh", "-c", "head -c 4096 /dev/zero > '\(disk)'/more"]).status != 0, "the disk has no room")
            try h2.mount()
            #expect(h2.sh("cat vault/n7.md vault/sub/d.md").out == "note 7\ndeep")
            #expect(h2.sh("ls vault | grep -c '^n[0-9]*.md$'").out == "40")
            #expect(h2.sh("md5sum < vault/late.md").out == late)
            // A write meanwhile is taken by the staging journal's room or refused; either way
            // nothing else changes, and what was taken is kept.
            #expect(Shell.run(["/bin/sh", "-c", "head -c 200000 /dev/urandom > '\(elsewhere)'/big.bin"]).status == 0)
            let took = h2.sh("cp '\(elsewhere)'/big.bin vault/big.bin").status == 0
            #expect(h2.sh("cat vault/n7.md").out == "note 7")
            #expect(Shell.run(["/bin/rm", "-f", disk + "/filler"]).status == 0)
            #expect(h2.sh("printf 'after\\n' > vault/n41.md && cat vault/n41.md").out == "after")
            h2.unmount()
            try h2.mount()
            #expect(h2.sh("cat vault/n41.md").out == "after")
            if took { #expect(h2.sh("cmp '\(elsewhere)'/big.bin vault/big.bin").status == 0) }
        }
    }

    /// FS-15: after an unmount the store's database file alone holds every note (a copy of it
    /// without its `-wal` is a whole store), and its log is not left empty (see
    /// `FS28_aMountOnADiskWithNoRoomAtAllAfterTheLogWasCut`).
    @Test func FS15_afterAnUnmountTheStoreFileAloneHoldsEveryNote() throws {
        try MountHarness.with { m in
            #expect(m.sh("mkdir -p vault/a && for i in $(seq 1 150); do printf 'note %s\\n' $i > vault/a/n$i.md; done").status == 0)
            m.unmount()
            let copy = m.root + "/copy.sqlite"
            #expect(Shell.run(["/bin/cp", m.store, copy]).status == 0)
            #expect(Shell.run(["/usr/bin/sqlite3", copy, "PRAGMA integrity_check; SELECT count(*) FROM items WHERE unsettled = 0"]).out == "ok\n150")
            let wal = Shell.run(["/usr/bin/stat", "-c", "%s", m.store + "-wal"]).out.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect((Int(wal) ?? 0) > 0, "log: \(wal)")
            try m.mount()
            #expect(m.sh("cat vault/a/n150.md").out == "note 150")
        }
    }

    /// FS-28 with a server: changes from the server that the full disk cannot take are taken
    /// once there is room, the stream backing off meanwhile (not a reconnection and a line in the
    /// log several times a second); and a mount with its server starts on a disk with no room at
    /// all (it recorded its server again at each mount, a write the full disk refused).
    @Test func FS28_aMountWithAServerOnAFullDiskTakesTheServersChangesOnceThereIsRoom() throws {
        let s = try ServerHarness()
        let (key, serverOptions) = try s.mountKey()
        try Self.onSmallDisk("16m") { h2, disk, elsewhere in
            let log = elsewhere + "/daemon.log"
            h2.mountOptions = serverOptions + ["--log-file", log]
            try h2.mount()
            #expect(h2.sh("for i in $(seq 1 10); do printf 'note %s\\n' $i > vault/n$i.md; done").status == 0)
            #expect(MountHarness.eventually(timeout: 30) { h2.sh("cat .marfafs/flush").out.hasPrefix("ok") })
            // Notes queued while the server is away; the disk fills before it is back, so the
            // queue cannot record what it sends: tried again at growing intervals, and sent once
            // (under the same keys) when there is room.
            _ = s.stop()
            #expect(h2.sh("for i in $(seq 1 10); do printf 'queued %s\\n' $i > vault/q$i.md; done").status == 0)
            h2.settle()
            _ = Shell.run(["/bin/sh", "-c", "dd if=/dev/zero of='\(disk)'/filler bs=4k 2>/dev/null"])
            try s.start()
            for n in 1...5 {
                #expect(s.call("POST", "/items", key: key, body: #"{"type":"core.note","properties":{"title":"remote \#(n)","body":"from the server"}}"#).status == 201)
            }
            #expect(MountHarness.eventually(timeout: 20) { h2.sh("cat .marfafs/status").out.contains("no space left") })
            let failures = { (what: String) in (try? String(contentsOfFile: log, encoding: .utf8))?.components(separatedBy: what).count ?? 0 }
            // (The queue's rows cannot be marked as sending, or what the server took recorded.)
            let queueFailures = { failures("marking the queue failed") + failures("recording acknowledgements failed") }
            #expect(MountHarness.eventually(timeout: 20) { queueFailures() > 2 })
            let before = (failures("applying remote changes failed"), queueFailures())
            Thread.sleep(forTimeInterval: 4)
            #expect(failures("applying remote changes failed") - before.0 <= 3, "\(failures("applying remote changes failed") - before.0) failures to apply in 4 s")
            #expect(queueFailures() - before.1 <= 2, "\(queueFailures() - before.1) failures to mark or record the queue in 4 s")
            #expect(Shell.run(["/bin/rm", "-f", disk + "/filler"]).status == 0)
            #expect(MountHarness.eventually(timeout: 40) { h2.sh("cat 'vault/remote 5.md'").out == "from the server" })
            #expect(h2.sh("ls vault | grep -c '^remote'").out == "5")
            #expect(MountHarness.eventually(timeout: 40) { h2.sh("cat .marfafs/flush").out.hasPrefix("ok") })
            let titles = (s.call("GET", "/items?limit=100", key: key).json["data"]?.arrayValue ?? []).compactMap { $0.objectValue?["properties"]?.objectValue?["title"]?.stringValue }
            #expect(titles.filter { $0.hasPrefix("q") }.sorted() == (1...10).map { "q\($0)" }.sorted(), "each queued note once: \(titles.sorted())")
            h2.unmount()
            // No room at all, the reserve taken too; the server changes meanwhile.
            _ = Shell.run(["/bin/sh", "-c", "rm -f '\(disk)'/kb.sqlite-reserve; dd if=/dev/zero of='\(disk)'/filler bs=4k 2>/dev/null; sync"])
            #expect(s.call("POST", "/items", key: key, body: #"{"type":"core.note","properties":{"title":"while away","body":"later"}}"#).status == 201)
            try h2.mount()
            #expect(h2.sh("cat vault/n7.md 'vault/remote 2.md'").out == "note 7\nfrom the server")
            #expect(Shell.run(["/bin/rm", "-f", disk + "/filler"]).status == 0)
            #expect(MountHarness.eventually(timeout: 40) { h2.sh("cat 'vault/while away.md'").out == "later" })
        }
    }
}
