import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// FS-28: real files and the tools people point at a filesystem: big blobs, fio, dd, cp -a,
/// rsync -aX, tar --xattrs, touch -d, the trash, a full disk.
@Suite(.serialized) struct RealFilesTests {
    func kib(_ path: String) -> Int64 {
        Int64(Shell.run(["/bin/bash", "-c", "du -sk --apparent-size '\(path)' | cut -f1"]).out) ?? 0
    }

    func fileSize(_ path: String) -> Int64 {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.int64Value ?? 0
    }

    /// A field of the daemon's /proc status (RssAnon: its private resident memory), in KiB.
    static func procKiB(_ pid: pid_t, _ field: String) -> Int {
        guard let s = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = s.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }) else { return -1 }
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? -1
    }

    /// Samples the daemon's private resident memory every 20 ms while `body` runs; returns its peak.
    func peakAnon(_ m: MountHarness, _ body: () -> Void) -> Int {
        guard let pid = m.daemonPID else { return -1 }
        let peak = PeakBox()
        let stop = PeakBox()
        let t = Thread { while stop.value == 0 { peak.raise(Self.procKiB(pid, "RssAnon")); usleep(20_000) } }
        t.start()
        body()
        stop.raise(1)
        usleep(50_000)
        return peak.value
    }

    @Test func FS28_ddOf256MiBIntoABlobIsExactAndTheStoreHoldsItOnce() throws {
        try MountHarness.with { m in
            let src = m.root + "/src.bin"
            #expect(Shell.run(["/bin/bash", "-c", "head -c 268435456 /dev/urandom > '\(src)'"]).status == 0)
            let before = fileSize(m.store)
            var hash = ""
            let anon = peakAnon(m) {
                let dd = m.sh("dd if='\(src)' of=types/core.file/big.bin bs=1M 2>&1")
                #expect(dd.status == 0, "\(dd.out)")
                // Read after write, while it is still being settled and after.
                #expect(m.sh("cmp '\(src)' types/core.file/big.bin").status == 0)
                #expect(m.sh("stat -c %s types/core.file/big.bin").out == "268435456")
                hash = m.sh("getfattr --only-values -n user.marfa.blob types/core.file/big.bin").out
            }
            #expect(anon > 0 && anon < 96 * 1024, "the daemon's private memory peaked at \(anon) KiB for a 256 MiB file")
            #expect(hash == "sha256:" + Shell.run(["/bin/bash", "-c", "sha256sum '\(src)' | cut -d' ' -f1"]).out)
            #expect(m.sh("cmp '\(src)' types/core.file/big.bin").status == 0)
            // One copy in the cache, and no spool file left.
            #expect(m.sql("SELECT count(*), sum(sz) FROM sqlar") == "1|268435456")
            #expect(((try? FileManager.default.contentsOfDirectory(atPath: m.store + "-spool")) ?? []).isEmpty)
            let growth = Double(fileSize(m.store) - before) / 268_435_456
            #expect(growth < 1.1, "the store grew \(growth)× the file")
            // Survives a remount.
            m.unmount()
            try m.mount()
            #expect(m.sh("cmp '\(src)' types/core.file/big.bin").status == 0)
        }
    }

    @Test func FS28_fioVerifyPassesOnANoteANewBlobAndAnExistingBlob() throws {
        try MountHarness.with { m in
            #expect(m.sh("head -c 6000000 /dev/urandom > types/core.file/old.bin").status == 0)
            m.settle()
            #expect(m.sh("getfattr --only-values -n user.marfa.blob types/core.file/old.bin").out.hasPrefix("sha256:"))
            for f in ["types/core.note/fio.md", "types/core.file/new.bin", "types/core.file/old.bin"] {
                let r = m.sh("fio --name=t --filename='\(f)' --rw=randrw --bs=4k --size=4M --verify=crc32c --do_verify=1 --output-format=terse 2>&1")
                let fields = r.out.split(separator: "\n").last?.split(separator: ";", omittingEmptySubsequences: false) ?? []
                #expect(r.status == 0 && fields.count > 5 && fields[4] == "0", "fio on \(f): \(r.out.suffix(400))")
            }
        }
    }

    @Test func FS28_aFileBeingWrittenReadsBackExactlyAtEveryMoment() throws {
        try MountHarness.with { m in
            // Writes of 1 MiB then a read of everything so far, with pauses that let it settle in
            // between: size and bytes must match what was written at every step.
            let script = """
            import os, sys, time
            p = sys.argv[1]
            fd = os.open(p, os.O_CREAT | os.O_WRONLY)
            data = b''
            for i in range(12):
                chunk = os.urandom(1 << 20)
                os.pwrite(fd, chunk, len(data))
                data += chunk
                st = os.stat(p)
                with open(p, 'rb') as f: back = f.read()
                if st.st_size != len(data) or back != data:
                    print('step', i, 'size', st.st_size, 'read', len(back), 'want', len(data)); sys.exit(1)
                if i % 4 == 3: time.sleep(1.5)
            os.close(fd)
            """
            let r = m.sh("python3 -c \"$(cat <<'EOF'\n\(script)\nEOF\n)\" types/core.file/grow.bin")
            #expect(r.status == 0, "\(r.out) \(r.stderr)")
        }
    }

    @Test func FS28_blobBytesWrittenBeforeAKillAreKept() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        let src = h.root + "/src.bin"
        #expect(Shell.run(["/bin/bash", "-c", "head -c 20000000 /dev/urandom > '\(src)'"]).status == 0)
        #expect(h.sh("cp '\(src)' types/core.file/k.bin").status == 0)
        h.killDaemon()
        try h.mount()
        #expect(h.sh("cmp '\(src)' types/core.file/k.bin").status == 0)
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: h.store + "-spool")) ?? []).isEmpty, "recovery settles spool files")
    }

    static let commented = "---\nstatus: draft  # TODO\n# reviewed by Ann\nzeta: 1\nalpha: two\n---\nBody text\n"

    func makeNote(_ m: MountHarness) {
        #expect(m.sh("printf '%s' '\(Self.commented)' > types/core.note/X.md && setfattr -n user.marfa.tags -v x:a,x:b types/core.note/X.md").status == 0)
        m.settle()
    }

    @Test func FS28_cpRsyncAndTarRoundTripsLeaveANoteByteIdenticalAndPrintNoError() throws {
        try MountHarness.with { m in
            makeNote(m)
            m.markQueueSent()
            let out = m.root + "/out"
            let version = m.sh("getfattr --only-values -n user.marfa.version types/core.note/X.md").out
            let cp = m.sh("mkdir -p '\(out)' && cp -a types/core.note/X.md '\(out)/' && cp -a '\(out)/X.md' types/core.note/ 2>&1")
            #expect(cp.status == 0 && cp.out.isEmpty, "\(cp.out)")
            #expect(m.sh("cat types/core.note/X.md").stdout == Self.commented)
            let rs = m.sh("rsync -aX types/core.note/ '\(out)/rs/' 2>&1 && rsync -aX '\(out)/rs/' types/core.note/ 2>&1")
            #expect(rs.status == 0 && rs.out.isEmpty, "\(rs.out)")
            #expect(m.sh("cat types/core.note/X.md").stdout == Self.commented)
            let tar = m.sh("tar --xattrs -cf '\(out)/x.tar' -C types/core.note X.md && tar --xattrs --overwrite -xf '\(out)/x.tar' -C types/core.note 2>&1")
            #expect(tar.status == 0 && tar.out.isEmpty, "\(tar.out)")
            #expect(m.sh("cat types/core.note/X.md").stdout == Self.commented)
            #expect(m.sh("getfattr --only-values -n user.marfa.tags types/core.note/X.md").out == "x:a,x:b")
            #expect(m.sh("getfattr --only-values -n user.marfa.version types/core.note/X.md").out == version)
            #expect(m.sql("SELECT count(*) FROM mutations") == "0", "a round trip queues nothing")
            // A changed copy coming back through rsync's temporary file: its attributes are taken
            // silently, its text is what was written.
            #expect(m.sh("printf 'more\\n' >> '\(out)/rs/X.md'").status == 0)
            let back = m.sh("rsync -aX '\(out)/rs/' types/core.note/ 2>&1")
            #expect(back.status == 0 && back.out.isEmpty, "\(back.out)")
            #expect(m.sh("cat types/core.note/X.md").stdout == Self.commented + "more\n")
        }
    }

    @Test func FS28_writingAnAttributesCurrentValueChangesNothing() throws {
        try MountHarness.with { m in
            makeNote(m)
            m.markQueueSent()
            let f = "types/core.note/X.md"
            let stat = m.sh("stat -c '%s %Y' \(f)").out
            for (name, value) in [("user.marfa.prop.status", "\"draft\""), ("user.marfa.prop.zeta", "1"), ("user.marfa.tags", "x:a,x:b"),
                                  ("user.marfa.tier", "library"), ("user.marfa.state", "active"), ("user.marfa.favorite", "0")] {
                #expect(m.sh("setfattr -n \(name) -v '\(value)' \(f)").status == 0, "\(name)")
            }
            let id = m.sh("getfattr --only-values -n user.marfa.id \(f)").out
            #expect(m.sh("setfattr -n user.marfa.id -v '\(id)' \(f)").status == 0, "a read-only attribute takes its current value")
            #expect(m.sh("setfattr -n user.marfa.id -v other \(f) 2>&1").out.contains("Operation not permitted"))
            #expect(m.sh("setfattr -n user.marfa.created_at -v 2020-01-01T00:00:00Z \(f) 2>&1").out.contains("Operation not permitted"))
            #expect(m.sh("setfattr -n user.marfa.version -v 7 \(f) && getfattr --only-values -n user.marfa.version \(f)").out == "1",
                    "a stale copy of the version is taken and changes nothing")
            #expect(m.sh("cat \(f)").stdout == Self.commented)
            #expect(m.sh("stat -c '%s %Y' \(f)").out == stat)
            #expect(m.sql("SELECT count(*) FROM mutations") == "0")
            #expect(m.sql("SELECT version FROM items WHERE id = '\(id)'") == "1")
        }
    }

    @Test func FS28_aPropertySetThroughAnAttributeEditsOnlyItsLine() throws {
        try MountHarness.with { m in
            makeNote(m)
            let f = "types/core.note/X.md"
            #expect(m.sh("setfattr -n user.marfa.prop.status -v done \(f)").status == 0)
            #expect(m.sh("cat \(f)").stdout == Self.commented.replacingOccurrences(of: "status: draft", with: "status: done"))
            #expect(m.sh("setfattr -n user.marfa.prop.due -v '\"2026-12-01\"' \(f)").status == 0)
            #expect(m.sh("cat \(f)").stdout.contains("alpha: two\ndue: \"2026-12-01\"\n---\nBody text\n"))
            #expect(m.sh("setfattr -x user.marfa.prop.zeta \(f)").status == 0)
            #expect(!m.sh("cat \(f)").stdout.contains("zeta"))
            #expect(m.sh("cat \(f)").stdout.contains("# reviewed by Ann\nalpha: two\n"))
            // A note without front matter gets a block holding only the key.
            #expect(m.sh("printf 'plain\\n' > types/core.note/P.md && setfattr -n user.marfa.prop.status -v draft types/core.note/P.md").status == 0)
            #expect(m.sh("cat types/core.note/P.md").stdout == "---\nstatus: draft\n---\nplain\n")
        }
    }

    @Test func FS28_timesCanBeSetAndRsyncTwiceTransfersNothing() throws {
        try MountHarness.with { m in
            let src = m.root + "/vault"
            let made = Shell.run(["/bin/bash", "-c", """
                mkdir -p '\(src)' && cd '\(src)' && for i in $(seq 1 30); do printf 'note %s\\n' $i > n$i.md; done &&
                head -c 3000000 /dev/urandom > big.md.bin && touch -d '2021-03-04 05:06:07' n1.md
                """])
            #expect(made.status == 0)
            #expect(m.sh("touch -d '2020-01-01 12:00:00' types/core.note/../core.note 2>&1; printf x > types/core.note/t.md && touch -d '2020-01-01 12:00:00' types/core.note/t.md").status == 0)
            #expect(m.sh("stat -c %y types/core.note/t.md").out.hasPrefix("2020-01-01 12:00:00"))
            m.settle()
            #expect(m.sh("stat -c %y types/core.note/t.md").out.hasPrefix("2020-01-01 12:00:00"), "settling keeps the time set")
            #expect(m.sh("rsync -a --exclude big.md.bin '\(src)/' types/core.note/ && rsync -a --include big.md.bin --exclude '*' '\(src)/' types/core.file/").status == 0)
            #expect(m.sh("stat -c %y types/core.note/n1.md").out.hasPrefix("2021-03-04 05:06:07"))
            m.settle()
            let second = m.sh("rsync -ai --exclude big.md.bin '\(src)/' types/core.note/; rsync -ai --include big.md.bin --exclude '*' '\(src)/' types/core.file/")
            #expect(second.status == 0 && second.out.isEmpty, "the second rsync transferred: \(second.out)")
            // A vault folder keeps the time set on it (stored when the mount is quiet, or at unmount).
            #expect(m.sh("mkdir vault/old && touch -d '2019-05-06 07:08:09' vault/old && stat -c %y vault/old").out.hasPrefix("2019-05-06 07:08:09"))
            m.unmount()
            try m.mount()
            #expect(m.sh("rsync -ai --exclude big.md.bin '\(src)/' types/core.note/").out.isEmpty, "times survive a remount")
            #expect(m.sh("stat -c %y vault/old").out.hasPrefix("2019-05-06 07:08:09"))
            #expect(m.sh("cmp '\(src)/big.md.bin' types/core.file/big.md.bin").status == 0)
            // A changed large file: rsync's temporary file (written past the staging limit) is
            // renamed over the blob; the item keeps its id, the old bytes leave the cache.
            let id = m.sh("getfattr --only-values -n user.marfa.id types/core.file/big.md.bin").out
            // Another size: rsync's quick check compares whole seconds, so a file of the same size
            // rewritten within the same second would count as unchanged and never be sent.
            #expect(Shell.run(["/bin/bash", "-c", "head -c 3100000 /dev/urandom > '\(src)/big.md.bin'"]).status == 0)
            // (Its bytes made an hour ago, so the replaced ones are a version to keep: FS-33.)
            #expect(m.sh("touch -d '1 hour ago' types/core.file/big.md.bin && cat .marfafs/status > /dev/null").status == 0)
            #expect(m.sh("rsync -a --include big.md.bin --exclude '*' '\(src)/' types/core.file/ 2>&1").status == 0)
            #expect(m.sh("cmp '\(src)/big.md.bin' types/core.file/big.md.bin").status == 0)
            #expect(m.sh("getfattr --only-values -n user.marfa.id types/core.file/big.md.bin").out == id)
            // The replaced bytes are the file's earlier version (FS-33), the only other blob kept.
            #expect(MountHarness.eventually { m.sql("SELECT count(*) FROM sqlar") == "2" }, "the replaced blob is kept as a version")
            #expect(m.sh("ls history/core.file/big.md.bin | wc -l").out == "1")
            #expect(m.sh("rsync -ai --include big.md.bin --exclude '*' '\(src)/' types/core.file/").out.isEmpty)
        }
    }

    @Test func FS28_removingFromTheTrashGivesTheSpaceBack() throws {
        try MountHarness.with { m in
            #expect(m.sh("head -c 40000000 /dev/urandom > types/core.file/a.bin && head -c 40000000 /dev/urandom > types/core.file/b.bin").status == 0)
            m.settle()
            let full = fileSize(m.store)
            #expect(full > 80_000_000)
            #expect(m.sh("rm types/core.file/a.bin types/core.file/b.bin && ls trash/core.file").out == "a.bin\nb.bin")
            #expect(m.sh("rm trash/core.file/a.bin && ls trash/core.file").out == "b.bin")
            #expect(MountHarness.eventually { fileSize(m.store) < full - 35_000_000 }, "purging a blob shrinks the store: \(fileSize(m.store)) of \(full)")
            let r = Shell.run([MountHarness.binary, "trash", "empty", m.mountpoint])
            #expect(r.status == 0 && r.out == "purged 1 items", "\(r.out) \(r.stderr)")
            #expect(m.sh("ls trash/core.file").out.isEmpty)
            #expect(m.sql("SELECT count(*) FROM sqlar") == "0")
            #expect(MountHarness.eventually { fileSize(m.store) < 8_000_000 }, "\(fileSize(m.store))")
        }
    }

    /// A mount whose store is on a tmpfs of `size` (a disk that fills up): `body` gets it, the
    /// tmpfs's path and a folder on another disk; both mounts are undone and removed after.
    static func onSmallDisk(_ size: String, _ body: (MountHarness, String, String) throws -> Void) throws {
        let h = try MountHarness()
        let disk = h.root + "/disk", elsewhere = h.root + "/elsewhere"
        for d in [disk, elsewhere] { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        #expect(Shell.run(["/bin/mount", "-t", "tmpfs", "-o", "size=\(size)", "tmpfs", disk]).status == 0)
        let h2 = try MountHarness(store: disk + "/kb.sqlite")
        defer {
            h2.unmount(); h.unmount()
            _ = Shell.run(["/bin/umount", "-l", disk])
            try? FileManager.default.removeItem(atPath: h.root); try? FileManager.default.removeItem(atPath: h2.root)
        }
        try body(h2, disk, elsewhere)
    }

    @Test func FS28_onAFullDiskDeletingStillWorksAndStatusSaysWhy() throws {
        try Self.onSmallDisk("48m") { h2, _, _ in try Self.deletingOnAFullDisk(h2) }
    }

    static func deletingOnAFullDisk(_ h2: MountHarness) throws {
        try h2.mount()
        #expect(h2.sh("printf 'keep me\\n' > types/core.note/keep.md").status == 0)
        h2.settle()
        // Fill the disk through the mount until it refuses.
        let fill = h2.sh("dd if=/dev/urandom of=types/core.file/fill.bin bs=1M count=80 2>&1")
        #expect(fill.status != 0 && fill.out.contains("No space left"), "\(fill.out)")
        let more = h2.sh("head -c 3000000 /dev/urandom > types/core.file/more.bin 2>&1")
        #expect(more.status != 0, "the disk is full")
        h2.settle()
        #expect(h2.sh("cat .marfafs/status").out.contains("no space left"), "\(h2.sh("cat .marfafs/status").out)")
        // Deleting works, and emptying the trash gives the space back.
        #expect(h2.sh("rm -f types/core.file/fill.bin types/core.file/more.bin 2>&1").status == 0)
        let empty = Shell.run([MountHarness.binary, "trash", "empty", h2.mountpoint])
        #expect(empty.status == 0, "\(empty.out) \(empty.stderr)")
        #expect(h2.sh("head -c 3000000 /dev/urandom > types/core.file/after.bin").status == 0, "writes work again")
        #expect(h2.sh("cat types/core.note/keep.md").out == "keep me", "nothing written before is lost")
        h2.unmount()
        try h2.mount()
        #expect(h2.sh("cat types/core.note/keep.md").out == "keep me")
        #expect(h2.sh("stat -c %s types/core.file/after.bin").out == "3000000")
    }

    /// FS-28, FS-15: files written into the tree until the disk is full stay in the staging
    /// journal (there is no room to store them); the next mount comes up with them all the same,
    /// says why in its status, and stores them once there is room.
    @Test func FS28_aMountAfterAFullDiskShowsWhatItsJournalHoldsAndStoresItOnceThereIsRoom() throws {
        try Self.onSmallDisk("24m") { h2, disk, src in try Self.mountAfterAFullDisk(h2, disk: disk, src: src) }
    }

    static func mountAfterAFullDisk(_ h2: MountHarness, disk: String, src: String) throws {
        #expect(Shell.run(["/bin/sh", "-c", "for i in $(seq 0 299); do head -c 75000 /dev/urandom | base64 -w 100 > '\(src)'/f$i.md; done"]).status == 0)
        try h2.mount()
        let fill = h2.sh("i=0; while [ $i -lt 300 ] && cp '\(src)'/f$i.md vault/f$i.md 2>/dev/null; do i=$((i+1)); done; echo $i")
        let written = Int(fill.out) ?? 0
        #expect(written > 20 && written < 300, "the disk filled after \(written) files")
        let same = "n=0; for i in $(seq 0 \(written - 1)); do cmp -s '\(src)'/f$i.md vault/f$i.md && n=$((n+1)); done; echo $n"
        h2.unmount()
        // The log a full disk had cut is not left empty: a store whose log is empty cannot be
        // opened on a disk with no room.
        #expect(Shell.run(["/usr/bin/stat", "-c", "%s", h2.store + "-wal"]).out.trimmingCharacters(in: .whitespacesAndNewlines) != "0")
        // Another program takes what is left, the reserve included: the mount has no room at all.
        _ = Shell.run(["/bin/sh", "-c", "rm -f '\(disk)'/kb.sqlite-reserve; dd if=/dev/zero of='\(disk)'/filler bs=64k 2>/dev/null; sync"])
        try h2.mount()
        #expect(h2.sh(same).out == "\(written)", "every file written before the disk filled is there after the mount")
        // (The copy the disk refused may have left its name too.)
        #expect(h2.sh("f=$(mktemp); ls vault > $f; n=0; for i in $(seq 0 \(written - 1)); do grep -qx f$i.md $f && n=$((n+1)); done; rm $f; echo $n").out == "\(written)", "and listed")
        // Stored at once if the store's own files still had room (a WAL grown before), else kept
        // staged and the status says why.
        let stored = (Int(h2.sql("SELECT count(*) FROM items")) ?? 0) >= written
        #expect(stored || h2.sh("cat .marfafs/status").out.contains("no space left"), "\(h2.sh("cat .marfafs/status").out.prefix(400))")
        // Room again: the files are stored, and stay through another mount.
        #expect(Shell.run(["/bin/rm", "-f", disk + "/filler"]).status == 0)
        // (Parsed by a debug build, beside the other suites on two cores: a minute at most.)
        #expect(MountHarness.eventually(timeout: 60) { (Int(h2.sql("SELECT count(*) FROM items WHERE unsettled = 0")) ?? 0) >= written },
                "\(written) written, \(h2.sql("SELECT count(*) FROM items")) items, \(h2.sql("SELECT count(*) FROM items WHERE unsettled = 0")) settled; \(h2.sh("cat .marfafs/status").out.prefix(300))\n\(Shell.run(["/bin/ls", "-ls", disk]).out)\n\(h2.daemonLog(last: 3000))")
        h2.unmount()
        try h2.mount()
        #expect(h2.sh(same).out == "\(written)")
    }

    /// FS-28, FS-15: a daemon killed while it stores a full disk's journal a batch at a time in
    /// place (records named dead in the store, then punched out of the journal). The next mount
    /// reads every file from the store or the journal, never a record a stored batch named dead
    /// (punched or not), and stores the rest once there is room; nothing is stored twice.
    @Test func FS28_aDaemonKilledWhileItStoresAFullDisksJournalInPlaceLosesNothing() throws {
        try Self.onSmallDisk("24m") { h2, disk, src in try Self.killedWhileStoringInPlace(h2, disk: disk, src: src) }
    }

    static func killedWhileStoringInPlace(_ h2: MountHarness, disk: String, src: String) throws {
        #expect(Shell.run(["/bin/sh", "-c", "for i in $(seq 0 299); do head -c 60000 /dev/urandom | base64 -w 100 > '\(src)'/f$i.md; done"]).status == 0)
        // Room held back by another program, given back once the disk has filled.
        #expect(Shell.run(["/bin/sh", "-c", "head -c 9000000 /dev/zero > '\(disk)'/ballast"]).status == 0)
        try h2.mount()
        let fill = h2.sh("i=0; while [ $i -lt 300 ] && cp '\(src)'/f$i.md vault/f$i.md 2>/dev/null; do i=$((i+1)); done; echo $i")
        let written = Int(fill.out) ?? 0
        #expect(written > 20 && written < 300, "the disk filled after \(written) files")
        let stored = { Int(h2.sql("SELECT count(*) FROM items WHERE unsettled = 0 AND type = 'core.note'")) ?? 0 }
        #expect(Shell.run(["/bin/rm", "-f", disk + "/ballast"]).status == 0)
        // The first batch stored in place (its records named dead): the daemon is killed while it
        // punches them out, or goes on with the next batch, or settles what it stored.
        // (Read without `h2.sql`, which would settle everything first through `.marfafs/status`.)
        let dead = { Shell.run(["/usr/bin/sqlite3", "-readonly", h2.store, "SELECT count(*) FROM meta WHERE key = 'staging_dead'"]).out }
        let batch = MountHarness.eventually(timeout: 60) { dead() == "1" }
        #expect(batch, "a batch was stored in place: \(stored()) of \(written); \(h2.daemonLog(last: 1500))")
        h2.killDaemon()
        let afterKill = stored()
        try h2.mount()
        let same = "n=0; for i in $(seq 0 \(written - 1)); do cmp -s '\(src)'/f$i.md vault/f$i.md && n=$((n+1)); done; echo $n"
        #expect(h2.sh(same).out == "\(written)", "every file reads back after the kill (\(afterKill) of \(written) were stored)")
        #expect(MountHarness.eventually(timeout: 60) { stored() >= written },
                "\(stored()) of \(written) stored; \(h2.sh("cat .marfafs/status").out.prefix(300))\n\(Shell.run(["/bin/sh", "-c", "df -B1 '\(disk)'; ls -ls '\(disk)'"]).out)\n\(h2.daemonLog(last: 2000))")
        // A local store's queue keeps no payload, whoever queued it (the settler's first passes
        // after the kill included: their payloads took the room the rest needed).
        #expect(h2.sql("SELECT count(*) FROM mutations WHERE payload != '{}' AND kind NOT IN ('create_edge', 'delete_edge')") == "0")
        // (The copy the disk refused may have left its name, and what it wrote, too.)
        let notes = Int(h2.sql("SELECT count(*) FROM items WHERE type = 'core.note'")) ?? 0
        #expect(notes == written || notes == written + 1, "\(notes) notes for \(written) files: none stored twice")
        h2.unmount()
        try h2.mount()
        #expect(h2.sh(same).out == "\(written)")
    }

    @Test func FS28_aLocalStoreKeepsNoPayloadsUntilItMeetsAServer() throws {
        let s = try ServerHarness()
        let (key, serverOptions) = try s.mountKey()
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        let body = String(repeating: "a line of the note\n", count: 400)
        #expect(h.sh("for i in $(seq 1 20); do printf '%s' '\(body)' > types/core.note/n$i.md; printf 'more\\n' >> types/core.note/n$i.md; done").status == 0)
        #expect(h.sh("head -c 100000 /dev/urandom > types/core.file/b.bin && mkdir -p links/core.note/n1.md/references && ln -s ../../../../types/core.note/n2.md links/core.note/n1.md/references/").status == 0)
        // Front matter with a null value, keys in the writer's order (Obsidian's `description:`).
        let nulls = "---\npermalink: x\npublish: true\ndescription: null\ndue:\n---\nbody\n"
        #expect(h.sh("printf '%s' '\(nulls)' > types/core.note/nulls.md").status == 0)
        #expect(h.sql("SELECT count(*) FROM mutations WHERE kind IN ('create', 'update', 'upload_blob') AND payload != '{}'") == "0")
        #expect((Int(h.sql("SELECT sum(length(payload)) FROM mutations")) ?? 1_000_000) < 2_000, "the queue holds no note twice")
        let n5 = h.sh("getfattr --only-values -n user.marfa.id types/core.note/n5.md").out
        h.unmount()
        // The first mount with a server sends everything the store holds.
        h.mountOptions = serverOptions
        try h.mount()
        #expect(MountHarness.eventually(timeout: 30) { h.sh("cat .marfafs/flush").out.hasPrefix("ok") })
        #expect(s.call("GET", "/items/\(n5)", key: key).item["properties"]?.objectValue?["body"] == .string(body + "more\n"))
        let page = s.call("GET", "/items?limit=100", key: key).json["data"]?.arrayValue ?? []
        #expect(page.count == 22, "\(page.count) items on the server")
        let n1 = h.sh("getfattr --only-values -n user.marfa.id types/core.note/n1.md").out
        #expect(s.call("GET", "/items/\(n1)/edges", key: key).json["data"]?.arrayValue?.count == 1)
        // Its null properties reach the server, and its bytes stay as written: the file's form
        // sent after its create changes no property (W-7), so no update comes back to render it.
        let nid = h.sh("getfattr --only-values -n user.marfa.id types/core.note/nulls.md").out
        let onServer = s.call("GET", "/items/\(nid)", key: key).item
        #expect(onServer["version"] == .int(1) && onServer["properties"]?.objectValue?.keys.contains("description") == true, "\(onServer)")
        #expect(h.sh("sleep 1; printf '%s' '\(nulls)' | cmp - types/core.note/nulls.md").status == 0, "\(h.sh("cat types/core.note/nulls.md").out)")
    }

    @Test func FS28_smallerRoundTrips() throws {
        try MountHarness.with { m in
            // Writing the tags attribute keeps the folder an item was imported from.
            #expect(m.sh("printf x > types/core.note/f.md && setfattr -n user.marfa.tags -v 'folder:projects,k:x' types/core.note/f.md").status == 0)
            #expect(m.sh("setfattr -n user.marfa.tags -v k:y types/core.note/f.md && getfattr --only-values -n user.marfa.tags types/core.note/f.md").out == "folder:projects,k:y")
            // Emacs' lock file: a symlink with a scratch name, local only.
            #expect(m.sh("ln -s 'root@host.123:1700000000' types/core.note/.#f.md && readlink types/core.note/.#f.md").out == "root@host.123:1700000000")
            #expect(m.sh("rm types/core.note/.#f.md && ls -a types/core.note | grep -c '#'").out == "0")
            // export refuses a mounted store.
            let ex = Shell.run([MountHarness.binary, "export", m.root + "/exp", "--store", m.store])
            #expect(ex.status != 0 && ex.stderr.contains("in use"), "\(ex.stdout) \(ex.stderr)")
            // unmount returns once the daemon let go: an immediate mount works.
            m.unmount()
            try m.mount()
            #expect(m.sh("cat types/core.note/f.md").out == "x")
        }
    }
}

