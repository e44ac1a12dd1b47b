import Foundation
import Hummingbird
import Logging
import MarfaModel
import HTTPTypes
import NIOCore

extension HTTPField.Name {
    static let requestID = HTTPField.Name("X-Request-ID")!
    static let idempotencyKey = HTTPField.Name("Idempotency-Key")!
    static let idempotencyReplayed = HTTPField.Name("Idempotency-Replayed")!
    static let lastEventID = HTTPField.Name("Last-Event-ID")!
    static let xAccelBuffering = HTTPField.Name("X-Accel-Buffering")!
}

/// Turns every failure into the W-3 envelope and gives every response an `X-Request-ID` (W-4):
/// the client's own, else a fresh one.
struct EnvelopeMiddleware<Context: RequestContext>: RouterMiddleware {
    let log: Logger
    /// The routes, for 405 answers.
    var routes: RouteTable?

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let given = request.headers[.requestID].flatMap { $0.count <= 200 && !$0.isEmpty ? $0 : nil }
        let rid = given ?? ItemID.make()
        var response: Response
        do {
            response = try await next(request, context)
        } catch let e as HTTPError where e.status == .notFound {
            // A real path with another method: 405 and the methods it takes.
            let allowed = routes?.methods(for: request.uri.path) ?? []
            if allowed.isEmpty {
                response = Self.response(for: e, requestID: rid, log: log)
            } else {
                response = Self.json(405, APIError(405, "method_not_allowed", "\(request.uri.path) takes \(allowed.joined(separator: ", "))").body)
                response.headers[.allow] = allowed.joined(separator: ", ")
            }
        } catch {
            response = Self.response(for: error, requestID: rid, log: log)
        }
        response.headers[.requestID] = rid
        log.info("\(request.method) \(request.uri.path) \(response.status.code)", metadata: ["request_id": "\(rid)"])
        return response
    }

    /// The W-3 answer for a failure: ours as they are, the framework's mapped to our codes,
    /// anything else a logged 500.
    static func response(for error: any Error, requestID rid: String, log: Logger) -> Response {
        switch error {
        case let e as APIError:
            return json(e.status, e.body)
        case let e as HTTPError:
            let code: String
            switch e.status.code {
            case 404: code = "not_found"
            case 405: code = "method_not_allowed"
            case 413: code = "request_too_large"
            case 401: code = "unauthorized"
            default: code = "validation_error"
            }
            return json(e.status.code, APIError(e.status.code, code, e.body ?? e.status.reasonPhrase).body)
        default:
            if let answer = ServerFailure.answer(error) {
                log.warning("request not done: \(answer.code)", metadata: ["request_id": "\(rid)", "error": "\(ServerFailure.describe(error))"])
                var headers = HTTPFields()
                if let seconds = answer.retryAfter { headers[.retryAfter] = String(seconds) }
                return json(answer.status, APIError(answer.status, answer.code, answer.message).body, headers: headers)
            }
            log.error("request failed", metadata: ["request_id": "\(rid)", "error": "\(ServerFailure.describe(error))"])
            return json(500, APIError(500, "internal_error", "the server failed; see its log (request \(rid))").body)
        }
    }

    static func json(_ status: Int, _ body: [String: JSONValue], headers: HTTPFields = [:]) -> Response {
        var h = headers
        h[.contentType] = "application/json"
        return Response(status: .init(code: status), headers: h, body: .init(byteBuffer: ByteBuffer(string: JSONCoding.encode(body) + "\n")))
    }
}

/// The routes of wire.md, over one `ServerStore`.
struct API: Sendable {
    let store: ServerStore
    /// The largest JSON body accepted (413 `request_too_large` past it).
    let maxBody: Int
    /// The largest blob accepted.
    let maxBlob: Int
    let eventRetention: Duration
    let heartbeat: Duration

    func json(_ status: Int, _ body: [String: JSONValue]) -> Response { EnvelopeMiddleware<BasicRequestContext>.json(status, body) }

    static func isMIMEType(_ s: String) -> Bool {
        let parts = s.split(separator: "/", omittingEmptySubsequences: false)
        let token: (Substring) -> Bool = { !$0.isEmpty && $0.utf8.allSatisfy { $0 > 32 && $0 < 127 && !"()<>@,;:\\\"/[]?={}".utf8.contains($0) } }
        return parts.count == 2 && token(parts[0]) && token(parts[1])
    }

    static func blobHeaders(_ info: ServerStore.BlobInfo) -> HTTPFields {
        [.contentType: info.mimeType, .eTag: "\"\(info.hash)\"", .acceptRanges: "bytes", .cacheControl: "private, max-age=31536000, immutable"]
    }

