import Foundation
import Logging
import MarfaModel
import MarfaStore
import Synchronization

/// What the mount asks of its remote, whatever its kind (FS-34): the store, the queue, the
/// filesystem, merges and conflicted copies are shared; a kind of remote brings how it is sent
/// to (a `RemoteWriter` for the shared `QueueDrainer`), how it is followed, and how a file's bytes
/// and earlier versions are fetched. `SyncEngine` is a Marfa server's; `MyLifeDBEngine` a
/// MyLifeDB server's.
public protocol SyncRemote: AnyObject, Sendable {
    var status: SyncStatus { get }
    func start()
    func stop()
    /// Fetches blob `hash` into the store's cache, blocking the caller for at most `timeout` s.
    func fetchBlob(_ hash: String, timeout: Double) -> Bool
    /// The versions the remote keeps of an item (nil: it cannot say).
    func fetchVersions(_ itemID: String, timeout: Double) -> [JSONValue]?
}

/// The sync engine of a mount: the queue drainer (ours to the server), the remote feed (the
/// server's to us), the empty folders' markers (FS-32) and the blob fetcher (FS-11), sharing one status. Async, off the FUSE threads.
public final class SyncEngine: SyncRemote {
    public let status: SyncStatus
    let drainer: QueueDrainer
    let feed: RemoteFeed
    let folders: FolderMarkers
    let store: Store
    /// One client for all three, under the current key.
    let client: KeyedClient
    let log: Logger
    let tasks = Mutex<[Task<Void, Never>]>([])

    public init(store: Store, baseURL: String, credential: Credential, log: Logger, conflictMode: ConflictMode = .merge,
                device: String = ProcessInfo.processInfo.hostName, silence: Double = 60, queueBackoff: Backoff = Backoff(),
                isLocalOnly: @escaping @Sendable (String) -> Bool = { _ in false },
                loadCredential: @escaping @Sendable () throws -> Credential) {
        let status = SyncStatus(server: baseURL)
        let client = KeyedClient(baseURL: baseURL, credential: credential, load: loadCredential)
        self.status = status; self.store = store; self.client = client; self.log = log
        drainer = QueueDrainer(store: store, client: client, status: status, log: log,
                               conflictMode: conflictMode, device: device, backoff: queueBackoff)
        feed = RemoteFeed(store: store, client: client, status: status, log: log, silence: silence)
        folders = FolderMarkers(store: store, client: client, status: status, log: log, isLocalOnly: isLocalOnly)
    }

    public func start() {
        let d = drainer, f = feed, m = folders
        tasks.withLock { $0 = [Task { await d.run() }, Task { await f.run() }, Task { await m.run() }] }
    }

    public func stop() {
        tasks.withLock { for t in $0 { t.cancel() }; $0 = [] }
        let client = client
        Task { await client.shutdown() }
    }

    /// The versions the server keeps of an item (`GET /items/{id}/versions`: snapshots of its
    /// properties before the current one), blocking the caller for at most `timeout` seconds;
    /// nil when the server cannot say (offline, refused).
    public func fetchVersions(_ itemID: String, timeout: Double = 5) -> [JSONValue]? {
        let client = client.client
        return waitFor(timeout: timeout) {
            guard let resp = try? await client.call(WireRequest(method: "GET", path: "/items/\(WireRequest.segment(itemID))/versions")),
                  case .array(let list)? = resp.json["versions"] else { return nil }
            return list
        }
    }

    /// Fetches a blob into the store's cache, blocking the caller (a FUSE thread reading a blob
    /// not cached yet) for at most `timeout` seconds.
    public func fetchBlob(_ hash: String, timeout: Double = 120) -> Bool {
        guard BlobHash.isValid(hash) else { return false }
        let store = store, client = client.client, status = status, log = log
        return waitFor(timeout: timeout) { () -> Bool? in
            do {
                let item = (try? store.blobItem(hash: hash)) ?? nil
                status.transferStarted("download", hash: hash, item: item?.id, total: item?.size ?? 0, restarted: false)
                let resp = try await client.send(WireRequest(method: "GET", path: "/blobs/\(WireRequest.segment(hash))"),
                                                 maxBody: Int(Store.maxBlobBytes), timeout: .seconds(Int64(timeout)),
                                                 progress: { status.transferProgress(hash: hash, done: $0) })
                guard resp.status == 200 else { throw WireFailure.of(resp) }
                try store.cacheBlob(resp.body, hash: hash)
                status.transferEnded(hash: hash, error: nil)
                return true
            } catch {
                status.transferEnded(hash: hash, error: "\(error)")
                log.error("fetching a blob failed", metadata: ["blob": "\(hash)", "error": "\(error)"])
                return nil
            }
        } ?? false
    }
}
