import Foundation
import MarfaStore

/// An exclusive lock on a store (`<store>.lock`), held by a mount for its whole life, so an
/// import, export or second mount cannot change the store behind the mount's back.
final class StoreLock {
    let fd: Int32
    let path: String

    init(store: String) throws {
        path = store + ".lock"
        try FileManager.default.createDirectory(atPath: (store as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CLIError("cannot open \(path): \(String(cString: strerror(errno)))") }
        // A daemon whose mount is gone, writing what it was last given, is waited for, as
        // `marfafs umount` waits (after `umount` or `fusermount3 -u`, a mount again at once).
        Self.waitIfFinishing(store: store)
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            close(fd)
            let holder = Self.holder(path)
            let why = holder.hasPrefix(Self.finishingPrefix) ? "still finishing after \(Int(Self.finishingWait)) s; see its log" : "unmount it first"
            throw CLIError("the store \(store) is in use\(holder.isEmpty ? "" : " (\(holder))"); \(why)", code: Exit.busy)
        }
    }

    /// What a mount's daemon records once the kernel has let go of its mount point, while it
    /// commits what it was given (`FuseMount.onUnmounted`).
    static func finishing(_ mnt: String) -> String { finishingPrefix + "unmounted from \(mnt) by pid \(getpid())" }
    static let finishingPrefix = "finishing: "
    /// How long a command waits for such a daemon (a copy of a few GiB of written files into the
    /// store's blob cache takes a minute on a slow disk).
    static let finishingWait: Double = 300

    /// Waits (saying so) while the store is held by a daemon finishing its unmount. `mount` also
    /// asks before it starts its daemon, so the wait is the user's to see, not the daemon's log's.
    static func waitIfFinishing(store: String) {
        // What a daemon that has exited left in the file says nothing: only a lock held counts.
        guard !waitUntilFree(store: store, seconds: 0) else { return }
        let holder = holder(store + ".lock")
        guard holder.hasPrefix(finishingPrefix) else { return }
        FileHandle.standardError.write(Data("marfafs: waiting for the daemon of \(store) to finish writing it (\(holder))\n".utf8))
        _ = waitUntilFree(store: store, seconds: finishingWait)
    }

    private static func holder(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
    }

    func record(_ text: String) {
        ftruncate(fd, 0)
        _ = text.withCString { pwrite(fd, $0, strlen($0), 0) }
    }

    deinit { close(fd) }

    /// Waits until no process holds the store's lock (a daemon finishing its unmount).
    static func waitUntilFree(store: String, seconds: Double) -> Bool {
        let fd = open(store + ".lock", O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return true }
        defer { close(fd) }
        let deadline = Date().addingTimeInterval(seconds)
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            if Date() >= deadline { return false }
            usleep(20_000)
        }
        flock(fd, LOCK_UN)
        return true
    }
}

extension Store {
    /// `recoverStaged` for a command: a journal it set aside is said on stderr, with its new name.
    func recoverStagedSaying() throws {
        try recoverStaged()
        if let (aside, why) = unrecoveredJournal.withLock({ $0 }) {
            FileHandle.standardError.write(Data("marfafs: the staging journal beside \(path) names what this store does not have (\(why)): kept as \(aside), not applied\n".utf8))
        }
    }
}
