import Foundation
import Logging
import MarfaModel
import MarfaStore
import Synchronization

/// Drains the queue to the remote (W-5; what it sends is its `RemoteWriter`'s): oldest first, one call per mutation under its own
/// idempotency key (the same on every retry); network errors, 5xx and 429 wait with jittered
/// exponential backoff (never less than `Retry-After`) and retry the same mutation; 401 pauses
/// the queue until the key changes; a 409 leaves the mutation as a conflict; any other refusal
/// keeps the user's bytes and marks the item `rejected`. It never touches the mount point.
public actor QueueDrainer {
    let store: Store
    let status: SyncStatus
    let log: Logger
    let conflictMode: ConflictMode
    /// The device label in a conflicted copy's name (FS-20).
    let device: String
    let keyed: KeyedClient
    /// The client the server last refused the key of (401): the queue waits for another key.
    var refused: WireClient?
    var backoff: Backoff
    var attempt = 0
    /// Writes of the queue's state that the store refused in a row (a full disk): the wait after
    /// each grows, 1 s doubling to 30 s, whatever the server answered (`storeWait`).
    var storeFailures = 0
    let idle: Duration
    /// What differs between kinds of remote (FS-34): how a mutation is sent.
    let writer: any RemoteWriter
    /// Items whose chain ends at a refusal that refused their later changes too (`Store.reject`).
    var chainsRefused: Set<String> = []
    /// The store's commit count when held server changes were last looked at (`applyHeldRemotes`).
    var heldLookedAt = -1

    public init(store: Store, client: KeyedClient, status: SyncStatus, log: Logger, writer: (any RemoteWriter)? = nil,
                idle: Duration = .milliseconds(50), conflictMode: ConflictMode = .merge, device: String = ProcessInfo.processInfo.hostName,
                backoff: Backoff = Backoff()) {
        self.store = store; self.keyed = client; self.status = status; self.log = log; self.backoff = backoff
        self.writer = writer ?? MarfaWriter(store: store, status: status)
        self.idle = idle
        self.conflictMode = conflictMode; self.device = device
    }

    /// `done`: the mutation left the line (settled as a conflict, or refused), with what that
    /// changed in the store; `acked`: the server took it; `wait`: not now (the server's
    /// `Retry-After` in seconds, 0 if none); `paused`: the key was refused.
    enum Outcome { case done(StoreChanges), acked(Acknowledgement), wait(Double), paused }

    /// Runs until the task is cancelled.
    public func run() async {
        await probe()
        // Nothing is sent before the store's first sync is done: a file made here before the
        // store met the server, and on the server already (the same vault imported on two
        // devices), becomes the server's item then (`Store.adoptLocalTwin`), so its create must
        // not be on its way. (The probe has said meanwhile whether the server takes the key.)
        while !Task.isCancelled && !store.firstSyncDone { try? await Task.sleep(for: .milliseconds(100)) }
        while !Task.isCancelled {
            let batch: [Mutation]
            do { batch = try store.nextMutations(limit: 200) } catch {
                log.error("reading the queue failed", metadata: ["error": "\(error)"])
                try? await Task.sleep(for: .seconds(1))
                continue
            }
            if batch.isEmpty {
                // Nothing to send: a server change held for an item whose save settled with
                // nothing to send is taken now (looked at again only once the store changed).
                let commits = store.commitCount
                if commits != heldLookedAt, (try? store.applyHeldRemotes()) != nil { heldLookedAt = commits }
                try? await Task.sleep(for: idle)
                continue
            }
            // What a run changes in the store reaches the mount through the store's observers
            // (one acknowledgement per run: the mount refreshes its items once).
            var stop: Outcome?
            var i = 0
            while i < batch.count && stop == nil && !Task.isCancelled {
                // A run of item mutations goes out as concurrent chains, one per item, each in
                // order; an edge mutation waits for everything before it (it may name an item
                // created just before) and goes alone.
                var j = i
                while j < batch.count && !Self.isBarrier(batch[j]) { j += 1 }
                if j == i { j = i + 1 }
                stop = await sendChains(Array(batch[i..<j])).1
                i = j
            }
            switch stop {
            case .wait(let retryAfter)?:
                // One backoff step per batch that could not go out, however many of its chains failed.
                attempt += 1
                var rng = SystemRandomNumberGenerator()
                let wait = backoff.delay(attempt: attempt, retryAfter: retryAfter > 0 ? retryAfter : nil, using: &rng)
                log.info("sending failed; retrying", metadata: ["in_seconds": "\(wait)", "attempt": "\(attempt)"])
                await waitToRetry(wait, endEarly: retryAfter == 0)
            case .paused?: await waitForNewKey()
            case .done?, .acked?, nil: break
            }
        }
    }

    /// Waits out a backoff. `endEarly` (a network failure: no `Retry-After`, not the store): the
    /// wait ends once the server has answered the feed since it began (the stream opened again),
    /// so what waits goes out when the server is back, not up to a minute later; the stream's own
    /// wait ends the same way when the queue is answered (`RemoteFeed.waitToReconnect`).
    func waitToRetry(_ seconds: Double, endEarly: Bool) async {
        let heard = status.snapshot.feedAnswers
        _ = await wait(until: Date().timeIntervalSince1970 + seconds) { endEarly && status.snapshot.feedAnswers != heard }
    }

    /// The wait after the store refused a write of the queue's state: 1 s, doubling to 30 s.
    func storeWait() -> Double {
        storeFailures += 1
        return Backoff(base: 1, cap: 30).ceiling(attempt: storeFailures)
    }

    static func isBarrier(_ m: Mutation) -> Bool { m.kind == .createEdge || m.kind == .deleteEdge }

    /// Sends `run` as one chain per item, the chains concurrently; a chain stops at its first
    /// mutation that does not leave the line. Returns what changed, and why the batch must stop.
    func sendChains(_ all: [Mutation]) async -> (StoreChanges, Outcome?) {
        // Marked `sending` together, acknowledged together: two transactions per run, not two per
        // mutation. (Should the daemon die between a 2xx and the acknowledgement, the mutation is
        // sent again under its key, and the server replays its answer.)
        // The run is the rows as marked, not as read before: a change folded in meanwhile goes too.
        let run: [Mutation]
        do { run = try store.markSending(seqs: all.map(\.seq)) } catch {
            let wait = storeWait()
            log.error("marking the queue failed", metadata: ["error": "\(error)", "in_seconds": "\(wait)"])
            return (StoreChanges(), .wait(wait))
        }
        var order: [String] = []
        var chains: [String: [Mutation]] = [:]
        for m in run {
            if chains[m.itemID] == nil { order.append(m.itemID) }
            chains[m.itemID, default: []].append(m)
        }
        let (changes, acks, outcome): (StoreChanges, [Acknowledgement], Outcome?) = await withTaskGroup(of: (StoreChanges, [Acknowledgement], Outcome?).self) { group in
            for id in order {
                let chain = chains[id]!
                group.addTask { await self.sendChain(chain) }
            }
            var changed = StoreChanges()
            var acks: [Acknowledgement] = []
            var stop: Outcome?
            for await (c, a, s) in group {
                changed.formUnion(c)
                acks += a
                switch (stop, s) {
                case (_, nil): break
                case (.paused?, _): break
                case (_, .paused?): stop = .paused
                case (.wait(let a)?, .wait(let b)?): stop = .wait(max(a, b))
                case (nil, let s?): stop = s
                default: break
                }
            }
            return (changed, acks, stop)
        }
        var changed = changes
        if !acks.isEmpty {
            do {
                changed.formUnion(try store.acknowledge(acks.sorted { $0.seq < $1.seq }))
                storeFailures = 0
                status.update { $0.connection = .online; $0.sent += acks.count; $0.lastError = nil }
            } catch {
                let wait = storeWait()
                log.error("recording acknowledgements failed; they will be sent again", metadata: ["error": "\(error)", "in_seconds": "\(wait)"])
                status.update { $0.lastError = "recording what the server took: \(error)" }
                return (changed, .wait(wait))
            }
        }
        return (changed, outcome)
    }

    /// One item's mutations in order; stops at the first that does not leave the line. The
    /// version each answer gives is the base of the item's next update.
    func sendChain(_ chain: [Mutation]) async -> (StoreChanges, [Acknowledgement], Outcome?) {
        var changed = StoreChanges()
        var acks: [Acknowledgement] = []
        var version: Int64?
        for m in chain where !Task.isCancelled {
            switch await send(m, acknowledgedVersion: version) {
            case .done(let c):
                changed.formUnion(c)
                if chainsRefused.remove(m.itemID) != nil { return (changed, acks, nil) }
            case .acked(let a): acks.append(a); if let v = a.serverVersion { version = max(version ?? 0, v) }
            case let other: return (changed, acks, other)
            }
        }
        return (changed, acks, nil)
    }

    func send(_ m: Mutation, acknowledgedVersion: Int64? = nil) async -> Outcome {
        // `.marfafs/pending` shows it in flight while its request is out.
        status.update { _ = $0.inFlight.insert(m.seq) }
        defer { status.update { _ = $0.inFlight.remove(m.seq) } }
        let client = keyed.client
        switch await writer.push(m, acknowledgedVersion: acknowledgedVersion, client: client) {
        case .acked(let a):
            attempt = 0
            status.record("mutation.sent", ["mutation": .string(m.id), "kind": .string(m.kind.rawValue), "item": .string(m.itemID)])
            return .acked(a)
        case .settled(let c):
            attempt = 0
            status.update { $0.connection = .online; $0.lastError = nil }
            return .done(c)
        case .unsendable(let reason):
            return refuse(m, reason)
        case .failed(let f):
            switch f {
            case _ where f.isRetryable:
                try? store.retryLater(seq: m.seq, error: f.description)
                status.update { $0.connection = .offline; $0.lastError = f.description }
                status.record("mutation.retried", ["mutation": .string(m.id), "error": .string(f.description), "attempt": .int(Int64(attempt + 1))])
                return .wait(f.retryAfter ?? 0)
            case .unauthorized:
                try? store.retryLater(seq: m.seq, error: f.description)
                paused(by: f, client: client)
                return .paused
            case .conflict(let r):
                return settle(m, conflict: r, failure: f)
            default:
                return refuse(m, f.description)
            }
        }
    }

    /// At start, `GET /tenants/current` says whether the server is there and takes the key, so an
    /// idle mount shows `online`, `offline` or `unauthorized` rather than `connecting`.
    func probe() async {
        let client = keyed.client
        do {
            try await writer.probe(client)
            status.update { $0.connection = .online; $0.lastError = nil }
        } catch let f as WireFailure {
            if case .unauthorized = f {
                paused(by: f, client: client)
                await waitForNewKey()
            } else {
                status.update { $0.connection = .offline; $0.lastError = f.description }
            }
        } catch {
            status.update { $0.connection = .offline; $0.lastError = "\(error)" }
        }
    }

    func refuse(_ m: Mutation, _ reason: String) -> Outcome {
        let dependents = (try? store.reject(seq: m.seq, itemID: m.itemID, error: reason)) ?? 0
        if dependents > 0 {
            // The rest of the item's chain names a file the server never took: not sent.
            chainsRefused.insert(m.itemID)
            log.error("the item's later changes are not sent", metadata: ["item": "\(m.itemID)", "changes": "\(dependents)"])
        }
        status.update { $0.lastError = "\(m.itemID): \(reason)" }
        // Dropped from sending, never from the store: the item keeps its bytes, the mutation stays
        // listed as rejected (FS-33).
        status.record("mutation.dropped", ["mutation": .string(m.id), "kind": .string(m.kind.rawValue), "item": .string(m.itemID),
                                           "error": .string(reason), "kept": "the item keeps its bytes (user.marfa.sync=rejected)"])
        log.error("the server refused a change; the item keeps its bytes as rejected", metadata: ["item": "\(m.itemID)", "error": "\(reason)"])
        return .done(StoreChanges(items: [m.itemID]))
    }

    /// A 401 (at start or on a send) with `client`: the status says so until a new key is configured.
    func paused(by f: WireFailure, client: WireClient) {
        refused = client
        status.update { $0.connection = .unauthorized; $0.lastError = "\(f.description) — the queue is paused until a valid key is configured" }
        log.error("the server refused the key; the queue is paused", metadata: ["server": "\(keyed.baseURL)"])
    }

    /// After a 401: a different key (re-read every 2 s, `KeyedClient`) resumes the queue.
    func waitForNewKey() async {
        await keyed.waitForNewKey(refused: refused ?? keyed.client)
        refused = nil
        guard !Task.isCancelled else { return }
        status.update { $0.connection = .connecting; $0.lastError = nil }
        log.info("a new key is configured; the queue resumes")
    }
}
