import Foundation
import Synchronization

/// The kernel's requests this mount has answered, by operation, with the time its handlers took
/// (`.marfafs/requests`). What a workload costs in round trips is then a count, not a timing: a
/// lost cache shows as requests per file where there were none, and a workload's floor on a
/// machine is its requests times that machine's round trip (`scripts/bench vault`).
///
/// Locks: none. Each operation's two counters are atomics, added to by the request's own thread.
final class RequestCounts: Sendable {
    /// The operations counted: those the daemon answers itself. What libfuse answers without it
    /// (`ioctl`, `flush`, `release` of a file made by `create`, and the `init`) is not here.
    enum Op: Int, CaseIterable, Sendable {
        case lookup, forget, getattr, setattr, readlink, mknod, mkdir, unlink, rmdir, symlink, rename, link
        case read, write, fallocate, fsync, fsyncdir, readdir, readdirplus, statfs
        case setxattr, getxattr, listxattr, removexattr, create

        var name: String { "\(self)" }
    }

    /// An atomic counter that can live in an array.
    private final class Counter: Sendable {
        let value = Atomic<UInt64>(0)
    }

    private let counts: [Counter]
    private let nanoseconds: [Counter]

    init() {
        counts = Op.allCases.map { _ in Counter() }
        nanoseconds = Op.allCases.map { _ in Counter() }
    }

    /// One request of `op` answered in `ns` nanoseconds (its handler's time, the reply included).
    @inline(__always)
    func add(_ op: Op, ns: UInt64) {
        counts[op.rawValue].value.add(1, ordering: .relaxed)
        nanoseconds[op.rawValue].value.add(ns, ordering: .relaxed)
    }

    func count(_ op: Op) -> UInt64 { counts[op.rawValue].value.load(ordering: .relaxed) }

    /// A line per operation: `name TAB requests TAB microseconds in the handler`, and a last line
    /// `total TAB … TAB …`; the numbers right-aligned in 20 columns, so the text's length never
    /// changes and a read in pieces never mixes two countings. Counts only grow: a reader takes
    /// the difference of two reads (a read itself adds a `lookup`, a `getattr` and a `read`).
    func text() -> String {
        func column(_ v: UInt64) -> String { let s = String(v); return String(repeating: " ", count: max(0, 20 - s.count)) + s }
        var out = ""
        var n: UInt64 = 0, us: UInt64 = 0
        for op in Op.allCases {
            let c = count(op)
            let t = nanoseconds[op.rawValue].value.load(ordering: .relaxed) / 1000
            out += "\(op.name)\t\(column(c))\t\(column(t))\n"
            n &+= c; us &+= t
        }
        return out + "total\t\(column(n))\t\(column(us))\n"
    }

    /// The monotonic clock in nanoseconds.
    @inline(__always)
    static func now() -> UInt64 {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_nsec)
    }
}
