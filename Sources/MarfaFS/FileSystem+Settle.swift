import Foundation
import MarfaModel
import MarfaStore

/// Settling (FS-14): writes commit their bytes at once; a file whose last write is older than
/// `settleWindow` is parsed and queued by a background thread, in batches. Any operation whose
/// queued mutation must follow the file's create or update settles everything first.
extension FileSystem {
    /// Records a lean write in the catalog: size and time change, names do not.
    func wroteUnsettled(_ r: Int64, size: Int64, mtimeNs: Int64) {
        guard var s = catalog.items[r] else { return }
        s.size = size; s.mtimeNs = mtimeNs
        if TypeSchema.isBlobType(s.type) { s.blobRef = nil }
        catalog.items[r] = s
        settler.noteWrite()
    }

    /// Settles every unsettled file now and brings the catalog up to date. Call with the lock held
    /// (the invalidations go to the notifier thread, which never takes the lock).
    func settleNow() throws {
        guard settler.mayHaveWork else { return }
        let rows = try wrap { try store.settle() }
        settler.settledAll()
        var inv: [Invalidation] = []
        for r in rows { inv += try refreshItem(r) }
        notify(inv)
    }

    /// Starts the background settler; `stop` (at unmount) settles what is left.
    public func startSettling() {
        settler.start { [weak self] in self?.settleQuietFiles() ?? false }
    }

    public func stopSettling() {
        settler.stop()
        do {
            try locked { try settleNow() }
        } catch {
            log.error("settling at unmount failed; the next mount settles", metadata: ["error": "\(error)"])
        }
    }

    /// One batch of files quiet for `settleWindow`; true if more may be waiting.
    func settleQuietFiles() -> Bool {
        let before = Int64((Date().timeIntervalSince1970 - settler.window) * 1e9)
        let batch = 200
        do {
            let inv: [Invalidation] = try locked {
                let rows = try wrap { try store.settle(writtenBefore: before, limit: batch) }
                var inv: [Invalidation] = []
                for r in rows { inv += try refreshItem(r) }
                if rows.count < batch, try !store.hasUnsettled() { settler.settledAll() }
                return inv
            }
            notify(inv)
            return inv.count >= batch
        } catch {
            log.error("settling failed; retried on the next pass", metadata: ["error": "\(error)"])
            return false
        }
    }
}

/// The background thread that settles quiet files.
final class Settler: @unchecked Sendable {
    /// Seconds a file must be left alone before it settles.
    let window: Double
    private let cond = NSCondition()
    private var dirty = true
    private var running = false
    private var thread: Thread?

    init(window: Double) { self.window = window }

    var mayHaveWork: Bool { cond.lock(); defer { cond.unlock() }; return dirty }

    func noteWrite() {
        cond.lock(); dirty = true; cond.signal(); cond.unlock()
    }

    func settledAll() {
        cond.lock(); dirty = false; cond.unlock()
    }

    func start(_ pass: @escaping @Sendable () -> Bool) {
        cond.lock(); running = true; cond.unlock()
        let t = Thread { [self] in
            while true {
                cond.lock()
                while running && !dirty { cond.wait() }
                let go = running
                cond.unlock()
                guard go else { return }
                // Wait out the window, then settle what has gone quiet.
                Thread.sleep(forTimeInterval: window / 2)
                while pass() {}
            }
        }
        t.name = "marfafs-settle"
        thread = t
        t.start()
    }

    func stop() {
        cond.lock(); running = false; cond.broadcast(); cond.unlock()
    }
}
