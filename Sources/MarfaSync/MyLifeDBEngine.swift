import Foundation
import Logging
import MarfaModel
import MarfaStore
import Synchronization

/// The sync engine of a mount that follows a MyLifeDB server (FS-34): the shared `QueueDrainer`
/// with `MyLifeDBWriter`, and a feed of the server's changes (`MyLifeDBFeed`). It finds out at
/// start which routes the server has.
public final class MyLifeDBEngine: SyncRemote {
    public let status: SyncStatus
    let store: Store
    let keyed: KeyedClient
    let log: Logger
    let drainer: QueueDrainer
    let feed: MyLifeDBFeed
    let routes = RouteChoice()
    let tasks = Mutex<[Task<Void, Never>]>([])
    let writer: MyLifeDBWriter
    let isLocalOnly: @Sendable (String) -> Bool

    /// `baseURL`: `http(s)://HOST:PORT` (the `mylifedb+` of the mount's `--server` taken off).
    public init(store: Store, baseURL: String, password: Credential, log: Logger, device: String,
                rescan: Double = 60, isLocalOnly: @escaping @Sendable (String) -> Bool = { _ in false },
                loadCredential: @escaping @Sendable () throws -> Credential) {
        let status = SyncStatus(server: "mylifedb+" + baseURL)
        let keyed = KeyedClient(baseURL: baseURL, credential: password, scheme: .basic, load: loadCredential)
        self.status = status; self.store = store; self.keyed = keyed; self.log = log
        let routes = routes
        let api: @Sendable () -> MyLifeDBAPI = { MyLifeDBAPI(routes: routes.current) }
        drainer = QueueDrainer(store: store, client: keyed, status: status, log: log,
                               writer: MyLifeDBWriter(store: store, status: status, api: api, device: device, log: log), device: device)
        self.isLocalOnly = isLocalOnly
        writer = MyLifeDBWriter(store: store, status: status, api: api, device: device, log: log)
        feed = MyLifeDBFeed(store: store, client: keyed, status: status, log: log, api: api, rescan: rescan, isLocalOnly: isLocalOnly)
    }

    public func start() {
        let d = drainer, f = feed
        tasks.withLock {
            $0 = [Task { [self] in
                await self.discover()
                // The queue waits for the first sync: a local edit of a file the server changed
                // meanwhile is then compared with what the server has.
                await withTaskGroup(of: Void.self) { g in
                    g.addTask { await f.run() }
                    g.addTask {
                        while !Task.isCancelled && !f.firstSyncDone { try? await Task.sleep(for: .milliseconds(100)) }
                        await d.run()
                    }
                    g.addTask {
                        while !Task.isCancelled && !f.firstSyncDone { try? await Task.sleep(for: .milliseconds(100)) }
                        while !Task.isCancelled {
                            await self.syncFolders()
                            try? await Task.sleep(for: .milliseconds(500))
                        }
                    }
                }
            }]
        }
    }

    public func stop() {
        tasks.withLock { for t in $0 { t.cancel() }; $0 = [] }
        let keyed = keyed
        Task { await keyed.shutdown() }
    }

    /// Which routes the server has (`/api/data/root`, else `/api/library/root`), and a session if
    /// the server does not take the password as HTTP Basic. Retries until the server answers.
    func discover() async {
        var attempt = 0
        while !Task.isCancelled {
            let client = keyed.client
            do {
                // (A server that refuses the password as HTTP Basic is logged into: `WireClient.send`.)
                let r = try await client.send(MyLifeDBAPI.root(.current))
                if r.status == 404 {
                    let old = try await client.send(MyLifeDBAPI.root(.legacy))
                    guard old.status == 200 else { throw WireFailure.of(old) }
                    routes.set(.legacy)
                } else if !(200..<300).contains(r.status) {
                    throw WireFailure.of(r)
                }
                log.info("MyLifeDB server found", metadata: ["routes": "\(routes.current)"])
                return
            } catch let f as WireFailure {
                if case .unauthorized = f {
                    status.update { $0.connection = .unauthorized; $0.stream = .unauthorized; $0.lastError = "\(f.description) — the password is refused; the mount works offline until a valid one is configured" }
                    await keyed.waitForNewKey(refused: client)
                    continue
                }
                status.update { $0.connection = .offline; $0.stream = .offline; $0.lastError = f.description }
            } catch {
                status.update { $0.connection = .offline; $0.stream = .offline; $0.lastError = "\(error)" }
            }
            attempt += 1
            var rng = SystemRandomNumberGenerator()
            try? await Task.sleep(for: .milliseconds(Int64(Backoff().delay(attempt: attempt, retryAfter: nil, using: &rng) * 1000)))
        }
    }

