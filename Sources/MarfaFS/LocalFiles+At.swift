import Foundation

/// Where a local path lives, for the `*at` system calls (FS-31: a tree deeper than the kernel's
/// PATH_MAX holds local files as a disk would). A path that fits in PATH_MAX from `/` is named
/// whole; a longer one by its folder, opened a name at a time from the local root, and its last
/// name. Each folder on the way is opened without following a symlink.
extension LocalFiles {
    /// Runs `body` with a directory descriptor (`AT_FDCWD` for a path that fits) and the name to
    /// pass beside it; the descriptor is closed after. Throws the errno of a folder on the way
    /// that cannot be opened.
    func at<T>(_ rel: String, _ body: (Int32, String) throws -> T) throws -> T {
        let path = real(rel)
        if path.utf8.count < Int(PATH_MAX) { return try body(AT_FDCWD, path) }
        let names = rel.split(separator: "/").map(String.init)
        let dir = try openFolders(names.dropLast(), making: false)
        defer { close(dir) }
        return try body(dir, names.last ?? ".")
    }

    /// `at` for calls that answer a value or nil (a path that cannot be reached answers nil).
    func atOrNil<T>(_ rel: String, _ body: (Int32, String) -> T?) -> T? {
        (try? at(rel, body)) ?? nil
    }

    /// `mkdir -p` of local folder `rel`, a name at a time from the local root (mode 0777 less the
    /// umask, as `mkdir -p` makes them).
    func makeFolders(_ rel: String) throws {
        defer { madeNames() }
        let names = rel.split(separator: "/").map(String.init)
        close(try openFolders(names[...], making: true))
    }

    /// The folder `names` leads to under the local root, opened (`O_PATH`), made where missing
    /// when `making`.
    private func openFolders(_ names: ArraySlice<String>, making: Bool) throws -> Int32 {
        if making { _ = Glibc.mkdir(root, 0o777) }
        var dir = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC)
        guard dir >= 0 else { throw FSError.system(errno, "open \(root)") }
        for name in names {
            var next = openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if next < 0 && errno == ENOENT && making {
                if mkdirat(dir, name, 0o777) != 0 && errno != EEXIST {
                    let e = errno
                    close(dir)
                    throw FSError.system(e, "mkdir \(name)")
                }
                next = openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            }
            let e = errno
            close(dir)
            guard next >= 0 else { throw FSError.system(e, "open \(name)") }
            dir = next
        }
        return dir
    }

    /// A path the xattr calls take for (`dir`, `name`) from `at`: `/proc/self/fd/N/name` for a
    /// folder opened on its own (short, whatever the depth).
    static func xattrPath(_ dir: Int32, _ name: String) -> String {
        dir == AT_FDCWD ? name : "/proc/self/fd/\(dir)/\(name)"
    }

    /// `opendir` of (`dir`, `name`) from `at`.
    static func openDirectory(_ dir: Int32, _ name: String) -> OpaquePointer? {
        let f = openat(dir, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard f >= 0 else { return nil }
        guard let d = fdopendir(f) else { close(f); return nil }
        return d
    }
}

/// <fcntl.h>'s `O_PATH` (Linux, every architecture Swift runs on), which Swift's Glibc module
/// leaves out: a folder opened only to be named relative to, whatever its permission bits.
private let O_PATH: Int32 = 0o10000000
