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
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let holder = (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            close(fd)
            throw CLIError("the store \(store) is in use\(holder.isEmpty ? "" : " (\(holder))"); unmount it first", code: Exit.busy)
        }
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