/// A number raised from several threads.
final class PeakBox: @unchecked Sendable {
    private let lock = NSLock()
    private var v = 0
    var value: Int { lock.lock(); defer { lock.unlock() }; return v }
    func raise(_ x: Int) { lock.lock(); v = max(v, x); lock.unlock() }
}

extension RealFilesTests {
    /// `rsync -aX` from a plain folder into the tree, again and again (FS-28): each run removes
    /// from every file the attributes its source lacks, the notes' properties among them. That
    /// changes nothing, so every note keeps its front matter and no run sends a file again. A
    /// property removed by anyone else still loses its line.
    @Test func FS28_rsyncXFromAPlainFolderAgainAndAgainKeepsEveryNotesFrontMatter() throws {
        try MountHarness.with { m in
            let src = m.root + "/plain"
            #expect(m.sh("mkdir -p '\(src)/d' && printf -- '---\\ntags: [a, b]\\ncreated: 2024-01-02\\nstatus: draft\\n---\\nbody\\n' > '\(src)/d/n.md' && printf 'plain\\n' > '\(src)/p.md'").status == 0)
            for _ in 0..<3 { #expect(m.sh("rsync -aX '\(src)/' vault/in/").status == 0) }
            #expect(m.sh("diff -r '\(src)' vault/in && echo same").out == "same")
            let again = m.sh("rsync -aX --stats '\(src)/' vault/in/")
            #expect(again.stdout.contains("Number of regular files transferred: 0"), "\(again.stdout)")
            let removed = m.sh("setfattr -x user.marfa.prop.status vault/in/d/n.md && cat vault/in/d/n.md").out
            #expect(!removed.contains("status") && removed.contains("tags: [a, b]") && removed.hasSuffix("body"), "\(removed)")
        }
    }
}