    func principal(_ request: Request) throws -> Principal {
        // RFC 9110 §11.1: the scheme is case-insensitive.
        guard let auth = request.headers[.authorization], auth.count > 7, auth.prefix(7).lowercased() == "bearer " else { throw APIError.unauthorized }
        guard let p = try store.authenticate(String(auth.dropFirst(7)).trimmingCharacters(in: .whitespaces)) else { throw APIError.unauthorized }
        return p
    }

    static func tooLarge(_ limit: Int) -> APIError { APIError(413, "request_too_large", "the body is larger than \(limit) bytes") }
    /// The client stopped sending before its body was complete: its error, not the server's.
    static let cutShort = APIError(400, "validation_error", "the request body ended before it was complete")

    /// The request's body, at most `limit` bytes; a body declared larger is refused before any of
    /// it is read.
    func bytes(_ request: Request, upTo limit: Int) async throws -> ByteBuffer {
        if let declared = request.headers[.contentLength].flatMap({ Int($0) }), declared > limit { throw Self.tooLarge(limit) }
        do { return try await request.body.collect(upTo: limit) } catch is NIOTooManyBytesError { throw Self.tooLarge(limit) } catch {
            throw Self.cutShort
        }
    }

    /// A blob's body, at most `limit` bytes. One that declares its length (within the limit) is
    /// read into memory; a chunked one, whose size shows only as it comes, goes to a temporary file
    /// beside the database first, so an upload refused at the limit never holds more than a chunk.
    func blobBytes(_ request: Request, upTo limit: Int) async throws -> [UInt8] {
        if request.headers[.contentLength] != nil { return Array(try await bytes(request, upTo: limit).readableBytesView) }
        let path = store.directory + "/.upload-" + UUID().uuidString
        guard FileManager.default.createFile(atPath: path, contents: nil), let file = FileHandle(forWritingAtPath: path) else {
            throw APIError(500, "internal_error", "cannot write a temporary file for the upload")
        }
        defer { unlink(path) }
        do {
            defer { try? file.close() }
            var total = 0
            for try await chunk in request.body {
                total += chunk.readableBytes
                if total > limit { throw Self.tooLarge(limit) }
                do { try file.write(contentsOf: chunk.readableBytesView) } catch where ServerFailure.isNoSpace(error) {
                    throw error
                } catch {
                    throw APIError(500, "internal_error", "the server cannot keep the upload: \(error)")
                }
            }
        } catch let e as APIError { throw e } catch where ServerFailure.isNoSpace(error) { throw error } catch { throw Self.cutShort }
        return [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    func body(_ request: Request) async throws -> (text: String, object: [String: JSONValue]) {
        let buffer = try await bytes(request, upTo: maxBody)
        let text = String(buffer: buffer)
        if text.isEmpty { return ("", [:]) }
        guard String(validating: buffer.readableBytesView, as: UTF8.self) != nil else { throw APIError.validation("the body is not UTF-8") }
        let value: JSONValue
        do { value = try JSONParser.parse(text) } catch { throw APIError.validation("the body is not valid JSON: \(error)") }
        guard case .object(let o) = value else { throw APIError.validation("the body must be a JSON object") }
        return (text, o)
    }

    /// A write with W-5 semantics: a repeated `Idempotency-Key` replays the stored answer.
    func idempotent(_ request: Request, _ p: Principal, bodyText: String, _ run: () throws -> (Int, [String: JSONValue])) throws -> Response {
        guard let key = request.headers[.idempotencyKey] else {
            let (status, out) = try run()
            return json(status, out)
        }
        guard !key.isEmpty, key.count <= 255 else { throw APIError.validation("Idempotency-Key is 1 to 255 characters", field: "Idempotency-Key") }
        let fingerprint = "\(request.method) \(request.uri.path)\n" + bodyText
        switch try store.idempotent(p, key: key, fingerprint: fingerprint, run) {
        case .replayed(let stored, let status, let body):
            guard stored == fingerprint else {
                throw APIError(422, "idempotency_key_reused", "this Idempotency-Key was used with a different request")
            }
            var r = json(status, JSONCoding.object(from: body))
            r.headers[.idempotencyReplayed] = "true"
            return r
        case .fresh(let status, let out):
            return json(status, out)
        }
    }

    /// A path parameter, percent-decoded (ids, tags and hashes are opaque strings, W-1: `caf%C3%A9`
    /// is `café`, `folder%3Aa%2Fb` is `folder:a/b`).
    func param(_ context: BasicRequestContext, _ name: String) throws -> String {
        guard let raw = context.parameters.get(name) else { throw APIError.missing(name) }
        guard let s = raw.removingPercentEncoding else { throw APIError.validation("\(name) is not valid percent-encoded UTF-8", field: name) }
        return s
    }

    func id(_ context: BasicRequestContext) throws -> String { try param(context, "id") }

    static func list(_ s: String?) -> [String] {
        s.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty } } ?? []
    }

