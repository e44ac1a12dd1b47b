import CFuse
import Foundation
import Logging
import MarfaFS

/// Serves a `FileSystem` through libfuse's low-level API. The only module that imports libfuse:
/// it translates requests and replies, runs the session loop on threads of its own, and sends
/// kernel cache invalidations from a dedicated thread, except one kind: a request that rewrites
/// another file's bytes (a tag taken off a note rewrites its front matter) drops that file's
/// cached pages before it replies (`Notifier.send`).
public final class FuseMount: @unchecked Sendable {
    let fs: FileSystem
    let log: Logger
    public let mountpoint: String
    var session: OpaquePointer?
    var noOpen = false
    let notifier: Notifier
    let listings = ListingCache()
    /// The requests answered, by operation (`.marfafs/requests`).
    let requests = RequestCounts()

    /// Other users may use the mount (`allow_other`); the kernel checks modes either way.
    let allowOther: Bool
    /// The kernel refuses every change (`ro`: EROFS).
    let readOnly: Bool
    /// What mount(8), `findmnt` and `df` show as the mount's source: the store.
    let source: String

    public init(fs: FileSystem, mountpoint: String, logger: Logger, allowOther: Bool = false, readOnly: Bool = false, source: String = "marfafs") {
        self.fs = fs
        self.allowOther = allowOther
        self.readOnly = readOnly
        self.source = source
        self.mountpoint = mountpoint
        self.log = logger
        self.notifier = Notifier(logger: logger)
    }

    /// Mounts; returns once the kernel has the mount.
    public func mount() throws {
        var args = fuse_args(argc: 0, argv: nil, allocated: 0)
        // A comma or backslash in the store's path is escaped for libfuse's option parser.
        let fsname = source.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ",", with: "\\,")
        let options = "default_permissions,fsname=\(fsname),subtype=marfafs" + (allowOther ? ",allow_other" : "") + (readOnly ? ",ro" : "")
        for a in ["marfafs", "-o", options] { fuse_opt_add_arg(&args, a) }
        defer { fuse_opt_free_args(&args) }
        var ops = makeOperations()
        let me = Unmanaged.passRetained(self).toOpaque()
        guard let se = fuse_session_new(&args, &ops, MemoryLayout<fuse_lowlevel_ops>.size, me) else {
            throw MountError.failed("fuse_session_new failed")
        }
        guard fuse_session_mount(se, mountpoint) == 0 else {
            fuse_session_destroy(se)
            throw MountError.failed("cannot mount on \(mountpoint) (is /dev/fuse usable and the directory empty?)")
        }
        session = se
        notifier.session = se
        notifier.root = mountpoint
        notifier.fs = fs
        notifier.start()
        fs.onInvalidate = { [notifier] inv in notifier.send(inv) }
        fs.requestCounts = { [requests] in requests.text() }
        fs.startSettling()
    }

    /// Called once the kernel has let go of the mount (`umount`, `fusermount3 -u`, `stop()`), before
    /// what is still staged or settling is committed.
    public var onUnmounted: (() -> Void)?

    /// Runs the request loop until unmounted or `stop()`; then releases the session.
    public func run(threads: UInt32 = 8) {
        guard let se = session else { return }
        let rc = marfafs_session_loop(se, threads, FuseMount.spinNs)
        if rc != 0 { log.warning("fuse session loop ended", metadata: ["rc": "\(rc)"]) }
        onUnmounted?()
        fs.stopSettling()
        notifier.stop()
        fuse_session_unmount(se)
        fuse_session_destroy(se)
        session = nil
    }

    /// How long a worker waiting for the next request looks for it before it sleeps:
    /// `MARFAFS_SPIN_US` (0: never), else 100 µs with two CPUs or more to run on and never with
    /// one (a worker looking there only holds up the program whose request it waits for).
    static let spinNs: Int = {
        if let us = ProcessInfo.processInfo.environment["MARFAFS_SPIN_US"].flatMap(Int.init) { return max(0, us) * 1000 }
        return marfafs_cpus_allowed() > 1 ? 100_000 : 0
    }()

    /// Asks the loop to end and wakes a worker so it notices.
    public func stop() {
        guard let se = session else { return }
        fuse_session_exit(se)
        // A name never seen before is not in the kernel's cache, so this lookup reaches a worker,
        // which then sees the exit flag.
        var st = stat()
        _ = lstat(mountpoint + "/.marfafs/wake-\(UInt64.random(in: 0...UInt64.max))", &st)
    }

    public enum MountError: Error, CustomStringConvertible {
        case failed(String)
        public var description: String { if case .failed(let m) = self { return m }; return "" }
    }
}

