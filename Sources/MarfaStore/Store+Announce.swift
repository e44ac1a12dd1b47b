import Foundation
import MarfaModel
import Synchronization

/// What a change did to the store, for the mount to refresh: items to read again, items whose
/// bytes changed (the kernel drops their cached pages), edges that appeared or went.
public struct StoreChanges: Sendable {
    public var items: Set<String> = []
    public var content: Set<String> = []
    /// Items whose attributes as the mount shows them (tags, tier, extended attributes) changed,
    /// with or without their bytes: a watcher sees those as IN_ATTRIB (FS-25).
    public var attributes: Set<String> = []
    public var edgesAdded: Set<String> = []
    public var edgesRemoved: [EdgeRecord] = []
    /// Changes applied and changes skipped (older than the local copy, or the local copy has
    /// changes of its own still to send).
    public var applied = 0
    public var skipped = 0
    /// Conflicted copies made of stale local saves (FS-24): (copy, original) ids.
    public var staleSaveCopies: [(copy: String, original: String)] = []
    /// Items whose stale local save merged cleanly with a remote change (FS-24).
    public var staleSaveMerges: Set<String> = []
    /// Folders of the vault's tree a remote made (`folder:` tags kept as local tags: FS-34).
    public var folders: Set<String> = []
    /// Empty folders a remote removed.
    public var foldersRemoved: Set<String> = []
    public init(items: Set<String> = []) { self.items = items }
    public var isEmpty: Bool { items.isEmpty && content.isEmpty && edgesAdded.isEmpty && edgesRemoved.isEmpty && folders.isEmpty && foldersRemoved.isEmpty }
    public mutating func formUnion(_ o: StoreChanges) {
        items.formUnion(o.items); content.formUnion(o.content); attributes.formUnion(o.attributes); edgesAdded.formUnion(o.edgesAdded)
        edgesRemoved += o.edgesRemoved; applied += o.applied; skipped += o.skipped; staleSaveCopies += o.staleSaveCopies; staleSaveMerges.formUnion(o.staleSaveMerges)
        folders.formUnion(o.folders); foldersRemoved.formUnion(o.foldersRemoved)
    }
}

/// How the store tells the filesystem what it changed without being asked by it: what it commits
/// for the sync engine is published to observers (`observe`), at once, on the committing thread;
/// what it changes on its own during a local operation (a stale save merged or copied, FS-24) is
/// announced and taken by the filesystem after that operation (`takeAnnouncements`).
extension Store {
    /// Runs a change made for the sync engine (remote changes applied, answers recorded,
    /// conflicts settled) and, once it is committed, tells the observers.
    func published(_ body: () throws -> StoreChanges) throws -> StoreChanges {
        let c = try body()
        if !c.isEmpty { for f in observers.withLock({ $0 }) { f(c) } }
        return c
    }

    /// Subscribes to the changes the store commits for the sync engine: the filesystem re-reads
    /// what they touched and tells the kernel (FS-19). Called on the committing thread, which
    /// holds no lock of the filesystem's.
    public func observe(_ f: @escaping @Sendable (StoreChanges) -> Void) { observers.withLock { $0.append(f) } }

    /// Records changes the store made on its own for the filesystem.
    func announce(_ c: StoreChanges) { announced.withLock { $0.formUnion(c) } }

    /// The changes announced since the last call.
    public func takeAnnouncements() -> StoreChanges {
        announced.withLock { pending in
            defer { pending = StoreChanges() }
            return pending
        }
    }

    // MARK: blobs held against the unused-blob sweep

    /// A blob copied into the cache and not yet named by its item (`cacheSpool`): the sweep
    /// (`dropBlobIfUnused`) leaves it alone until `releaseBlob`.
    public func holdBlob(_ h: String) { heldBlobs.withLock { $0[h, default: 0] += 1 } }
    public func releaseBlob(_ h: String) { heldBlobs.withLock { if let n = $0[h] { $0[h] = n > 1 ? n - 1 : nil } } }
    func isHeld(_ h: String) -> Bool { heldBlobs.withLock { $0[h] != nil } }
}
