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
}
