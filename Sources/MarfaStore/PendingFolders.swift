import Foundation
import GRDB

/// Folders (and tags) made through the mount with `mkdir` before their `local_tags` row is written:
/// the request does not wait for the store's writer, which the settler may hold through a commit
/// and whose commits may wait for the disk (a WAL header's sync, pages under writeback). `cp -r`
/// makes a folder before each folder's files; waiting there cost a tenth of its time.
///
/// Each is appended to `<store>-folders` at once (a line each, `tag\n`, in one `write(2)`), so a
/// killed mount loses none; the next write transaction of the store writes them all to
/// `local_tags` (`Store.write`: `flush`), and once it has committed the file holds only the ones
/// still pending, rewritten aside and renamed over. A line without its newline (torn by a power
/// cut), or not a valid tag, is skipped. A store opened reads what the file holds as pending.
///
/// Lock order: the store's writer, then `lock` (nothing here takes the writer).
final class PendingFolders: @unchecked Sendable {
    let path: String
    private let lock = NSLock()
    private var tags: Set<String>
    /// Appended to; -1 until the first append.
    private var fd: Int32 = -1

    init(path: String) {
        self.path = path
        tags = Self.read(path)
    }

    deinit { if fd >= 0 { close(fd) } }

    private func locked<T>(_ body: () throws -> T) rethrows -> T { lock.lock(); defer { lock.unlock() }; return try body() }

    var all: Set<String> { locked { tags } }
    var isEmpty: Bool { locked { tags.isEmpty } }

    /// Records `tag` as made; it is in the file when this returns.
    func add(_ tag: String) throws {
        try locked {
            if tags.contains(tag) { return }
            if fd < 0 {
                fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
                guard fd >= 0 else { throw StoreError.io("cannot open \(path): \(String(cString: strerror(errno)))") }
                // A line torn by a power cut is cut off, so this one starts a line of its own (only
                // the mount, which holds the store's lock, appends: a reader never cuts).
                _ = ftruncate(fd, off_t(Self.wholeLines(path).count))
            }
            let line = Array((tag + "\n").utf8)
            let start = lseek(fd, 0, SEEK_END)
            let n = line.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            guard n == line.count else {
                let e = n < 0 ? errno : ENOSPC
                let why = n < 0 ? String(cString: strerror(e)) : "short write"
                // A half line would join the next one: cut back to the lines before it.
                if start >= 0 { _ = ftruncate(fd, start) }
                throw e == ENOSPC || e == EDQUOT ? StoreError.noSpace("cannot record folder \(tag): \(why)")
                    : StoreError.io("cannot record folder \(tag) in \(path): \(why)")
            }
            tags.insert(tag)
        }
    }

    /// Inside a write transaction (`Store.write`): writes every pending tag's row; once the
    /// transaction commits they are no longer pending.
    func flush(_ db: Database) throws {
        let pending = all
        if pending.isEmpty { return }
        for t in pending { try db.run("INSERT OR IGNORE INTO local_tags(tag) VALUES (?)", [t]) }
        db.afterNextTransaction(onCommit: { [self] _ in committed(pending) })
    }

    /// `done` is in the store: the file keeps the rest (rewritten aside, renamed over; on failure
    /// it keeps them all, which a later flush writes again to no effect).
    private func committed(_ done: Set<String>) {
        locked {
            tags.subtract(done)
            let aside = path + ".new"
            let text = Array(tags.sorted().map { $0 + "\n" }.joined().utf8)
            let f = open(aside, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard f >= 0 else { return }
            let n = text.withUnsafeBytes { Glibc.write(f, $0.baseAddress, $0.count) }
            close(f)
            guard n == text.count, rename(aside, path) == 0 else { unlink(aside); return }
            if fd >= 0 { close(fd); fd = -1 }
        }
    }

    /// The file's bytes up to its last newline (a torn last line left out).
    private static func wholeLines(_ path: String) -> ArraySlice<UInt8> {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        let bytes = [UInt8](data)
        return bytes[..<((bytes.lastIndex(of: UInt8(ascii: "\n")) ?? -1) + 1)]
    }

    /// The tags a file holds: whole lines that are valid tags.
    private static func read(_ path: String) -> Set<String> {
        var out = Set<String>()
        for l in wholeLines(path).split(separator: UInt8(ascii: "\n")) {
            let tag = String(decoding: l, as: UTF8.self)
            if Store.isLocalTag(tag) { out.insert(tag) }
        }
        return out
    }
}
