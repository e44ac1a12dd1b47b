import AsyncHTTPClient
import Foundation
import MarfaModel
import NIOCore
import NIOHTTP1
import Synchronization

/// The API key a mount uses (W-2): read from a file only its owner can read, or from an
/// environment variable. It never appears in a description, a log line or an error.
public struct Credential: Sendable, CustomStringConvertible {
    let token: String
    public var description: String { "marfa key …\(token.suffix(4))" }

    /// A password (a MyLifeDB server's, FS-34) may hold spaces: only the line's end is cut.
    public init(password: String) throws {
        var p = Substring(password)
        while let last = p.last, last == "\n" || last == "\r" { p = p.dropLast() }
        guard !p.isEmpty else { throw CredentialError("the password is empty") }
        token = String(p)
    }

    public init(token: String) throws {
        let t = token.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !t.isEmpty, !t.contains(where: { $0.isWhitespace || $0.isNewline }) else { throw CredentialError("the key is empty or contains spaces") }
        self.token = t
    }

    /// From `path`, refusing a file that group or others may read (like ssh does).
    public static func file(_ path: String, password: Bool = false) throws -> Credential {
        var st = stat()
        guard stat(path, &st) == 0 else { throw CredentialError("cannot read the key file \(path): \(String(cString: strerror(errno)))") }
        guard st.st_mode & 0o077 == 0 else {
            throw CredentialError("the key file \(path) is readable by others (mode \(String(st.st_mode & 0o777, radix: 8))); chmod 600 it")
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { throw CredentialError("cannot read the key file \(path)") }
        return password ? try Credential(password: text) : try Credential(token: text)
    }

    public static func environment(_ name: String = "MARFAFS_KEY") throws -> Credential? {
        guard let v = ProcessInfo.processInfo.environment[name] else { return nil }
        return try Credential(token: v)
    }
}

public struct CredentialError: Error, CustomStringConvertible {
    public var description: String
    init(_ d: String) { description = d }
}

/// A server's answer.
public struct WireResponse: Sendable {
    public var status: Int
    /// Header names in lowercase.
    public var headers: [String: String]
    public var body: [UInt8]
    public var json: [String: JSONValue] { value?.objectValue ?? [:] }
    /// The body as JSON, whatever its shape.
    public var value: JSONValue? { try? JSONParser.parse(String(decoding: body, as: UTF8.self)) }
    /// The W-3 envelope's `error.code`, if any.
    public var errorCode: String? { json["error"]?.objectValue?["code"]?.stringValue }
    public var errorMessage: String? { json["error"]?.objectValue?["message"]?.stringValue }

    init(status: Int, headers: [String: String], body: [UInt8]) { self.status = status; self.headers = headers; self.body = body }

    /// Reads a whole answer (up to `maxBody` bytes).
    init(_ resp: HTTPClientResponse, maxBody: Int) async throws {
        let body = try await resp.body.collect(upTo: maxBody)
        var headers: [String: String] = [:]
        for h in resp.headers { headers[h.name.lowercased()] = h.value }
        self.init(status: Int(resp.status.code), headers: headers, body: Array(body.readableBytesView))
    }
}

/// Why a call did not succeed, as the queue must treat it (issue: retry network errors, 5xx and
/// 429 with backoff; 401 pauses the queue; 409 goes to conflict resolution; anything else is a
/// refusal that keeps the user's bytes).
public enum WireFailure: Error, Sendable, CustomStringConvertible {
    case network(String)
    case unauthorized(code: String, message: String)
    case rateLimited(retryAfter: Double?)
    case unavailable(status: Int, retryAfter: Double?)
    case conflict(WireResponse)
    case refused(status: Int, code: String, message: String)
    /// No byte (not even `: ping`) for longer than the silence limit (W-14).

    public var isRetryable: Bool {
        switch self {
        case .network, .rateLimited, .unavailable: return true
        case .unauthorized, .conflict, .refused: return false
        }
    }

    public var retryAfter: Double? {
        switch self {
        case .rateLimited(let r), .unavailable(_, let r): return r
        default: return nil
        }
    }

    public var description: String {
        switch self {
        case .network(let m): return "network: \(m)"
        case .unauthorized(let c, let m): return "401 \(c): \(m)"
        case .rateLimited(let r): return "429 rate_limited" + (r.map { " (retry after \($0) s)" } ?? "")
        case .unavailable(let s, _): return "\(s): the server is unavailable"
        case .conflict(let r): return "409 \(r.errorCode ?? "conflict")"
        case .refused(let s, let c, let m): return "\(s) \(c): \(m)"
        }
    }

