import ArgumentParser
import Foundation
import MarfaStore
import Synchronization

/// The text of a control file of a mount (`.marfafs/NAME`), read to its end: the length a stat
/// reported is only a hint, as for a file in /proc. Throws when it cannot be opened.
func readControlFile(_ mnt: String, _ name: String) throws -> String {
    let path = mnt + "/.marfafs/" + name
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw CLIError("\(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 64 << 10)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0, errno == EINTR { continue }
        guard n >= 0 else { throw CLIError("\(path): \(String(cString: strerror(errno)))") }
        if n == 0 { break }
        bytes += chunk[0..<n]
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// Reads `.marfafs/flush`, which returns once the queue is sent (or paused for a key); nil if
/// `mnt` is not a marfafs mount. The text starts with `ok` when the queue is empty.
func waitForQueue(_ mnt: String) -> String? {
    try? readControlFile(mnt, "flush")
}

struct SyncCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sync", abstract: "Show what the queue still has to send; with --wait, wait until it is sent.")

    @Argument(help: "The mount point, or any path inside the mount.")
    var mountpoint: String

    @Flag(name: .long, help: "Block until every change made so far is on the server (or the queue is paused for a key).")
    var wait = false

    func run() throws {
        let mnt = Paths.mount(holding: mountpoint)
        // On a terminal, the wait shows how far the queue has got meanwhile.
        let shown = wait && isatty(1) != 0 ? Self.showProgress(mnt) : nil
        let text = wait ? waitForQueue(mnt) : (try? readControlFile(mnt, "status")).map { status in
            let o = (try? JSONSerialization.jsonObject(with: Data(status.utf8))) as? [String: Any] ?? [:]
            return "\(o["queue_depth"] ?? 0) mutations queued; connection: \(o["connection"] ?? "none")\n"
        }
        if let shown { shown(); print("\r\u{1B}[K", terminator: "") }
        guard let text else { fail(CLIError("\(mnt) is not a marfafs mount")) }
        print(text, terminator: "")
        if wait && !text.hasPrefix("ok") { throw ExitCode(Exit.failure) }
        if wait { Self.warnOfRefusals(mnt) }
    }

    /// The queue is sent, but changes the server refused for good stay local: a script that waited
    /// for everything to be on the server is told so (standard error; the exit status stays 0).
    static func warnOfRefusals(_ mnt: String) {
        guard let status = try? readControlFile(mnt, "status"),
              let o = (try? JSONSerialization.jsonObject(with: Data(status.utf8))) as? [String: Any],
              let n = (o["rejected"] as? NSNumber)?.intValue, n > 0 else { return }
        FileHandle.standardError.write(Data("marfafs: \(n) change(s) refused by the server stay local only (marfafs pending \(mnt) lists them)\n".utf8))
    }

    /// A line redrawn twice a second: mutations left, and the bytes of the uploads under way.
    /// Returns what stops it (once stopped, it draws nothing more).
    static func showProgress(_ mnt: String) -> () -> Void {
        let stop = Mutex(false)
        let ended = DispatchSemaphore(value: 0)
        Thread {
            defer { ended.signal() }
            while !stop.withLock({ $0 }) {
                if let text = try? readControlFile(mnt, "status"),
                   let o = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] {
                    let ts = o["transfers"] as? [[String: Any]] ?? []
                    let done = ts.reduce(0.0) { $0 + ((($1["done"] as? NSNumber)?.doubleValue) ?? 0) }
                    let total = ts.reduce(0.0) { $0 + ((($1["total"] as? NSNumber)?.doubleValue) ?? 0) }
                    var line = "sending: \(o["queue_depth"] ?? 0) mutations left"
                    if total > 0 { line += String(format: ", %.1f of %.1f MiB uploaded (%d%%)", done / 1_048_576, total / 1_048_576, Int(done * 100 / total)) }
                    if !stop.withLock({ $0 }) { print("\r\u{1B}[K" + line, terminator: ""); fflush(nil) }
                }
                usleep(500_000)
            }
        }.start()
        return { stop.withLock { $0 = true }; ended.wait() }
    }
}