    /// `updated_after`, `limit` and `cursor`, shared by every list (W-6).
    /// `maxLimit`: 200 for items, 500 for edges (upstream's bound).
    func paging(_ request: Request, maxLimit: Int = 200) throws -> (updatedAfter: String?, limit: Int, cursor: String?) {
        let qp = request.uri.queryParameters
        // An empty `cursor=` is the first page, as no cursor is.
        var out: (updatedAfter: String?, limit: Int, cursor: String?) = (nil, 50, qp.get("cursor").flatMap { $0.isEmpty ? nil : String($0) })
        if let u = qp.get("updated_after") {
            guard Timestamp.parse(u) != nil else { throw APIError.validation("updated_after must be an RFC 3339 timestamp", field: "updated_after") }
            out.updatedAfter = u
        }
        if let l = qp.get("limit") {
            guard let n = Int(l), (1...maxLimit).contains(n) else { throw APIError.validation("limit is 1 to \(maxLimit)", field: "limit") }
            out.limit = n
        }
        return out
    }

    func edgeQuery(_ request: Request, item: (String, String)? = nil) throws -> ServerStore.EdgeQuery {
        var q = ServerStore.EdgeQuery()
        (q.updatedAfter, q.limit, q.cursor) = try paging(request, maxLimit: 500)
        q.edgeTypes = Self.list(request.uri.queryParameters.get("edge_type"))
        q.item = item
        return q
    }

    func listQuery(_ request: Request) throws -> ServerStore.ListQuery {
        let qp = request.uri.queryParameters
        var q = ServerStore.ListQuery()
        (q.updatedAfter, q.limit, q.cursor) = try paging(request)
        q.type = qp.get("type")
        if let s = qp.get("state") {
            guard s == "any" || ServerStore.states.contains(s) else { throw APIError.validation("state is active, archived, trashed or any", field: "state") }
            q.state = s
        }
        if let t = qp.get("tier"), t != "all" {
            guard ServerStore.tiers.contains(t) else { throw APIError.validation("tier is library, feed or all", field: "tier") }
            q.tier = t
        }
        q.tags = Self.list(qp.get("tags"))
        q.source = qp.get("source").map { String($0) }
        for (name, field) in [("since", \ServerStore.ListQuery.since), ("until", \ServerStore.ListQuery.until)] {
            guard let v = qp.get(name) else { continue }
            guard let d = Timestamp.parse(String(v)) else { throw APIError.validation("\(name) must be an RFC 3339 timestamp", field: name) }
            q[keyPath: field] = Timestamp.format(Date(timeIntervalSince1970: d))
        }
        // Lists are in `updated_at` order, oldest first, so that a cursor and `updated_after` can
        // follow them (W-6); another order, and upstream's filter grammar, are refused, not ignored.
        if let sort = qp.get("sort"), sort != "updated_at" {
            throw APIError.validation("items are listed by updated_at only (W-6)", field: "sort")
        }
        if let dir = qp.get("direction"), dir != "asc" {
            throw APIError.validation("items are listed oldest change first (direction asc) only (W-6)", field: "direction")
        }
        if qp.get("filter") != nil { throw APIError.validation("this server does not implement the filter grammar", field: "filter") }
        for extra in Self.list(qp.get("include")) {
            switch extra {
            case "metadata", "extensions": q.includeMetadata = true
            case "edges": throw APIError.validation("edges are not inlined here: GET /items/{id}/edges", field: "include")
            default: throw APIError.validation("include takes metadata or extensions", field: "include")
            }
        }
        return q
    }

    /// A read: its answer for the caller, as 200 JSON.
    func answer(_ request: Request, _ run: (Principal) throws -> [String: JSONValue]) throws -> Response {
        json(200, try run(try principal(request)))
    }

    /// A write: the caller, its JSON body (empty for DELETE), and `run` once per `Idempotency-Key` (W-5).
    func write(_ request: Request, _ run: (Principal, [String: JSONValue]) throws -> (Int, [String: JSONValue])) async throws -> Response {
        let p = try principal(request)
        let (text, b) = try await body(request)
        return try idempotent(request, p, bodyText: text) { try run(p, b) }
    }

    /// Every route of wire.md, each recorded in `table` (405 answers).
    func register(_ base: Router<BasicRequestContext>, table: RouteTable) {
        let router = RecordingRouter(router: base, table: table)
        registerKeys(router)
        registerTypes(router)
        registerEdges(router)
        registerBlobs(router)
        registerEvents(router)
        registerItems(router)
        registerTags(router)
    }
}
