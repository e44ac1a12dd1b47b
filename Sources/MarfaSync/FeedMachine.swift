import Foundation

/// The event stream's life as a pure state machine (no I/O, no clock of its own): `RemoteFeed`
/// feeds it what happened and when, and does what it answers. Tested with a manual clock.
///
/// connecting ──opened──▶ (sweeping ──swept──▶) live ──failed/silent/store failed──▶ waiting ──due / server answered──▶ connecting
///      │                                        │
///      └──────────── unauthorized ◀─────────────┘──── a new key ──▶ connecting
public struct FeedMachine: Sendable {
    public enum State: Equatable, Sendable {
        case connecting
        /// The first sync or a catch-up sweep runs; events wait on the open stream.
        case sweeping
        case live
        /// Reconnecting at `until` (seconds on the caller's clock).
        case waiting(until: Double)
        /// The server refused the key: nothing until another key is configured.
        case unauthorized
    }

    public enum Event: Sendable {
        /// The stream's first frame came (the server took the request).
        case opened
        /// Any frame or comment: the connection lives.
        case activity
        case swept
        /// `catchup_too_old`: our place in the log is gone.
        case catchupTooOld
        /// The connection failed or the server closed it: `retryAfter` (seconds) if it said so.
        case failed(retryable: Bool, retryAfter: Double?)
        /// What the stream brought could not be applied to the store (a full disk): the stream
        /// reconnects after a wait that grows from one failure of the kind to the next, and that
        /// neither a new connection nor the server's answers cut short (neither says the store
        /// has room); an applied event ends the run of them (`applied`).
        case storeFailed
        case keyChanged
        /// Another request (the queue's) reached the server while the stream waits to reconnect:
        /// the server is back, so the stream need not wait out its backoff.
        case serverAnswered
        /// Time passes (the caller's clock): due reconnections, silence.
        case tick
    }

    public enum Action: Equatable, Sendable {
        /// Open the stream, from the last applied event if `resume`, else live.
        case connect(resume: Bool)
        /// Sweep (`full`: every item, the first sync; else since the newest item seen). `allEdges`:
        /// list every edge and drop those the server no longer has.
        case sweep(full: Bool, allEdges: Bool)
        /// Forget the last event id (it is no use any more).
        case forgetPosition
        /// Drop the connection (it has been silent too long).
        case disconnect
        /// Reconnect at this time.
        case retry(at: Double)
        case waitForKey
    }

    public private(set) var state: State = .connecting
    public private(set) var attempt = 0
    /// Failures to apply to the store since an event was last applied (`storeFailed`).
    public private(set) var storeFailures = 0
    /// The wait after a store failure: 1 s, doubling to 30 s.
    public var storeBackoff = Backoff(base: 1, cap: 30)
    /// Whether the store has an event to resume from, and has ever finished a first sync.
    public private(set) var hasPosition: Bool
    public private(set) var firstSyncDone: Bool
    /// What the next open stream must be preceded by: a sweep, and of which kind.
    var pendingSweep: (full: Bool, allEdges: Bool)?
    var lastActivity: Double
    public let silence: Double
    public var backoff = Backoff()

    public init(hasPosition: Bool, firstSyncDone: Bool, silence: Double = 60, now: Double) {
        self.hasPosition = hasPosition; self.firstSyncDone = firstSyncDone; self.silence = silence
        lastActivity = now
        if !firstSyncDone { pendingSweep = (true, true) } else if !hasPosition { pendingSweep = (false, true) }
    }

    /// What to do first.
    public func start() -> [Action] { [.connect(resume: hasPosition)] }

    public mutating func handle<R: RandomNumberGenerator>(_ e: Event, at now: Double, using rng: inout R) -> [Action] {
        switch (e, state) {
        case (.opened, .connecting):
            lastActivity = now
            attempt = 0
            if let s = pendingSweep { state = .sweeping; return [.sweep(full: s.full, allEdges: s.allEdges)] }
            state = .live
            return []
        case (.activity, _):
            lastActivity = now
            return []
        case (.swept, .sweeping):
            pendingSweep = nil
            firstSyncDone = true
            state = .live
            lastActivity = now
            return []
        case (.catchupTooOld, _):
            hasPosition = false
            pendingSweep = (!firstSyncDone, true)
            state = .connecting
            lastActivity = now
            return [.forgetPosition, .connect(resume: false)]
        case (.failed(let retryable, let retryAfter), _):
            if !retryable { state = .unauthorized; return [.waitForKey] }
            attempt += 1
            let at = now + backoff.delay(attempt: attempt, retryAfter: retryAfter, using: &rng)
            state = .waiting(until: at)
            return [.retry(at: at)]
        case (.storeFailed, _):
            storeFailures += 1
            let ceiling = storeBackoff.ceiling(attempt: storeFailures)
            let at = now + Double.random(in: (ceiling / 2)...ceiling, using: &rng)
            state = .waiting(until: at)
            return [.retry(at: at)]
        case (.keyChanged, .unauthorized):
            state = .connecting
            lastActivity = now
            return [.connect(resume: hasPosition)]
        case (.serverAnswered, .waiting) where storeFailures == 0:
            state = .connecting
            lastActivity = now
            return [.connect(resume: hasPosition)]
        case (.tick, .waiting(let until)) where now >= until:
            // A new connection gets the whole silence limit to say something.
            state = .connecting
            lastActivity = now
            return [.connect(resume: hasPosition)]
        case (.tick, .live), (.tick, .connecting):
            // (While sweeping the stream is not read, so its silence means nothing.)
            guard now - lastActivity > silence else { return [] }
            // Silent too long: the connection is dead, whatever TCP says (W-14).
            attempt += 1
            let at = now + backoff.delay(attempt: attempt, retryAfter: nil, using: &rng)
            state = .waiting(until: at)
            return [.disconnect, .retry(at: at)]
        default:
            return []
        }
    }

    /// An event was applied: from now on the stream resumes from it.
    public mutating func applied() { hasPosition = true; storeFailures = 0 }
}
