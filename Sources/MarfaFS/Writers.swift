import Foundation
import MarfaStore
import Synchronization

/// The program behind a request: the kernel names the calling thread (`fuse_req_ctx()->pid`);
/// a save's base is kept per program (FS-29), so the thread is mapped to its thread group, read
/// from `/proc/<tid>/status`, and to the group's start time (`/proc/<pid>/stat`), and remembered
/// for a second. Ids are reused once the kernel's pid space wraps (32,768 by default, which a
/// busy machine goes through in minutes, one forking thousands of programs a second in seconds):
/// the start time tells a later program with an earlier one's id apart, so the earlier one's
/// record is never its base; remembered longer, an id taken again meanwhile would be the earlier
/// program's.
final class Writers: Sendable {
    private let known = Mutex<[Int32: (writer: Writer, until: UInt64)]>([:])
    static let maxRemembered = 8192
    static let rememberedNs: UInt64 = 1_000_000_000

    func writer(_ thread: Int32) -> Writer {
        guard thread > 0 else { return .unknown }
        let now = DispatchTime.now().uptimeNanoseconds
        if let p = known.withLock({ $0[thread] }), p.until > now { return p.writer }
        let p = Self.threadGroup(thread) ?? thread
        let w = Writer(process: p, started: Self.startTime(p) ?? 0)
        known.withLock {
            if $0.count >= Self.maxRemembered { $0.removeAll(keepingCapacity: true) }
            $0[thread] = (w, now + Self.rememberedNs)
        }
        return w
    }

    /// When process `pid` started (clock ticks since boot: field 22 of `/proc/<pid>/stat`, counted
    /// after the command name's closing parenthesis, as the name may hold spaces); nil when it is gone.
    static func startTime(_ pid: Int32) -> UInt64? {
        guard let b = procFile("/proc/\(pid)/stat"), let close = b.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        // After ")": state (field 3), ppid (4), … starttime (22).
        let fields = b[(close + 1)...].split(separator: UInt8(ascii: " "))
        guard fields.count > 19 else { return nil }
        return UInt64(String(decoding: fields[19], as: UTF8.self))
    }

    /// The `Tgid:` line of `/proc/<tid>/status`; nil when the thread is gone.
    static func threadGroup(_ tid: Int32) -> Int32? {
        guard let b = procFile("/proc/\(tid)/status"), let text = String(bytes: b, encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("Tgid:") {
            return Int32(line.dropFirst(5).trimmingCharacters(in: .whitespaces))
        }
        return nil
    }

    /// The first kilobyte of a file of `/proc` (one `read`, no lookup of names as Foundation's
    /// readers make); nil when it is gone or empty.
    private static func procFile(_ path: String) -> ArraySlice<UInt8>? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buf = [UInt8](repeating: 0, count: 1024)
        let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        return n > 0 ? buf[..<n] : nil
    }

    /// The command name of the process thread `tid` belongs to (`/proc/<tid>/comm`, as the
    /// kernel keeps it: at most 15 bytes); nil when the thread is gone or unknown.
    static func command(_ tid: Int32) -> String? {
        guard tid > 0, let text = try? String(contentsOfFile: "/proc/\(tid)/comm", encoding: .utf8) else { return nil }
        return text.trimmingCharacters(in: .newlines)
    }
}
