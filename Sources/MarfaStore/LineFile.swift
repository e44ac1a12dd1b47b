import Foundation

/// A file of lines beside the store, each appended in one `write(2)` before the request that made
/// it is answered (`PendingFolders`, `PendingRemovals`): a kill loses no line whose call returned;
/// a line torn by a power cut (no newline) is left out when read, and cut off before the next
/// append so that line starts a line of its own. Once what it records is in the store, the file
/// is rewritten with what is still pending (aside, renamed over). Only the mount, which holds the
/// store's lock, appends: a reader never cuts.
///
/// Not thread-safe: its owner's lock guards every call.
struct LineFile {
    let path: String
    /// Appended to; -1 until the first append after an open or a rewrite.
    private var fd: Int32 = -1

    init(path: String) { self.path = path }

    /// Appends a whole line; `what` names it in the error (a full disk: `StoreError.noSpace`).
    mutating func append(_ text: String, what: String) throws {
        if fd < 0 {
            fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw StoreError.io("cannot open \(path): \(String(cString: strerror(errno)))") }
            _ = ftruncate(fd, off_t(Self.wholeLines(path).count))
        }
        let line = Array(text.utf8)
        let start = lseek(fd, 0, SEEK_END)
        let n = line.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard n == line.count else {
            let e = n < 0 ? errno : ENOSPC
            let why = n < 0 ? String(cString: strerror(e)) : "short write"
            // A half line would join the next one: cut back to the lines before it.
            if start >= 0 { _ = ftruncate(fd, start) }
            throw e == ENOSPC || e == EDQUOT ? StoreError.noSpace("cannot record \(what): \(why)")
                : StoreError.io("cannot record \(what) in \(path): \(why)")
        }
    }

    /// Replaces the file with `lines` (written aside, renamed over); on failure the file keeps
    /// what it had, which its owner reads again to no effect.
    mutating func rewrite(_ lines: [String]) {
        let aside = path + ".new"
        let text = Array(lines.joined().utf8)
        let f = open(aside, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard f >= 0 else { return }
        let n = text.withUnsafeBytes { Glibc.write(f, $0.baseAddress, $0.count) }
        Glibc.close(f)
        guard n == text.count, rename(aside, path) == 0 else { unlink(aside); return }
        close()
    }

    /// Closes the descriptor appended to (the next append opens the file again).
    mutating func close() {
        if fd >= 0 { Glibc.close(fd); fd = -1 }
    }

    /// The file's lines up to its last newline (a torn last line left out), without the newlines.
    static func lines(_ path: String) -> [ArraySlice<UInt8>] {
        wholeLines(path).split(separator: UInt8(ascii: "\n"))
    }

    private static func wholeLines(_ path: String) -> ArraySlice<UInt8> {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        let bytes = [UInt8](data)
        return bytes[..<((bytes.lastIndex(of: UInt8(ascii: "\n")) ?? -1) + 1)]
    }
}