/// Sends kernel invalidations in order, from its own thread; those a request must send before it
/// replies, from the request's thread (`send`).
final class Notifier: @unchecked Sendable {
    let cond = NSCondition()
    /// How long the thread waits before each batch: `MARFAFS_NOTIFY_DELAY_MS`, a loaded machine
    /// made on purpose (tests); 0 otherwise.
    let delay: useconds_t = ProcessInfo.processInfo.environment["MARFAFS_NOTIFY_DELAY_MS"].flatMap(UInt32.init).map { $0 * 1000 } ?? 0
    var queue: [Invalidation] = []
    var running = false
    var session: OpaquePointer?
    /// The mount point, where changes are replayed for watchers (FS-25).
    var root = ""
    weak var fs: FileSystem?
    let log: Logger
    var thread: Thread?

    init(logger: Logger) { log = logger }

    func start() {
        running = true
        let t = Thread { [self] in loop() }
        t.name = "marfafs-notify"
        thread = t
        t.start()
    }

    func stop() {
        cond.lock(); running = false; cond.signal(); cond.unlock()
    }

    func enqueue(_ inv: [Invalidation]) {
        let inv = inv.filter(concernsKernel)
        guard !inv.isEmpty else { return }
        cond.lock(); queue.append(contentsOf: inv); cond.signal(); cond.unlock()
    }

    /// Whether the kernel may keep something an invalidation drops: an inode's attributes, pages
    /// or symlink target, or a name in a directory, only while it holds that inode or directory
    /// (`FileSystem.kernelHolds`: counted from the replies that hand inodes out and the forgets).
    /// A copy into the tree changes `types/<type>/` and `tags/folder:…/` at every file, which no
    /// one may have looked up: nothing is sent for them then.
    func concernsKernel(_ i: Invalidation) -> Bool {
        switch i {
        case .inode(let ino), .target(let ino), .entry(let ino, _):
            return fs?.kernelHolds(ino) != false
        case .replay: return true
        }
    }

    /// Invalidations of a change just made. Inside a request whose system call holds no file's
    /// pages (`RequestScope`: a name made, removed or renamed, an attribute set or removed), the
    /// cached pages and attributes of the inodes it changed are dropped here, before the reply:
    /// - the files it rewrote: a tag put on or taken off a note through `tags/` or
    ///   `user.marfa.tags` rewrites its front matter, and the next `read(2)` of any program sees
    ///   the new text however far behind the thread is;
    /// - the other directories whose listings it changed: `rm -r vault/f` empties `tags/`, and a
    ///   restore by `mv` from `trash/` fills `vault/`; the next `ls` lists them anew (the kernel
    ///   keeps a listing, `cache_readdir`, and only notices the changes made through the
    ///   directory itself);
    /// - the targets the kernel keeps of the symlinks naming an item it moved
    ///   (`Invalidation.target`: a `readlink` right after `mv` shows the new path).
    /// Safe from here: the call takes none of the inode's locks, only its pages' locks (a file's,
    /// which a `read` holds while its request waits for a worker; a listing's, which the kernel
    /// holds only to copy entries in or out), and the core's lock is not held now. A `write(2)` or
    /// `truncate(2)` holds its file's pages: those requests are outside the scope. Names go to the
    /// thread, in order: a name's invalidation waits for the directory lock the request's own
    /// system call holds.
    func send(_ inv: [Invalidation]) {
        guard RequestScope.isInside, let se = session else { return enqueue(inv) }
        var later: [Invalidation] = []
        later.reserveCapacity(inv.count)
        var sent = Set<UInt64>()
        for i in inv {
            switch i {
            case .inode(let ino), .target(let ino):
                if concernsKernel(i), sent.insert(ino).inserted { _ = fuse_lowlevel_notify_inval_inode(se, ino, 0, 0) }
            default:
                later.append(i)
            }
        }
        enqueue(later)
    }