    /// The failure a non-2xx answer stands for.
    public static func of(_ r: WireResponse) -> WireFailure {
        let code = r.errorCode ?? "http_\(r.status)"
        let message = r.errorMessage ?? String(decoding: r.body.prefix(200), as: UTF8.self)
        let retry = Backoff.retryAfter(r.headers["retry-after"])
        switch r.status {
        case 401: return .unauthorized(code: code, message: message)
        case 409: return .conflict(r)
        case 429: return .rateLimited(retryAfter: retry)
        case 408, 500...599: return .unavailable(status: r.status, retryAfter: retry)
        default: return .refused(status: r.status, code: code, message: message)
        }
    }
}

/// HTTP to a Marfa-compatible server (async-http-client). Calls and the event stream use
/// separate clients, so a long-lived stream never holds up a call.
public final class WireClient: Sendable {
    /// How the credential is presented: a Marfa key as a bearer token (W-2); a MyLifeDB password
    /// as HTTP Basic, or, once the server gave one (`useSession`), its session cookie.
    public enum Scheme: Sendable { case bearer, basic }
    public let baseURL: String
    let credential: Credential
    let scheme: Scheme
    let session = Mutex<String?>(nil)
    let calls: HTTPClient
    let stream: HTTPClient
    let timeout: TimeAmount

    /// `connect` bounds how long an unreachable server takes to count as a network failure
    /// (the client keeps retrying a refused connection until then).
    public init(baseURL: String, credential: Credential, scheme: Scheme = .bearer, timeout: TimeAmount = .seconds(30), connect: TimeAmount = .seconds(3)) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.credential = credential
        self.scheme = scheme
        self.timeout = timeout
        var config = HTTPClient.Configuration()
        config.timeout.connect = connect
        // The queue sends one chain per item concurrently (QueueDrainer).
        config.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 16
        // Idle connections are closed here before a server closes them (marfafs serve: 60 s).
        config.connectionPool.idleTimeout = .seconds(20)
        calls = HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)
        stream = HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)
    }

    /// From now on, the server's session (a cookie) stands for the credential.
    public func useSession(_ id: String) { session.withLock { $0 = id } }

    public func shutdown() async {
        try? await calls.shutdown()
        try? await stream.shutdown()
    }

    func httpRequest(_ r: WireRequest) -> HTTPClientRequest {
        var req = HTTPClientRequest(url: baseURL + r.path)
        req.method = HTTPMethod(rawValue: r.method)
        switch (scheme, session.withLock { $0 }) {
        case (.bearer, _): req.headers.add(name: "Authorization", value: "Bearer \(credential.token)")
        case (.basic, let s?): req.headers.add(name: "Cookie", value: "session=\(s)")
        case (.basic, nil): req.headers.add(name: "Authorization", value: "Basic " + Data("marfafs:\(credential.token)".utf8).base64EncodedString())
        }
        req.headers.add(name: "Accept", value: "application/json")
        if let k = r.idempotencyKey { req.headers.add(name: "Idempotency-Key", value: k) }
        for (k, v) in r.headers { req.headers.replaceOrAdd(name: k, value: v) }
        switch r.body {
        case .none: break
        case .json(let o):
            req.headers.add(name: "Content-Type", value: "application/json")
            req.body = .bytes(ByteBuffer(string: JSONCoding.encode(o)))
        case .bytes(let b, let mime):
            req.headers.add(name: "Content-Type", value: mime)
            req.body = .bytes(ByteBuffer(bytes: b))
        }
        return req
    }

    /// Sends `r` and returns the answer, whatever its status; only a transport failure throws.
    /// `progress` is told the bytes moved so far: of the request's body as the connection takes it
    /// (in 256 KiB pieces), or else of the answer's body as it comes.
    public func send(_ r: WireRequest, maxBody: Int = 64 << 20, timeout: TimeAmount? = nil,
                     progress: (@Sendable (Int64) -> Void)? = nil) async throws -> WireResponse {
        let first = try await sendOnce(r, maxBody: maxBody, timeout: timeout, progress: progress)
        // A MyLifeDB server that refuses the password as HTTP Basic, or a session it no longer
        // knows: a login with the same password, then the call once more.
        guard scheme == .basic, first.status == 401, r.path != MyLifeDBAPI.loginPath, try await login() else { return first }
        return try await sendOnce(r, maxBody: maxBody, timeout: timeout, progress: progress)
    }

    /// `POST /api/system/auth/login` with the password: the session it gives stands for the
    /// password from now on. False when the server refuses it (or has no such route).
    public func login() async throws -> Bool {
        let r = try await sendOnce(MyLifeDBAPI.login(password: credential.token), maxBody: 1 << 20, timeout: nil, progress: nil)
        guard (200..<300).contains(r.status) else { return false }
        let cookie = r.headers["set-cookie"].flatMap { c in
            c.split(separator: ";").first.flatMap { kv -> String? in
                let parts = kv.split(separator: "=", maxSplits: 1)
                return parts.count == 2 && parts[0].trimmingCharacters(in: .whitespaces) == "session" ? String(parts[1]) : nil
            }
        }
        guard let id = r.json["sessionId"]?.stringValue ?? cookie else { return false }
        useSession(id)
        return true
    }

    func sendOnce(_ r: WireRequest, maxBody: Int, timeout: TimeAmount?, progress: (@Sendable (Int64) -> Void)?) async throws -> WireResponse {
        do {
            var req = httpRequest(r)
            let uploading: Bool
            if let progress, case .bytes(let b, _) = r.body {
                req.body = .stream(ChunkedBytes(bytes: b, onPull: progress), length: .known(Int64(b.count)))
                uploading = true
            } else { uploading = false }
            let resp = try await calls.execute(req, timeout: timeout ?? self.timeout)
            guard let progress, !uploading else { return try await WireResponse(resp, maxBody: maxBody) }
            var body: [UInt8] = []
            for try await chunk in resp.body {
                body += chunk.readableBytesView
                guard body.count <= maxBody else { throw WireFailure.network("the answer is larger than \(maxBody) bytes") }
                progress(Int64(body.count))
            }
            var headers: [String: String] = [:]
            for h in resp.headers { headers[h.name.lowercased()] = h.value }
            return WireResponse(status: Int(resp.status.code), headers: headers, body: body)
        } catch let f as WireFailure {
            throw f
        } catch {
            throw WireFailure.network(String(describing: error))
        }
    }

    /// Sends `r`; a non-2xx answer throws its `WireFailure`.
    @discardableResult
    public func call(_ r: WireRequest, progress: (@Sendable (Int64) -> Void)? = nil) async throws -> WireResponse {
        let resp = try await send(r, progress: progress)
        guard (200..<300).contains(resp.status) || (r.goneIsDone && resp.status == 404) else { throw WireFailure.of(resp) }
        return resp
    }

    /// `GET /events` (W-14..W-17): what the stream says, until the server closes it or the
    /// connection fails. (Silence is the caller's to judge: `FeedMachine`.)
    public func events(query: String = "", lastEventID: String?) -> AsyncThrowingStream<SSEItem, Error> {
        let batches = eventBatches(query: query, lastEventID: lastEventID)
        return AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    for try await batch in batches { for item in batch { continuation.yield(item) } }
                    continuation.finish()
                } catch { continuation.finish(throwing: error) }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// The same stream, as the frames each read from the network brought: a burst of events
    /// arrives as one batch, which the caller can apply in one transaction.
    public func eventBatches(query: String = "", lastEventID: String?, path: String = "/events") -> AsyncThrowingStream<[SSEItem], Error> {
        var req = httpRequest(WireRequest(method: "GET", path: path + query))
        req.headers.replaceOrAdd(name: "Accept", value: "text/event-stream")
        if let lastEventID { req.headers.add(name: "Last-Event-ID", value: lastEventID) }
        let client = stream, request = req
        return AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    let resp = try await client.execute(request, timeout: .hours(24 * 365))
                    guard resp.status == .ok else { throw WireFailure.of(try await WireResponse(resp, maxBody: 1 << 20)) }
                    var parser = SSEParser()
                    for try await chunk in resp.body {
                        let items = parser.feed(chunk.readableBytesView)
                        if !items.isEmpty { continuation.yield(items) }
                    }
                    continuation.finish()
                } catch let e as WireFailure {
                    continuation.finish(throwing: e)
                } catch is CancellationError {
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: WireFailure.network(String(describing: error)))
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}