struct UnmountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "unmount", abstract: "Unmount; the queue is kept for the next mount.")

    @Argument(help: "The mount point.")
    var mountpoint: String

    @Flag(name: .long, help: "First wait until the queue is sent to the server (as marfafs sync --wait).")
    var wait = false

    func run() throws {
        let mnt = Paths.absolute(mountpoint)
        guard MountPoint.mounts().contains(where: { $0.point == mnt && $0.type.hasPrefix("fuse") }) else {
            fail(CLIError("\(mnt) is not mounted"))
        }
        if wait, let text = waitForQueue(mnt), !text.hasPrefix("ok") {
            FileHandle.standardError.write(Data("marfafs: \(text.trimmingCharacters(in: .whitespacesAndNewlines)); unmounting with the queue kept\n".utf8))
        }
        // The store the daemon holds: unmount returns once the daemon has let go of it, so a
        // mount or export right after finds it free.
        let storePath = (try? readControlFile(mnt, "status"))
            .flatMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }?["store"] as? String
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
        p.arguments = ["-u", mnt]
        let errPipe = Pipe()
        p.standardError = errPipe
        try p.run()
        p.waitUntilExit()
        if p.terminationStatus != 0 {
            let msg = String(decoding: errPipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            if msg.contains("busy") { fail(CLIError("\(mnt) is busy (a process has a file or directory open there)", code: Exit.busy)) }
            fail(CLIError("cannot unmount \(mnt): \(msg.trimmingCharacters(in: .whitespacesAndNewlines))"))
        }
        // The daemon commits and exits once the kernel lets go; give it a moment to release the store.
        let deadline = Date().addingTimeInterval(10)
        while MountPoint.isMarfafsMount(mnt) && Date() < deadline { usleep(20_000) }
        if let storePath, !StoreLock.waitUntilFree(store: storePath, seconds: 120) {
            fail(CLIError("\(mnt) is unmounted, but its daemon still holds \(storePath) after 120 s (see its log)"))
        }
        print("unmounted \(mnt)")
    }
}

struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Show the state of a mount (or of every mount).")

    @Argument(help: "A mount point (or a path inside a mount); without one, every marfafs mount.")
    var mountpoint: String?

    @Flag(name: .long, help: "Print the status as JSON (one object per mount).")
    var json = false

    func run() throws {
        let points = mountpoint.map { [Paths.mount(holding: $0)] } ?? MountPoint.mounts().filter { $0.type == "fuse.marfafs" }.map(\.point)
        if points.isEmpty { print(json ? "[]" : "no marfafs mount"); return }
        var failed = false
        for mnt in points {
            guard let text = try? readControlFile(mnt, "status") else {
                FileHandle.standardError.write(Data("marfafs: \(mnt) is not a marfafs mount\n".utf8)); failed = true; continue
            }
            if json { print(text.trimmingCharacters(in: .whitespacesAndNewlines)); continue }
            let obj = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
            print("\(mnt)")
            for k in ["mode", "server", "connection", "stream", "last_event_id", "store", "items", "queue_depth", "oldest_pending_age_seconds", "conflicts", "rejected", "last_error"]
                where k == "mode" || obj["mode"] as? String == "synced" || !["stream", "last_event_id"].contains(k) {
                let v = obj[k].map { $0 is NSNull ? "-" : "\($0)" } ?? "-"
                print("  \(k.replacingOccurrences(of: "_", with: " ")): \(v)")
            }
            if let ts = obj["transfers"] as? [[String: Any]], !ts.isEmpty { printTransfers(ts) }
            if let inv = obj["invalid"] as? [[String: Any]], !inv.isEmpty {
                print("  not synced: \(inv.count) file(s) kept locally, their front matter not parsed or a change refused by the server")
                for i in inv.prefix(50) {
                    let path = i["path"] as? String ?? i["id"] as? String ?? "?"
                    print("    \(path): \(i["error"] as? String ?? "invalid")")
                }
                if inv.count > 50 { print("    and \(inv.count - 50) more (marfafs status --json lists them all)") }
            }
        }
        if failed { throw ExitCode(Exit.failure) }
    }
}

/// Blob transfers under way, from `.marfafs/status`: a progress bar each on a terminal.
func printTransfers(_ ts: [[String: Any]]) {
    print("  transfers: \(ts.count)")
    let mib = { (n: Double) in String(format: "%.1f MiB", n / 1_048_576) }
    for t in ts {
        let done = (t["done"] as? NSNumber)?.doubleValue ?? 0, total = (t["total"] as? NSNumber)?.doubleValue ?? 0
        let frac = total > 0 ? min(1, done / total) : 0
        let bar = isatty(1) != 0 ? "[" + String(repeating: "#", count: Int(frac * 30)) + String(repeating: "-", count: 30 - Int(frac * 30)) + "] " : ""
        let name = t["path"] as? String ?? t["hash"] as? String ?? "?"
        print("    \(name)  \(t["direction"] as? String ?? "")  \(bar)\(Int(frac * 100))%  \(mib(done)) of \(mib(total))\((t["restarted"] as? Bool) == true ? "  (restarted)" : "")")
    }
}

/// Prints a control file of a mount (§7).
func printControlFile(_ mountpoint: String, _ name: String) {
    let mnt = Paths.mount(holding: mountpoint)
    guard let text = try? readControlFile(mnt, name) else {
        fail(CLIError("\(mnt) is not a marfafs mount"))
    }
    print(text, terminator: "")
}

