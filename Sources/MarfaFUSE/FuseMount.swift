import CFuse
import Foundation
import Logging
import MarfaFS

/// Serves a `FileSystem` through libfuse's low-level API. The only module that imports libfuse:
/// it translates requests and replies, runs the session loop on threads of its own, and sends
/// kernel cache invalidations from a dedicated thread (never from inside a request).
public final class FuseMount: @unchecked Sendable {
    let fs: FileSystem
    let log: Logger
    public let mountpoint: String
    var session: OpaquePointer?
    var noOpen = false
    let notifier: Notifier
    let listings = ListingCache()

    public init(fs: FileSystem, mountpoint: String, logger: Logger) {
        self.fs = fs
        self.mountpoint = mountpoint
        self.log = logger
        self.notifier = Notifier(logger: logger)
    }

    /// Mounts; returns once the kernel has the mount.
    public func mount() throws {
        var args = fuse_args(argc: 0, argv: nil, allocated: 0)
        for a in ["marfafs", "-o", "default_permissions,fsname=marfafs,subtype=marfafs"] { fuse_opt_add_arg(&args, a) }
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
        notifier.start()
        fs.onInvalidate = { [notifier] inv in notifier.enqueue(inv) }
        fs.startSettling()
    }

    /// Runs the request loop until unmounted or `stop()`; then releases the session.
    public func run(threads: UInt32 = 8) {
        guard let se = session else { return }
        let rc = marfafs_session_loop_mt(se, threads)
        if rc != 0 { log.warning("fuse session loop ended", metadata: ["rc": "\(rc)"]) }
        fs.stopSettling()
        notifier.stop()
        fuse_session_unmount(se)
        fuse_session_destroy(se)
        session = nil
    }

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

/// Sends kernel invalidations in order, from its own thread.
final class Notifier: @unchecked Sendable {
    let cond = NSCondition()
    var queue: [Invalidation] = []
    var running = false
    var session: OpaquePointer?
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
        cond.lock(); queue.append(contentsOf: inv); cond.signal(); cond.unlock()
    }

    private func loop() {
        while true {
            cond.lock()
            while queue.isEmpty && running { cond.wait() }
            if !running { cond.unlock(); return }
            let batch = queue; queue.removeAll()
            cond.unlock()
            guard let se = session else { continue }
            var seen = Set<Invalidation>()
            for inv in batch where seen.insert(inv).inserted {
                switch inv {
                case .entry(let parent, let name):
                    _ = name.withCString { fuse_lowlevel_notify_inval_entry(se, parent, $0, name.utf8.count) }
                case .inode(let ino):
                    _ = fuse_lowlevel_notify_inval_inode(se, ino, 0, 0)
                }
            }
        }
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