    /// Folders made or removed here (`mkdir`, `rmdir` in the vault's tree) are made or removed
    /// there. A folder is removed there only once nothing is left to send and the server's own
    /// listing of it is empty: a folder holding a file this mount has not seen yet stays.
    func syncFolders() async {
        let client = keyed.client, api = MyLifeDBAPI(routes: routes.current)
        do {
            let here = try store.treeFolders().filter { !isLocalOnly($0) }
            let there = try store.knownFolders()
            for f in here.subtracting(there).sorted(by: { $0.count < $1.count }) {
                try await writer.ensureFolder(f, client: client, api: api)
                status.record("mylifedb.folder_made", ["path": .string(f)])
            }
            let gone = there.subtracting(here)
            guard !gone.isEmpty, try store.unsentCount() == 0 else { return }
            for f in gone.sorted(by: { $0.count > $1.count }) {
                let r = try await client.send(api.tree(f))
                if r.status == 404 { try store.setKnownFolders(adding: [], removing: [f]); continue }
                guard (200..<300).contains(r.status) else { throw WireFailure.of(r) }
                let listed = MyLifeDBAPI.children(r.json, of: f)
                guard listed.files.isEmpty && listed.folders.isEmpty else { continue }
                try await client.call(api.delete(f))
                try store.setKnownFolders(adding: [], removing: [f])
                status.record("mylifedb.folder_removed", ["path": .string(f)])
            }
        } catch {
            log.debug("making folders on the server failed; tried again", metadata: ["error": "\(error)"])
        }
    }

    public func fetchVersions(_ itemID: String, timeout: Double) -> [JSONValue]? { nil }

    /// A preview image from the server's archive (`GET /sqlar/<name>`), blocking the caller at most
    /// `timeout` seconds; nil when it cannot be had.
    public func fetchPreview(_ name: String, timeout: Double) -> [UInt8]? {
        let client = keyed.client
        return waitFor(timeout: timeout) {
            guard let r = try? await client.send(MyLifeDBAPI.preview(name), timeout: .seconds(Int64(timeout))), r.status == 200 else { return nil }
            return r.body
        }
    }

    /// A large file's bytes, fetched when read (`GET /raw/<path>`, in ranges of 8 MiB, so a dropped
    /// connection costs one range), into the store's cache; blocks the caller at most `timeout` s.
    public func fetchBlob(_ hash: String, timeout: Double) -> Bool {
        guard let known = try? store.knownFile(blob: hash) else { return false }
        let store = store, client = keyed.client, status = status, log = log, api = MyLifeDBAPI(routes: routes.current)
        return waitFor(timeout: timeout) { () -> Bool? in
            do {
                status.transferStarted("download", hash: hash, item: known.itemID, total: known.size, restarted: false)
                var bytes: [UInt8] = []
                bytes.reserveCapacity(Int(known.size))
                let piece: Int64 = 8 << 20
                var tries = 0
                while Int64(bytes.count) < known.size || known.size == 0 {
                    let from = Int64(bytes.count)
                    let resp: WireResponse
                    do {
                        resp = try await client.send(api.raw(known.path, range: from...(from + piece - 1)), maxBody: Int(max(piece, known.size)) + 1, timeout: .seconds(Int64(timeout)))
                    } catch where tries < 3 { tries += 1; continue }
                    if resp.status == 200 { bytes = resp.body; break }
                    guard resp.status == 206 else { throw WireFailure.of(resp) }
                    if resp.body.isEmpty { break }
                    bytes += resp.body
                    status.transferProgress(hash: hash, done: Int64(bytes.count))
                    tries = 0
                }
                try store.cacheBlob(bytes, hash: hash)
                status.transferEnded(hash: hash, error: nil)
                return true
            } catch {
                status.transferEnded(hash: hash, error: "\(error)")
                log.error("fetching a file from the server failed", metadata: ["path": "\(known.path)", "error": "\(error)"])
                return nil
            }
        } ?? false
    }
}

/// Which routes the server was found to have.
final class RouteChoice: Sendable {
    let value = Mutex(MyLifeDBAPI.Routes.current)
    var current: MyLifeDBAPI.Routes { value.withLock { $0 } }
    func set(_ r: MyLifeDBAPI.Routes) { value.withLock { $0 = r } }
}
