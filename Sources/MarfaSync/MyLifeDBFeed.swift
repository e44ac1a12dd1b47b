import Foundation
import Logging
import MarfaModel
import MarfaStore
import Synchronization

/// Follows a MyLifeDB server (FS-34). Its event stream says only that something at a path changed
/// (`library-changed`, no ids, nothing to resume from), so every change is found by reading the
/// tree again and comparing it with what the store knows (`reconcile`): a file whose size or time
/// differs is asked for its hash, and fetched if that differs too. A file that disappears from one
/// place while a file of the same hash appears in another moved (the item keeps its inode). The
/// whole tree is read at the first sync, on every (re)connection of the stream (what was missed
/// while it was down), and every `rescan` seconds (a server that makes no event for some writes,
/// as the legacy routes do for `PUT /raw`); an event reads again the folder it names.
///
/// Lock order: none held across an await; reconciles run one at a time (`running`).
actor MyLifeDBFeed {
    let store: Store
    let keyed: KeyedClient
    let status: SyncStatus
    let log: Logger
    let api: @Sendable () -> MyLifeDBAPI
    let rescan: Double
    /// Seconds of silence after which the stream counts as lost (the server says something every 30 s).
    let silence: Double = 75
    /// Paths the mount keeps to itself (`.git/`, FS-32): never taken from the server.
    let isLocalOnly: @Sendable (String) -> Bool
    nonisolated let firstSync = FirstSyncFlag()
    nonisolated var firstSyncDone: Bool { firstSync.done }
    var pending: Set<String> = []
    var running = false
    var lastHeard = Date()
    /// Whether the tree was read since the stream (re)connected: at its `connected` frame, at its
    /// first frame of any kind from a server that sends no `connected`, or 3 s after it opened.
    var readSinceConnect = false
    /// `library-changed` events heard so far: a reading during which one came may have read one
    /// folder before a change and another after it.
    var eventsHeard = 0
    /// Readings in a row that put their removals off (`putsOffRemovals`).
    var removalsPutOff = 0
    /// Files larger than this (other than Markdown) are fetched when first read.
    static let eagerBytes: Int64 = 1 << 20

    init(store: Store, client: KeyedClient, status: SyncStatus, log: Logger, api: @escaping @Sendable () -> MyLifeDBAPI, rescan: Double,
         isLocalOnly: @escaping @Sendable (String) -> Bool = { _ in false }) {
        self.store = store; self.keyed = client; self.status = status; self.log = log; self.api = api; self.rescan = rescan
        self.isLocalOnly = isLocalOnly
    }

    func run() async {
        let rescanTask = Task { [rescan] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(rescan))
                if Task.isCancelled { return }
                await self.request("")
            }
        }
        defer { rescanTask.cancel() }
        var attempt = 0
        var eventsPath = api().eventsPath
        while !Task.isCancelled {
            let client = keyed.client
            status.update { $0.stream = .connecting }
            let stream = client.eventBatches(lastEventID: nil, path: eventsPath)
            lastHeard = Date()
            readSinceConnect = false
            let opened = Date()
            let ended = StreamEnd()
            let reader = Task {
                do {
                    for try await batch in stream { await self.heard(batch) }
                    ended.set(nil)
                } catch { ended.set(error) }
            }
            // The stream is read beside this loop, which judges its silence.
            var failure: Error?
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(500))
                if let e = ended.value { failure = e.error; break }
                if !readSinceConnect, Date().timeIntervalSince(opened) > 3 {
                    readSinceConnect = true
                    Task { await self.request("") }
                }
                if Date().timeIntervalSince(lastHeard) > silence { reader.cancel(); failure = WireFailure.network("no word from the server for \(Int(silence)) s"); break }
                if status.snapshot.stream == .live { attempt = 0 }
            }
            reader.cancel()
            if Task.isCancelled { return }
            if case .refused(404, _, _)? = failure as? WireFailure, eventsPath != "/api/notifications/stream" {
                eventsPath = "/api/notifications/stream"
                continue
            }
            if case .unauthorized? = failure as? WireFailure {
                status.update { $0.stream = .unauthorized }
                await keyed.waitForNewKey(refused: client)
                continue
            }
            status.update { $0.stream = .offline; if let failure { $0.lastError = "\(failure)" } }
            attempt += 1
            var rng = SystemRandomNumberGenerator()
            try? await Task.sleep(for: .milliseconds(Int64(Backoff().delay(attempt: attempt, retryAfter: nil, using: &rng) * 1000)))
        }
    }

    /// What one read of the stream brought.
    func heard(_ batch: [SSEItem]) async {
        lastHeard = Date()
        var scopes: Set<String> = []
        if status.snapshot.stream != .live { status.update { $0.stream = .live } }
        if !readSinceConnect {
            // A (re)connection: whatever was missed is found by reading the whole tree. (The
            // server is back: the queue need not wait out its backoff.)
            readSinceConnect = true
            scopes.insert("")
            status.update { $0.feedAnswers += 1 }
        }
        for item in batch {
            guard case .event(let e) = item, let o = (try? JSONParser.parse(e.data))?.objectValue else { continue }
            switch o["type"]?.stringValue {
            case "connected":
                status.update { $0.connection = $0.connection == .unauthorized ? .connecting : $0.connection }
            case "library-changed":
                guard let path = o["path"]?.stringValue else { continue }
                let name = MyLifeDBWriter.name(path)
                if name.hasPrefix(".tmp-") { continue }
                eventsHeard += 1
                let op = o["data"]?.objectValue?["operation"]?.stringValue ?? ""
                // A move names one end only: the whole tree finds both.
                scopes.insert(op == "move" || op == "rename" ? "" : MyLifeDBWriter.parent(path))
            default: continue
            }
        }
        // Read apart from the stream: the events that come during a reading are heard while it
        // runs (`putsOffRemovals`).
        for s in scopes { Task { await self.request(s) } }
    }

    /// Reads folder `scope` (and all below it) again; requests made while one runs are merged.
    func request(_ scope: String) async {
        pending.insert(scope)
        guard !running else { return }
        running = true
        defer { running = false }
        var failed: Set<String> = []
        while !pending.isEmpty && !Task.isCancelled {
            // A scope inside another one being read is read with it.
            let scopes = pending
            pending = []
            let outer = scopes.filter { s in !scopes.contains { o in o != s && (o.isEmpty || s.hasPrefix(o + "/")) } }
            for s in outer.sorted() {
                do {
                    try await reconcile(s)
                    failedReadings = 0
                } catch {
                    log.info("reading the server's tree failed", metadata: ["folder": "\(s)", "error": "\(error)"])
                    // Until a first reading succeeds, the mount counts the server as unreachable
                    // (`marfafs mount` stops waiting for it after a while).
                    let first = !firstSync.done
                    status.update { $0.lastError = "\(error)"; if first { $0.connection = .offline } }
                    failed.insert(s)
                }
            }
        }
        retryLater(failed)
    }

    /// Readings that failed in a row (`retryLater`).
    var failedReadings = 0

    /// A reading that failed (the server busy, a connection reset) is made again after a while:
    /// 1 s, doubling to 30 s while they keep failing. Left to the next event or the rescan, a
    /// change whose only event was read by the failed reading waited up to `rescan` seconds.
    func retryLater(_ scopes: Set<String>) {
        guard !scopes.isEmpty, !Task.isCancelled else { return }
        failedReadings += 1
        let delay = Backoff(base: 1, cap: 30).ceiling(attempt: failedReadings)
        Task { [weak self] in
            try? await Task.sleep(for: .seconds(delay))
            for s in scopes { await self?.request(s) }
        }
    }

    // MARK: reading the tree

    func reconcile(_ scope: String) async throws {
        let client = keyed.client, api = api()
        let first = !firstSync.done && scope.isEmpty
        let heardBefore = eventsHeard
        if first { status.update { $0.transfer = EngineState.Transfer(phase: "listing") } }
        let inScope: (String) -> Bool = { p in scope.isEmpty || p == scope || p.hasPrefix(scope + "/") }
        // What the store knows, read before the tree: a file this mount sends meanwhile is recorded
        // anew, and what this older reading says of it is not taken (`KnownFile.seen`).
        let known = try store.knownFiles(under: scope)
        let (files, folders, unlisted) = try await walk(scope, client: client, api: api)
        let inUnlisted: (String) -> Bool = { p in unlisted.contains { $0.isEmpty || p == $0 || p.hasPrefix($0 + "/") } }
        status.update { $0.connection = .online }
        let knownByPath = Dictionary(known.map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
        var vanished = known.filter { files[$0.path] == nil && !inUnlisted($0.path) }
        var listedByHash = Dictionary(grouping: known.filter { files[$0.path] != nil }, by: \.hash)
        let changed = files.values.filter { f in knownByPath[f.path].map { $0.size != f.size || $0.modifiedMs != f.modifiedMs } ?? true }
            .sorted { $0.path < $1.path }
        if first { status.update { $0.transfer = EngineState.Transfer(phase: "files", items: 0, done: 0) } }
        var applied = 0
        // Files are described and fetched eight at a time, and taken a batch at a time.
        for start in stride(from: 0, to: changed.count, by: 64) {
            let group = Array(changed[start..<min(start + 64, changed.count)])
            let fetched = try await withThrowingTaskGroup(of: (RemoteFile, RemoteBody?).self) { g in
                var out: [(RemoteFile, RemoteBody?)] = []
                var next = 0
                while next < min(8, group.count) { let f = group[next]; g.addTask { try await self.fetch(f, client: client, api: api) }; next += 1 }
                for try await r in g {
                    out.append(r)
                    if next < group.count { let f = group[next]; g.addTask { try await self.fetch(f, client: client, api: api) }; next += 1 }
                }
                return out.sorted { $0.0.path < $1.0.path }
            }
            var batch: [(RemoteFile, RemoteBody)] = []
            for (f, body) in fetched {
                guard let hash = f.hash else { continue }
                if let k = knownByPath[f.path], k.hash == hash {
                    _ = try store.noteRemoteFile(f)
                    continue
                }
                if knownByPath[f.path] == nil, let i = vanished.firstIndex(where: { $0.hash == hash }) {
                    // The same bytes left another place: a move.
                    applied += try store.applyRemoteMove(from: vanished[i], to: f).applied
                    vanished.remove(at: i)
                    continue
                }
                if knownByPath[f.path] == nil, let from = try await listedButGone(listedByHash[hash] ?? [], client: client, api: api) {
                    // Its old folder was read before the move, its new one after.
                    applied += try store.applyRemoteMove(from: from, to: f).applied
                    listedByHash[hash]?.removeAll { $0.path == from.path }
                    continue
                }
                guard let body else { continue }
                batch.append((f, body))
            }
            applied += try store.applyRemoteFiles(batch).applied
            if first { status.update { $0.transfer?.items = start + group.count; $0.transfer?.done = Double(start + group.count) / Double(max(1, changed.count)) } }
        }
        if !vanished.isEmpty, await !putsOffRemovals(vanished, heardBefore: heardBefore) {
            for v in vanished { applied += try store.applyRemoteRemoval(v).applied }
        }
        let knownFolders = try store.knownFolders().filter(inScope)
        let removed = knownFolders.subtracting(folders).subtracting([scope]).filter { !inUnlisted($0) }
        try store.setKnownFolders(adding: Array(folders.subtracting(knownFolders)), removing: Array(removed))
        try store.addRemoteFolders(folders.subtracting(knownFolders).sorted())
        try store.removeRemoteFolders(Array(removed))
        if applied > 0 { status.update { $0.applied += applied } }
        if first {
            try store.markFirstSyncDone()
            firstSync.set()
            status.update { $0.transfer = nil; $0.firstSyncDone = true }
            log.info("first sync done", metadata: ["files": "\(files.count)", "folders": "\(folders.count)"])
        }
    }

    /// Of known files with a new file's bytes, still listed in this reading, the first the server no
    /// longer has (asked one by one; copies are not moves).
    func listedButGone(_ candidates: [KnownFile], client: WireClient, api: MyLifeDBAPI) async throws -> KnownFile? {
        for k in candidates {
            let r = try await client.send(api.info(k.path))
            if r.status == 404 { return k }
            guard (200..<300).contains(r.status) else { throw WireFailure.of(r) }
        }
        return nil
    }

    /// Whether the files this reading found gone are left for the next reading to judge: when an
    /// event came while it ran (a folder read before a move and the other after it take the moved
    /// file for a removed one), for up to three readings in a row; their folders are read again. With
    /// no event heard yet, a removal waits a quarter of a second for a move's event on its way.
    func putsOffRemovals(_ vanished: [KnownFile], heardBefore: Int) async -> Bool {
        if eventsHeard == heardBefore { try? await Task.sleep(for: .milliseconds(250)) }
        guard eventsHeard != heardBefore, removalsPutOff < 3 else { removalsPutOff = 0; return false }
        removalsPutOff += 1
        for v in vanished { pending.insert(MyLifeDBWriter.parent(v.path)) }
        return true
    }

    /// Every file and folder at and below `root` (a folder the server no longer has holds nothing).
    /// A folder the server refuses to list for good (403, say) is `unlisted`: what is known below
    /// it is neither taken as removed nor read; a failure that may pass (network, 5xx, 401, 429)
    /// fails the whole reading, which is tried again.
    func walk(_ root: String, client: WireClient, api: MyLifeDBAPI) async throws
        -> (files: [String: RemoteFile], folders: Set<String>, unlisted: Set<String>) {
        var files: [String: RemoteFile] = [:], folders = Set<String>(), unlisted = Set<String>(), queue = [root]
        while !queue.isEmpty {
            let batch = Array(queue.prefix(8))
            queue.removeFirst(batch.count)
            try await withThrowingTaskGroup(of: (folder: String, files: [RemoteFile], folders: [String], refused: Bool).self) { g in
                for folder in batch {
                    g.addTask {
                        let r = try await client.send(api.tree(folder))
                        if r.status == 404 { return (folder, [], [], false) }
                        guard (200..<300).contains(r.status) else {
                            let f = WireFailure.of(r)
                            if f.isRetryable || r.status == 401 { throw f }
                            return (folder, [], [], true)
                        }
                        let c = MyLifeDBAPI.children(r.json, of: folder)
                        return (folder, c.files, c.folders, false)
                    }
                }
                for try await (folder, fs, ds, refused) in g {
                    if refused { unlisted.insert(folder); continue }
                    for f in fs where !isLocalOnly(f.path) { files[f.path] = f }
                    for d in ds where !isLocalOnly(d) { folders.insert(d); queue.append(d) }
                }
            }
        }
        if !unlisted.isEmpty {
            log.warning("the server refused to list folders; what is known in them stays as it is", metadata: ["folders": "\(unlisted.sorted())"])
        }
        return (files, folders, unlisted)
    }

    /// A file's description (hash, attributes) and, if its bytes are new here, the bytes (a large
    /// file's only by name: fetched when read).
    func fetch(_ f: RemoteFile, client: WireClient, api: MyLifeDBAPI) async throws -> (RemoteFile, RemoteBody?) {
        let r = try await client.send(api.info(f.path))
        if r.status == 404 { return (f, nil) }
        guard (200..<300).contains(r.status) else { throw WireFailure.of(r) }
        guard var info = MyLifeDBAPI.file(r.json, path: f.path) else { return (f, nil) }
        info.path = f.path
        if (try? store.knownFile(path: f.path))??.hash == info.hash { return (info, nil) }
        if Store.isBlobPath(f.path), info.size > Self.eagerBytes, let h = info.hash {
            return (info, .blob(hash: BlobHash.prefix + h, size: info.size))
        }
        let raw = try await client.send(api.raw(f.path), maxBody: max(Store.maxTextBytes, Int(Self.eagerBytes)) + 1)
        if raw.status == 404 { return (f, nil) }
        guard (200..<300).contains(raw.status) else { throw WireFailure.of(raw) }
        // The bytes as they came are what is kept: their own hash and size.
        info.hash = String(BlobHash.of(raw.body).dropFirst(BlobHash.prefix.count))
        info.size = Int64(raw.body.count)
        return (info, .bytes(raw.body))
    }
}

/// How the stream's reading ended (nil: not yet).
final class StreamEnd: Sendable {
    struct Ended: @unchecked Sendable { var error: Error? }
    let state = Mutex<Ended?>(nil)
    var value: Ended? { state.withLock { $0 } }
    func set(_ e: Error?) { state.withLock { $0 = Ended(error: e) } }
}

/// Set once, read from any thread.
final class FirstSyncFlag: Sendable {
    let value = Mutex(false)
    var done: Bool { value.withLock { $0 } }
    func set() { value.withLock { $0 = true } }
}
