import Foundation
import Logging
import MarfaModel
import MarfaStore
import Synchronization

/// What the sync engine shows in `.marfafs/status`: the server, the state of the connection and
/// the last error. Read synchronously by the file system, written by the engine.
public final class SyncStatus: Sendable {
    public struct Snapshot: Sendable {
        public var server: String
        /// `connecting`, `online`, `offline` (retrying with backoff) or `unauthorized` (paused until a
        /// working key is configured).
        public var connection = "connecting"
        public var lastError: String?
        public var sent = 0
    }
    private let state: Mutex<Snapshot>
    public init(server: String) { state = Mutex(Snapshot(server: server)) }
    public var snapshot: Snapshot { state.withLock { $0 } }
    func update(_ f: (inout Snapshot) -> Void) { state.withLock { f(&$0) } }

    /// The fields `.marfafs/status` takes from the engine.
    public var json: [String: JSONValue] {
        let s = snapshot
        return ["mode": "sync", "server": .string(s.server), "connection": .string(s.connection),
                "last_error": s.lastError.map(JSONValue.string) ?? .null, "sent": .int(Int64(s.sent))]
    }
}

/// Drains the queue to the server (W-5): oldest first, one call per mutation under its own
/// idempotency key (the same on every retry); network errors, 5xx and 429 wait with jittered
/// exponential backoff (never less than `Retry-After`) and retry the same mutation; 401 pauses
/// the queue until the key changes; a 409 leaves the mutation as a conflict; any other refusal
/// keeps the user's bytes and marks the item `rejected`. It never touches the mount point.
public actor QueueDrainer {
    let store: Store
    let status: SyncStatus
    let log: Logger
    let loadCredential: @Sendable () throws -> Credential
    /// Told which items the engine changed in the store, so the mount can refresh them.
    let onChange: @Sendable ([String]) -> Void
    var client: WireClient
    var credential: Credential
    let baseURL: String
    var backoff = Backoff()
    var attempt = 0
    let idle: Duration

    public init(store: Store, baseURL: String, credential: Credential, status: SyncStatus, log: Logger,
                idle: Duration = .milliseconds(150),
                loadCredential: @escaping @Sendable () throws -> Credential, onChange: @escaping @Sendable ([String]) -> Void) {
        self.store = store; self.baseURL = baseURL; self.credential = credential; self.status = status; self.log = log
        self.idle = idle; self.loadCredential = loadCredential; self.onChange = onChange
        client = WireClient(baseURL: baseURL, credential: credential)
    }

    /// `done`: the mutation left the line (sent, kept as a conflict, or refused); its item changed.
    enum Outcome { case done, wait(Double), paused }

    /// Runs until the task is cancelled.
    public func run() async {
        await probe()
        while !Task.isCancelled {
            let batch: [Mutation]
            do { batch = try store.nextMutations(limit: 50) } catch {
                log.error("reading the queue failed", metadata: ["error": "\(error)"])
                try? await Task.sleep(for: .seconds(1))
                continue
            }
            if batch.isEmpty {
                try? await Task.sleep(for: idle)
                continue
            }
            // The mount refreshes the items of a batch once, not once per mutation.
            var changed: [String] = []
            var stop: Outcome?
            for m in batch where stop == nil && !Task.isCancelled {
                switch await send(m) {
                case .done: if !changed.contains(m.itemID) { changed.append(m.itemID) }
                case let other: stop = other
                }
            }
            if !changed.isEmpty { onChange(changed) }
            switch stop {
            case .wait(let seconds)?: try? await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
            case .paused?: await waitForNewKey()
            case .done?, nil: break
            }
        }
        await client.shutdown()
    }

    func send(_ m: Mutation) async -> Outcome {
        let request: WireRequest
        do {
            try store.markSending(seq: m.seq)
            var base: Int64?
            if m.kind == .update {
                let known = try store.serverVersion(itemID: m.itemID)
                if case .int(let b)? = m.payload["base_version"], b > known { base = b } else if known > 0 { base = known }
            }
            request = try WireRequest.sending(m, baseVersion: base, blob: { try self.store.blobBytes(hash: $0) })
        } catch {
            return refuse(m, "cannot send: \(error)")
        }
        do {
            let resp = try await client.call(request)
            let version: Int64? = { if case .int(let v)? = resp.json["item"]?.objectValue?["version"] { return v }; return nil }()
            try store.acknowledge(seq: m.seq, itemID: m.itemID, serverVersion: version)
            attempt = 0
            status.update { $0.connection = "online"; $0.sent += 1; $0.lastError = nil }
            return .done
        } catch let f as WireFailure {
            switch f {
            case _ where f.isRetryable:
                attempt += 1
                var rng = SystemRandomNumberGenerator()
                let wait = backoff.delay(attempt: attempt, retryAfter: f.retryAfter, using: &rng)
                try? store.retryLater(seq: m.seq, error: f.description)
                status.update { $0.connection = "offline"; $0.lastError = f.description }
                log.info("sending failed; retrying", metadata: ["mutation": "\(m.id)", "error": "\(f)", "in_seconds": "\(wait)"])
                return .wait(wait)
            case .unauthorized:
                try? store.retryLater(seq: m.seq, error: f.description)
                paused(by: f)
                return .paused
            case .conflict(let r):
                try? store.markConflict(seq: m.seq, itemID: m.itemID, error: f.description, context: String(decoding: r.body, as: UTF8.self))
                status.update { $0.lastError = "\(m.itemID): \(f.description)" }
                return .done
            default:
                return refuse(m, f.description)
            }
        } catch {
            return refuse(m, "\(error)")
        }
    }

    /// At start, `GET /tenants/current` says whether the server is there and takes the key, so an
    /// idle mount shows `online`, `offline` or `unauthorized` rather than `connecting`.
    func probe() async {
        do {
            try await client.call(WireRequest(method: "GET", path: "/tenants/current"))
            status.update { $0.connection = "online"; $0.lastError = nil }
        } catch let f as WireFailure {
            if case .unauthorized = f {
                paused(by: f)
                await waitForNewKey()
            } else {
                status.update { $0.connection = "offline"; $0.lastError = f.description }
            }
        } catch {
            status.update { $0.connection = "offline"; $0.lastError = "\(error)" }
        }
    }

    func refuse(_ m: Mutation, _ reason: String) -> Outcome {
        try? store.reject(seq: m.seq, itemID: m.itemID, error: reason)
        status.update { $0.lastError = "\(m.itemID): \(reason)" }
        log.error("the server refused a change; the item keeps its bytes as rejected", metadata: ["item": "\(m.itemID)", "error": "\(reason)"])
        return .done
    }

    /// A 401 (at start or on a send): the status says so until a new key is configured.
    func paused(by f: WireFailure) {
        status.update { $0.connection = "unauthorized"; $0.lastError = "\(f.description) — the queue is paused until a valid key is configured" }
        log.error("the server refused the key; the queue is paused", metadata: ["server": "\(baseURL)"])
    }

    /// After a 401: re-reads the key every 2 s; a different key resumes the queue.
    func waitForNewKey() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(2))
            guard let fresh = try? loadCredential(), fresh.token != credential.token else { continue }
            await client.shutdown()
            credential = fresh
            client = WireClient(baseURL: baseURL, credential: fresh)
            status.update { $0.connection = "connecting"; $0.lastError = nil }
            log.info("a new key is configured; the queue resumes")
            return
        }
    }
}
