import MarfaSync
import Testing

/// The event stream's state machine, on a manual clock (W-14, W-17).
struct FeedMachineTests {
    var rng = SplitMix(seed: 7)

    @Test mutating func W17_aNewStoreSweepsEverythingOnceTheStreamIsOpenThenFollowsLive() {
        var m = FeedMachine(hasPosition: false, firstSyncDone: false, now: 0)
        #expect(m.start() == [.connect(resume: false)])
        #expect(m.handle(.opened, at: 0.1, using: &rng) == [.sweep(full: true, allEdges: true)])
        #expect(m.state == .sweeping)
        // A long first sync is not silence: the stream is not being read meanwhile.
        #expect(m.handle(.tick, at: 500, using: &rng) == [])
        #expect(m.handle(.swept, at: 500, using: &rng) == [])
        #expect(m.state == .live && m.firstSyncDone)
        m.applied()
        #expect(m.hasPosition)
    }

    @Test mutating func W17_aKnownPositionResumesWithoutASweep() {
        var m = FeedMachine(hasPosition: true, firstSyncDone: true, now: 0)
        #expect(m.start() == [.connect(resume: true)])
        #expect(m.handle(.opened, at: 1, using: &rng) == [])
        #expect(m.state == .live)
        // Lost, then back: it resumes from its position, still without a sweep.
        let a = m.handle(.failed(retryable: true, retryAfter: nil), at: 10, using: &rng)
        guard case .retry(let at)? = a.first else { Issue.record("\(a)"); return }
        #expect(at >= 10 && at <= 10.25, "the first retry waits at most the base delay")
        #expect(m.handle(.tick, at: at - 0.01, using: &rng) == [], "not before it is due")
        #expect(m.handle(.tick, at: at, using: &rng) == [.connect(resume: true)])
        #expect(m.handle(.opened, at: at + 0.1, using: &rng) == [])
    }

    /// A stream that has backed off for long (the server was away) reconnects as soon as the
    /// queue reaches the server again, not when its backoff ends; the backoff is kept (W-14).
    @Test mutating func W14_aServerThatAnsweredTheQueueEndsTheStreamsWait() {
        var m = FeedMachine(hasPosition: true, firstSyncDone: true, now: 0)
        _ = m.handle(.opened, at: 0, using: &rng)
        var now = 1.0
        for _ in 0..<10 {
            guard case .retry(let at)? = m.handle(.failed(retryable: true, retryAfter: nil), at: now, using: &rng).first else { Issue.record("no retry"); return }
            now = at
            _ = m.handle(.tick, at: now, using: &rng)
        }
        guard case .retry(let due)? = m.handle(.failed(retryable: true, retryAfter: 120), at: now, using: &rng).first else { Issue.record("no retry"); return }
        #expect(due >= now + 120)
        #expect(m.handle(.serverAnswered, at: now + 2, using: &rng) == [.connect(resume: true)])
        #expect(m.state == .connecting)
        #expect(m.handle(.serverAnswered, at: now + 2.5, using: &rng) == [], "only a waiting stream is woken")
        #expect(m.attempt == 11, "the backoff is kept for the next failure")
        #expect(m.handle(.opened, at: now + 3, using: &rng) == [] && m.attempt == 0)
    }

    /// A store that cannot take what the stream brings (a full disk) is not the server's doing:
    /// each reconnection would fail the same way, so the waits grow from one such failure to the
    /// next although every connection opens, the queue's answers do not cut them short, and an
    /// applied event ends the run (FS-28, W-14).
    @Test mutating func W14_FS28_aStoreThatCannotApplyBacksOffAcrossReconnections() {
        var m = FeedMachine(hasPosition: true, firstSyncDone: true, now: 0)
        var now = 0.0
        var waits: [Double] = []
        for _ in 0..<8 {
            _ = m.handle(.opened, at: now, using: &rng)
            guard case .retry(let at)? = m.handle(.storeFailed, at: now, using: &rng).first else { Issue.record("no retry"); return }
            waits.append(at - now)
            #expect(m.handle(.serverAnswered, at: now + 0.9 * (at - now), using: &rng) == [], "the server's answer does not end the wait")
            #expect(m.handle(.tick, at: at, using: &rng) == [.connect(resume: true)])
            now = at
        }
        #expect(waits[0] >= 0.5 && waits[0] <= 1)
        #expect(waits[3] >= 4 && waits[3] <= 8)
        #expect(waits.allSatisfy { $0 <= 30 } && waits[7] >= 15, "\(waits)")
        #expect(m.storeFailures == 8)
        // Applied at last: the next store failure waits a second again.
        _ = m.handle(.opened, at: now, using: &rng)
        m.applied()
        guard case .retry(let at)? = m.handle(.storeFailed, at: now, using: &rng).first else { Issue.record("no retry"); return }
        #expect(at - now <= 1)
        // A failure of the connection after a store failure keeps its own, shorter backoff.
        _ = m.handle(.tick, at: at, using: &rng)
        _ = m.handle(.opened, at: at, using: &rng)
        m.applied()
        guard case .retry(let next)? = m.handle(.failed(retryable: true, retryAfter: nil), at: at, using: &rng).first else { Issue.record("no retry"); return }
        #expect(next - at <= 0.25)
    }