    private func loop() {
        // This thread's requests are replays: the filesystem answers them without changing anything.
        fs?.replayThread = Int32(marfafs_gettid())
        while true {
            cond.lock()
            while queue.isEmpty && running { cond.wait() }
            if !running { cond.unlock(); return }
            let batch = queue; queue.removeAll()
            cond.unlock()
            if delay > 0 { usleep(delay) }
            guard let se = session else { continue }
            var seen = Set<Invalidation>()
            for inv in batch where seen.insert(inv).inserted {
                switch inv {
                case .entry(let parent, let name):
                    _ = name.withCString { fuse_lowlevel_notify_inval_entry(se, parent, $0, name.utf8.count) }
                case .inode(let ino), .target(let ino):
                    _ = fuse_lowlevel_notify_inval_inode(se, ino, 0, 0)
                case .replay(let r):
                    fs?.replaying(r)
                    switch r.op {
                    case .remove, .rename:
                        // Its path walks through names a program may have looked up since the
                        // change (a watcher reacting to the last replay), leaving a negative entry
                        // the kernel would answer from (ENOENT): they are dropped before the call,
                        // and again before each of two more tries, the last after 10 ms (a
                        // watcher's burst of lookups over). The tries again also drop the folders
                        // on its way that a later change removed (`FileSystem.goneOnTheWay`): one
                        // may have been looked up and found missing since (the lookup answers it
                        // to this thread, `Replay.walk`).
                        for attempt in 0..<3 {
                            if attempt == 2 { usleep(10_000) }
                            let removedSince = attempt > 0 ? fs?.goneOnTheWay(r) ?? [] : []
                            for at in r.gone.map(\.at) + removedSince + [r.at] {
                                _ = at.name.withCString { fuse_lowlevel_notify_inval_entry(se, at.parent, $0, at.name.utf8.count) }
                            }
                            if replay(r, last: attempt == 2) { break }
                        }
                    case .touch, .create:
                        replay(r)
                    }
                    fs?.replaying(nil)
                }
            }
        }
    }
}

extension Notifier {
    /// Makes the kernel raise the inotify events of a change already applied (FS-25), with the
    /// system call that would have made it: a file opened for writing, truncated to its own size
    /// and closed (IN_MODIFY, IN_CLOSE_WRITE); its own times set again (IN_ATTRIB); `mknod`,
    /// `mkdir`, `symlink` (IN_CREATE); `unlink`, `rmdir` (IN_DELETE); `rename` (IN_MOVED_FROM,
    /// IN_MOVED_TO). The requests this makes reach the daemon from this thread and change nothing.
    /// Returns whether the call succeeded; `last`: a failure is logged.
    @discardableResult
    func replay(_ r: Replay, last: Bool = true) -> Bool {
        let path = root + "/" + r.at.path
        var rc: Int32 = 0
        defer {
            // A name changed again meanwhile: the later replay tells the watchers.
            if rc != 0 && last { log.notice("a change was not replayed for watchers", metadata: ["path": "\(r.at.path)", "op": "\(r.op)", "errno": "\(errno)"]) }
        }
        switch r.op {
        case .touch(modified: true):
            let fd = open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else { return false }
            var st = stat()
            if fstat(fd, &st) == 0 { _ = ftruncate(fd, st.st_size) }
            close(fd)
        case .touch(modified: false):
            var st = stat()
            guard lstat(path, &st) == 0 else { return false }
            // Both times set: the kernel reports a utime (IN_ATTRIB); the mtime alone is IN_MODIFY.
            var times = [st.st_atim, st.st_mtim]
            _ = utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW)
        case .create(.file):
            rc = mknod(path, S_IFREG | 0o644, 0)
        case .create(.directory):
            rc = mkdir(path, 0o755)
        case .create(.symlink):
            // The target is not used: the entry exists already.
            rc = symlink(".", path)
        case .remove(let ghost):
            rc = ghost.kind == .directory ? rmdir(path) : unlink(path)
        case .rename(let to, _):
            rc = rename(path, root + "/" + to.path)
        }
        return rc == 0
    }
}

/// Whether a worker thread is serving a request whose system call holds no file's pages and may
/// rewrite files' bytes (a name made, removed or renamed; an attribute set or removed). Read by
/// `Notifier.send`.
enum RequestScope {
    private static let key: pthread_key_t = {
        var k = pthread_key_t()
        pthread_key_create(&k, nil)
        return k
    }()

    static var isInside: Bool { pthread_getspecific(key) != nil }

    static func within<T>(_ body: () throws -> T) rethrows -> T {
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: 1))
        defer { pthread_setspecific(key, nil) }
        return try body()
    }
}

/// A directory's entries between readdir calls of one listing (offset = index + 1), so a large
/// directory is listed once per pass, not once per reply buffer.
final class ListingCache: @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [UInt64: [DirEntry]] = [:]

    func entries(_ ino: UInt64, offset: Int, load: () throws -> [DirEntry]) rethrows -> [DirEntry] {
        if offset > 0 {
            lock.lock(); let cached = entries[ino]; lock.unlock()
            if let cached { return cached }
        }
        let fresh = try load()
        lock.lock(); entries[ino] = fresh; lock.unlock()
        return fresh
    }

    func done(_ ino: UInt64) { lock.lock(); entries.removeValue(forKey: ino); lock.unlock() }
}
