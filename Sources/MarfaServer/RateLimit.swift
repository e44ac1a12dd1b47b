import Foundation
import HTTPTypes
import Hummingbird
import Logging
import MarfaModel

extension HTTPField.Name {
    static let rateLimitLimit = HTTPField.Name("X-RateLimit-Limit")!
    static let rateLimitRemaining = HTTPField.Name("X-RateLimit-Remaining")!
    static let rateLimitReset = HTTPField.Name("X-RateLimit-Reset")!
    static let retryAfter = HTTPField.Name("Retry-After")!
}

/// W-4 rate limiting: at most `limit` requests per credential (the bearer token; requests without
/// one share a bucket) per fixed minute. Every response carries the three `X-RateLimit-*` headers;
/// past the limit the answer is `429 rate_limited` with `Retry-After`.
struct RateLimitMiddleware<Context: RequestContext>: RouterMiddleware {
    let limit: Int
    let log: Logger
    let window: Int = 60
    let counts = Counts()

    final class Counts: @unchecked Sendable {
        private let lock = NSLock()
        private var windowStart = 0
        private var byBucket: [String: Int] = [:]

        /// Counts one request; returns the count in the current window and the window's end.
        func hit(_ bucket: String, now: Int, window: Int) -> (Int, Int) {
            lock.lock(); defer { lock.unlock() }
            let start = now - now % window
            if start != windowStart { windowStart = start; byBucket = [:] }
            let n = (byBucket[bucket] ?? 0) + 1
            byBucket[bucket] = n
            return (n, start + window)
        }
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let bucket = request.headers[.authorization] ?? ""
        let now = Int(Date().timeIntervalSince1970)
        let (n, reset) = counts.hit(bucket, now: now, window: window)
        var response: Response
        if n > limit {
            response = EnvelopeMiddleware<Context>.json(429, APIError(429, "rate_limited", "more than \(limit) requests this minute; retry after \(reset - now) s").body)
            response.headers[.retryAfter] = String(max(1, reset - now))
        } else {
            do { response = try await next(request, context) } catch {
                // Refusals carry the headers too.
                response = EnvelopeMiddleware<Context>.response(for: error, requestID: "", log: log)
            }
        }
        response.headers[.rateLimitLimit] = String(limit)
        response.headers[.rateLimitRemaining] = String(max(0, limit - n))
        response.headers[.rateLimitReset] = String(reset)
        return response
    }
}