    @Test mutating func W14_sixtySecondsOfSilenceIsADeadConnection() {
        var m = FeedMachine(hasPosition: true, firstSyncDone: true, now: 0)
        _ = m.handle(.opened, at: 0, using: &rng)
        _ = m.handle(.activity, at: 30, using: &rng)      // a ping
        #expect(m.handle(.tick, at: 90, using: &rng) == [], "60 s since the last byte is still alive")
        let a = m.handle(.tick, at: 90.5, using: &rng)
        #expect(a.first == .disconnect && a.count == 2)
        if case .retry(let at)? = a.last { #expect(at >= 90.5 && at <= 90.75) } else { Issue.record("\(a)") }
        // A reconnection after a wait longer than the limit gets the whole limit again.
        guard case .retry(let due)? = m.handle(.failed(retryable: true, retryAfter: 120), at: 100, using: &rng).first else { Issue.record("no retry"); return }
        #expect(m.handle(.tick, at: due, using: &rng) == [.connect(resume: true)])
        #expect(m.handle(.tick, at: due + 1, using: &rng) == [], "not silent: it has only just connected")
        #expect(m.handle(.tick, at: due + 60.5, using: &rng).first == .disconnect)
        // A server that takes the connection and never answers is silent too.
        var c = FeedMachine(hasPosition: true, firstSyncDone: true, now: 0)
        #expect(c.handle(.tick, at: 61, using: &rng).first == .disconnect)
    }

    @Test mutating func W17_catchupTooOldForgetsThePositionSweepsAndGoesLive() {
        var m = FeedMachine(hasPosition: true, firstSyncDone: true, now: 0)
        _ = m.handle(.opened, at: 0, using: &rng)
        #expect(m.handle(.catchupTooOld, at: 5, using: &rng) == [.forgetPosition, .connect(resume: false)])
        #expect(!m.hasPosition)
        #expect(m.handle(.opened, at: 5.1, using: &rng) == [.sweep(full: false, allEdges: true)], "since the newest item seen, and every edge")
        #expect(m.handle(.swept, at: 6, using: &rng) == [] && m.state == .live)
        // A restart before any new event: still no position, so it sweeps again rather than replay nothing.
        var r = FeedMachine(hasPosition: false, firstSyncDone: true, now: 0)
        #expect(r.start() == [.connect(resume: false)])
        #expect(r.handle(.opened, at: 0, using: &rng) == [.sweep(full: false, allEdges: true)])
    }

    @Test mutating func W5_backoffGrowsHonoursRetryAfterAndResetsOnSuccess() {
        var m = FeedMachine(hasPosition: true, firstSyncDone: true, now: 0)
        var now = 0.0
        var ceilings: [Double] = []
        for n in 1...10 {
            guard case .retry(let at)? = m.handle(.failed(retryable: true, retryAfter: nil), at: now, using: &rng).first else { Issue.record("no retry"); return }
            let ceiling = min(60, 0.25 * Double(1 << (n - 1)))
            #expect(at - now >= 0 && at - now <= ceiling, "retry \(n) within full jitter of \(ceiling) s")
            ceilings.append(ceiling)
            now = at
            #expect(m.handle(.tick, at: now, using: &rng) == [.connect(resume: true)])
        }
        #expect(m.attempt == 10)
        guard case .retry(let at)? = m.handle(.failed(retryable: true, retryAfter: 120), at: now, using: &rng).first else { Issue.record("no retry"); return }
        #expect(at - now >= 119.999, "never before Retry-After")
        _ = m.handle(.tick, at: at, using: &rng)
        _ = m.handle(.opened, at: at, using: &rng)
        #expect(m.attempt == 0, "an open stream resets the backoff")
    }

    @Test mutating func W18_aRefusedKeyWaitsForAnotherKey() {
        var m = FeedMachine(hasPosition: true, firstSyncDone: true, now: 0)
        #expect(m.handle(.failed(retryable: false, retryAfter: nil), at: 1, using: &rng) == [.waitForKey])
        #expect(m.state == .unauthorized)
        #expect(m.handle(.tick, at: 1000, using: &rng) == [], "no retries and no silence while unauthorized")
        #expect(m.handle(.keyChanged, at: 1001, using: &rng) == [.connect(resume: true)])
    }
}
