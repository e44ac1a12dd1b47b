import Foundation
import MarfaTestSupport
import Testing

/// The control files under `.marfafs/` (§7, FS-33).
extension MountTests {
    /// A program that reads as many bytes as `fstat` reported, a while after the `fstat` (as
    /// Foundation's `String(contentsOfFile:)` does), gets the whole status although its text
    /// changes length from one millisecond to the next (the age of the oldest mutation) (§7).
    @Test func controlFiles_aReadOfTheStatedLengthGetsTheWholeText() throws {
        try MountHarness.with { m in
            #expect(m.sh("echo a > types/core.note/a.md").status == 0)
            let script = """
            import json, os, time
            bad = []
            for i in range(150):
                fd = os.open('.marfafs/status', os.O_RDONLY)
                n = os.fstat(fd).st_size
                time.sleep(0.005 + (i % 4) * 0.005)
                text = os.read(fd, n)
                os.close(fd)
                try: json.loads(text)
                except ValueError: bad.append(text[-30:])
            print(len(bad), bad[:2])
            """
            let file = NSTemporaryDirectory() + "marfafs-status-read-\(UUID().uuidString).py"
            defer { try? FileManager.default.removeItem(atPath: file) }
            try script.write(toFile: file, atomically: true, encoding: .utf8)
            let r = m.sh("python3 '\(file)'")
            #expect(r.out.hasPrefix("0 "), "\(r.out) \(r.stderr)")
        }
    }

    /// `.marfafs/requests` counts the kernel's requests by operation (§7): a file made is one
    /// `create` and one `write`; files read warm cost no request each (the kernel keeps their pages
    /// and attributes), so a lost cache shows here as a count, not as a timing.
    @Test func controlFiles_requestsCountsWhatTheKernelAsks() throws {
        try MountHarness.with { m in
            func counts() -> [String: Int] { m.requestCounts }
            #expect(m.sh("mkdir vault/d && for i in $(seq 40); do head -c 6000 /dev/zero | tr '\\0' x > vault/d/n$i.md; done").status == 0)
            _ = m.sh("cat .marfafs/status")
            let a = counts()
            #expect(m.sh("echo hello > vault/d/new.md").status == 0)
            let b = counts()
            #expect(b["create"] == (a["create"] ?? 0) + 1 && b["write"] == (a["write"] ?? 0) + 1, "\(a) \(b)")
            #expect(b["total"] == b.filter { $0.key != "total" }.values.reduce(0, +), "the last line sums the others")
            let r1 = m.sh("cat .marfafs/requests").out, r2 = m.sh("cat .marfafs/requests").out
            #expect(r1.utf8.count == r2.utf8.count && r1 != r2, "one length always, counted anew at each read")
            // The first pass reads each file's last page (a write leaves a part-written page out
            // of the cache) and the second asks each file's access time again (a read made it
            // stale); the third is answered by the kernel alone.
            for _ in 0..<2 { #expect(m.sh("cat vault/d/* > /dev/null").status == 0) }
            let c = counts()
            #expect(m.sh("cat vault/d/* > /dev/null").status == 0)
            let d = counts()
            let reads = (d["read"] ?? 0) - (c["read"] ?? 0), getattrs = (d["getattr"] ?? 0) - (c["getattr"] ?? 0)
            #expect(reads <= 3 && getattrs <= 8, "41 files read warm: \(reads) reads, \(getattrs) getattrs")
        }
    }
}