struct PendingCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pending", abstract: "List the queued mutations of a mount: path, kind, age, state.",
        discussion: "One line per mutation, oldest first: the item's path in the mount, the kind of change, how long it has waited, and its state (pending, in-flight, retrying N: last error, held: why, rejected: why), separated by tabs.")

    @Argument(help: "The mount point, or any path inside the mount.")
    var mountpoint: String

    @Flag(name: .long, help: "Print the queue as a JSON array (id, item, path, target, kind, created_at, age_seconds, state, attempts, reason).")
    var json = false

    func run() throws { printControlFile(mountpoint, json ? "pending.json" : "pending") }
}

struct ResyncCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resync",
        abstract: "Re-seed an unmounted store from the server at its next mount, keeping every pending local change.")

    @OptionGroup var storeOption: StoreOption

    func run() throws {
        do {
            let lock = try StoreLock(store: storeOption.path)
            guard FileManager.default.fileExists(atPath: storeOption.path) else { throw CLIError("no store at \(storeOption.path)") }
            let store = try Store(path: storeOption.path)
            let kept = try store.requestReseed()
            print("the next mount with --server fetches everything again and takes the server's state; \(kept) queued mutations are kept and sent")
            withExtendedLifetime(lock) {}
        } catch let e as CLIError { fail(e) }
    }
}

struct ConflictsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "conflicts", abstract: "List every conflicted copy with its original, and conflicts held for a save.")

    @Argument(help: "The mount point, or any path inside the mount.")
    var mountpoint: String

    func run() throws { printControlFile(mountpoint, "conflicts") }
}

struct EventsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "events", abstract: "Show the latest sync events of a mount as JSON lines.")

    @Argument(help: "The mount point, or any path inside the mount.")
    var mountpoint: String

    @Flag(name: .long, help: "Keep printing new events as they happen (until interrupted).")
    var follow = false

    func run() throws {
        guard follow else { printControlFile(mountpoint, "events"); return }
        let mnt = Paths.mount(holding: mountpoint)
        var seen = Set<String>()
        while true {
            guard let text = try? readControlFile(mnt, "events") else {
                fail(CLIError("\(mnt) is not a marfafs mount (any more)"))
            }
            for line in text.split(separator: "\n") where !seen.contains(String(line)) {
                seen.insert(String(line)); print(line)
            }
            fflush(nil)
            usleep(250_000)
        }
    }
}

/// A progress line on a terminal, nothing otherwise.
struct Progress {
    let label: String
    let total: Int
    let tty = isatty(STDERR_FILENO) == 1
    var last = Date.distantPast

    mutating func update(_ n: Int) {
        guard tty, n == total || Date().timeIntervalSince(last) > 0.1 else { return }
        last = Date()
        let width = 30
        let filled = total == 0 ? width : width * n / total
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        FileHandle.standardError.write(Data("\r\(label) [\(bar)] \(n)/\(total)".utf8))
        if n == total { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}

struct TrashCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "trash", abstract: "Empty the trash: purge every trashed item and give its space back.",
        discussion: "marfafs trash empty MOUNTPOINT purges through the mount (as rm in trash/ does); marfafs trash empty --store PATH purges an unmounted store. A server keeps its copies trashed (the wire contract has no purge).")

    @Argument(help: "empty")
    var action: String

    @Argument(help: "The mount point (or none, with --store).")
    var mountpoint: String?

    @OptionGroup var storeOption: StoreOption

    func run() throws {
        guard action == "empty" else { fail(CLIError("marfafs trash: the one action is 'empty'")) }
        do {
            if let mountpoint {
                let mnt = Paths.mount(holding: mountpoint)
                guard MountPoint.isMarfafsMount(mnt) else { throw CLIError("\(mnt) is not a marfafs mount") }
                var n = 0
                let trash = mnt + "/trash"
                for t in (try? FileManager.default.contentsOfDirectory(atPath: trash)) ?? [] {
                    for name in (try? FileManager.default.contentsOfDirectory(atPath: trash + "/" + t)) ?? [] {
                        let p = trash + "/" + t + "/" + name
                        guard unlink(p) == 0 else { throw CLIError("cannot purge \(p): \(String(cString: strerror(errno)))") }
                        n += 1
                    }
                }
                print("purged \(n) items")
            } else {
                let lock = try StoreLock(store: storeOption.path)
                guard FileManager.default.fileExists(atPath: storeOption.path) else { throw CLIError("no store at \(storeOption.path)") }
                let store = try Store(path: storeOption.path)
                try store.recoverStagedSaying()
                let purged = try store.purgeTrash()
                try store.dropUnusedBlobs()
                print("purged \(purged.count) items")
                withExtendedLifetime(lock) {}
            }
        } catch let e as CLIError { fail(e) }
    }
}
