import Foundation

/// Retry delays (issue: exponential backoff with jitter on network errors, 5xx and 429, honouring
/// `Retry-After`). Pure: the random source is passed in, so tests are deterministic.
public struct Backoff: Sendable, Equatable {
    public var base: Double
    public var cap: Double
    /// Full jitter (the default); without it every wait is its ceiling (a wait a test can count on).
    public var jitter: Bool
    public init(base: Double = 0.25, cap: Double = 60, jitter: Bool = true) { self.base = base; self.cap = cap; self.jitter = jitter }

    /// The wait before retry number `attempt` (1 for the first retry): "full jitter", uniform in
    /// [0, min(cap, base·2^(attempt-1))], but never less than the server's `Retry-After`.
    public func delay(attempt: Int, retryAfter: Double? = nil, using rng: inout some RandomNumberGenerator) -> Double {
        let jittered = jitter ? Double.random(in: 0...ceiling(attempt: attempt), using: &rng) : ceiling(attempt: attempt)
        guard let retryAfter, retryAfter.isFinite, retryAfter >= 0 else { return jittered }
        return max(jittered, min(retryAfter, 24 * 3600))
    }

    /// The longest wait before retry number `attempt`: base·2^(attempt-1), at most `cap`. Alone
    /// (no jitter) for waits on this machine's store, which no other client shares.
    public func ceiling(attempt: Int) -> Double {
        min(cap, base * pow(2, Double(max(0, min(attempt - 1, 62)))))
    }

    /// `Retry-After` as seconds: delta-seconds, or an HTTP date relative to `now`.
    public static func retryAfter(_ header: String?, now: Date = Date()) -> Double? {
        guard let h = header?.trimmingCharacters(in: .whitespaces), !h.isEmpty else { return nil }
        if let s = Double(h), s >= 0 { return s }
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "GMT")
        f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return f.date(from: h).map { max(0, $0.timeIntervalSince(now)) }
    }
}