/// The server's client under the current key, shared by the parts of the sync engine: after a
/// 401, `waitForNewKey(refused:)` re-reads the key every 2 s and swaps in a client with the new one
/// (or returns at once if another part already has).
public final class KeyedClient: Sendable {
    public let baseURL: String
    let load: @Sendable () throws -> Credential
    let scheme: WireClient.Scheme
    private let current: Mutex<(credential: Credential, client: WireClient)>

    public init(baseURL: String, credential: Credential, scheme: WireClient.Scheme = .bearer, load: @escaping @Sendable () throws -> Credential) {
        self.baseURL = baseURL; self.load = load; self.scheme = scheme
        current = Mutex((credential, WireClient(baseURL: baseURL, credential: credential, scheme: scheme)))
    }

    public var client: WireClient { current.withLock { $0.client } }

    /// Returns once the current client is not `refused` (the one the server said 401 to).
    public func waitForNewKey(refused: WireClient) async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(2))
            let (done, old): (Bool, WireClient?) = current.withLock { cur in
                if cur.client !== refused { return (true, nil) }
                guard let fresh = try? load(), fresh.token != cur.credential.token else { return (false, nil) }
                let old = cur.client
                cur = (fresh, WireClient(baseURL: baseURL, credential: fresh, scheme: scheme))
                return (true, old)
            }
            if let old { await old.shutdown() }
            if done { return }
        }
    }

    public func shutdown() async { await client.shutdown() }
}

/// A request body handed to the connection in 256 KiB pieces, telling `onPull` how many bytes it
/// has taken so far (the connection takes the next piece once it can write it).
struct ChunkedBytes: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let bytes: [UInt8]
    let onPull: @Sendable (Int64) -> Void
    static let piece = 256 << 10

    struct AsyncIterator: AsyncIteratorProtocol {
        let bytes: [UInt8]
        let onPull: @Sendable (Int64) -> Void
        var offset = 0
        mutating func next() async -> ByteBuffer? {
            guard offset < bytes.count else { return nil }
            let end = Swift.min(bytes.count, offset + ChunkedBytes.piece)
            let buf = ByteBuffer(bytes: bytes[offset..<end])
            offset = end
            onPull(Int64(offset))
            return buf
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(bytes: bytes, onPull: onPull) }
}
