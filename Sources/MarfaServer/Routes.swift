import Foundation
import Hummingbird
import Logging
import MarfaModel
import HTTPTypes
import NIOCore
import Synchronization

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
            log.error("request failed", metadata: ["request_id": "\(rid)", "error": "\(error)"])
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

    /// The request's body, at most `limit` bytes: a body declared larger is refused before any of
    /// it is read; one that ends before its declared length (the client stopped sending) is the
    /// client's error, not the server's.
    func bytes(_ request: Request, upTo limit: Int) async throws -> ByteBuffer {
        if let declared = request.headers[.contentLength].flatMap({ Int($0) }), declared > limit {
            throw APIError(413, "request_too_large", "the body is larger than \(limit) bytes")
        }
        do { return try await request.body.collect(upTo: limit) } catch is NIOTooManyBytesError {
            throw APIError(413, "request_too_large", "the body is larger than \(limit) bytes")
        } catch {
            throw APIError(400, "validation_error", "the request body ended before it was complete")
        }
    }

    /// A blob's body, at most `limit` bytes, written to a temporary file as it comes and read back
    /// once complete: an upload refused past the limit (chunked, so its size is known only then)
    /// never holds more than a chunk in memory.
    func spooled(_ request: Request, upTo limit: Int) async throws -> [UInt8] {
        if let declared = request.headers[.contentLength].flatMap({ Int($0) }), declared > limit {
            throw APIError(413, "request_too_large", "the body is larger than \(limit) bytes")
        }
        let path = NSTemporaryDirectory() + "marfafs-upload-" + UUID().uuidString
        guard FileManager.default.createFile(atPath: path, contents: nil), let file = FileHandle(forWritingAtPath: path) else {
            throw APIError(500, "internal_error", "cannot write a temporary file for the upload")
        }
        defer { try? file.close(); unlink(path) }
        var total = 0
        do {
            for try await chunk in request.body {
                total += chunk.readableBytes
                if total > limit { throw APIError(413, "request_too_large", "the body is larger than \(limit) bytes") }
                do { try file.write(contentsOf: chunk.readableBytesView) } catch {
                    throw APIError(500, "internal_error", "the server cannot keep the upload: \(error)")
                }
            }
        } catch let e as APIError { throw e } catch {
            throw APIError(400, "validation_error", "the request body ended before it was complete")
        }
        try file.close()
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
        if let stored = try store.storedResponse(p, key: key) {
            guard stored.fingerprint == fingerprint else {
                throw APIError(422, "idempotency_key_reused", "this Idempotency-Key was used with a different request")
            }
            var r = json(stored.status, JSONCoding.object(from: stored.body))
            r.headers[.idempotencyReplayed] = "true"
            return r
        }
        let (status, out) = try run()
        try store.storeResponse(p, key: key, fingerprint: fingerprint, status: status, body: JSONCoding.encode(out))
        return json(status, out)
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

    /// A write: the caller, its JSON body (empty for DELETE), and `run` once per `Idempotency-Key` (W-5).
    func write(_ request: Request, _ run: (Principal, [String: JSONValue]) throws -> (Int, [String: JSONValue])) async throws -> Response {
        let p = try principal(request)
        let (text, b) = try await body(request)
        return try idempotent(request, p, bodyText: text) { try run(p, b) }
    }

    func register(_ base: Router<BasicRequestContext>, table: RouteTable) {
        let router = RecordingRouter(router: base, table: table)
        // Keys and tenants (W-18)
        router.post("/keys") { request, _ -> Response in
            let (_, b) = try await body(request)
            // W-18 bootstrap: only on a server with no keys yet (`bootstrap` answers nil otherwise).
            if request.headers[.authorization] == nil, let (key, plain) = try store.bootstrap(label: b["label"]?.stringValue ?? "admin") {
                return json(201, key.merging(["key": .string(plain)]) { _, new in new })
            }
            let p = try principal(request)
            guard p.isAdmin else { throw APIError(403, "forbidden", "managing keys needs an admin key") }
            guard let label = b["label"]?.stringValue, !label.isEmpty else { throw APIError.missing("label") }
            let role = try ServerStore.enumField(b, "role", ["admin", "member"]) ?? "member"
            var perms: [String: String]?
            if let v = b["type_permissions"], v != .null {
                guard case .object(let o) = v else { throw APIError.validation("type_permissions maps types to read or write", field: "type_permissions") }
                perms = [:]
                for (t, a) in o {
                    guard let s = a.stringValue, s == "read" || s == "write" else {
                        throw APIError.validation("type_permissions maps types to read or write", field: "type_permissions")
                    }
                    perms![t] = s
                }
            }
            let (key, plain) = try store.createKey(p, label: label, role: role, typePermissions: perms)
            return json(201, key.merging(["key": .string(plain)]) { _, new in new })
        }
        router.get("/keys") { request, _ -> Response in
            let p = try principal(request)
            guard p.isAdmin else { throw APIError(403, "forbidden", "listing keys needs an admin key") }
            return json(200, ["keys": .array(try store.listKeys(p).map(JSONValue.object))])
        }
        router.delete("/keys/:id") { request, context -> Response in
            let p = try principal(request)
            guard p.isAdmin else { throw APIError(403, "forbidden", "revoking keys needs an admin key") }
            guard try store.revokeKey(p, id: try id(context)) else { throw APIError(404, "not_found", "no such key") }
            return json(200, ["ok": .bool(true)])
        }
        router.get("/tenants/current") { request, _ -> Response in
            let p = try principal(request)
            return json(200, ["tenant": .object(try store.tenant(p))])
        }
        router.post("/tenants") { request, _ -> Response in
            let p = try principal(request)
            guard p.isAdmin && p.isOperator else { throw APIError(403, "forbidden", "only the operator's admin keys add tenants") }
            let (_, b) = try await body(request)
            guard let name = b["name"]?.stringValue, !name.isEmpty else { throw APIError.missing("name") }
            let (tenant, key) = try store.createTenant(name: name)
            return json(201, ["tenant": .object(tenant), "key": .string(key)])
        }

        // Types (W-9, W-10)
        router.get("/types") { request, _ -> Response in
            let types = try store.listTypes(try principal(request)).map { JSONCoding.encode($0) }.joined(separator: ",")
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "[" + types + "]\n")))
        }
        router.get("/types/:id") { request, context -> Response in
            let t = try store.getType(try principal(request), try id(context))
            return json(200, JSONCoding.object(from: JSONCoding.encode(t)))
        }
        router.post("/types") { request, _ in try await write(request) { try store.registerType($0, $1) } }

        // Edges (W-11, W-12)
        router.post("/edges") { request, _ in try await write(request) { try store.createEdge($0, $1) } }
        router.get("/edges") { request, _ -> Response in
            let p = try principal(request)
            return json(200, try store.listEdges(p, try edgeQuery(request)))
        }
        router.get("/edges/:id") { request, context -> Response in
            let p = try principal(request)
            return json(200, try store.getEdge(p, try id(context)))
        }
        router.delete("/edges/:id") { request, context in try await write(request) { p, _ in (200, try store.deleteEdge(p, try id(context))) } }
        router.get("/items/:id/edges") { request, context -> Response in
            let p = try principal(request)
            return json(200, try store.listEdges(p, try edgeQuery(request, item: (try id(context), "source"))))
        }
        router.get("/items/:id/backrefs") { request, context -> Response in
            let p = try principal(request)
            return json(200, try store.listEdges(p, try edgeQuery(request, item: (try id(context), "target"))))
        }

        // Blobs (W-13)
        router.post("/blobs") { request, _ -> Response in
            let p = try principal(request)
            let contentType = request.headers[.contentType] ?? "application/octet-stream"
            var mime = contentType.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
            var data = try await spooled(request, upTo: maxBlob)
            // Upstream's clients may send the file as a multipart form: its file part is the blob.
            if mime == "multipart/form-data" {
                let part = try Multipart.filePart(data, contentType: contentType)
                data = part.bytes
                mime = part.mimeType
            }
            guard Self.isMIMEType(mime) else { throw APIError.validation("Content-Type must be the blob's MIME type (type/subtype)", field: "Content-Type") }
            let (status, out) = try store.putBlob(p, bytes: data, mimeType: mime,
                                                  expected: request.uri.queryParameters.get("hash").map { String($0) })
            return json(status, out)
        }
        router.head("/blobs/:hash") { request, context -> Response in
            let p = try principal(request)
            let info = try store.blobInfo(p, try param(context, "hash"))
            var h = Self.blobHeaders(info)
            h[.contentLength] = String(info.size)
            return Response(status: .ok, headers: h, body: ResponseBody())
        }
        router.get("/blobs/:hash") { request, context -> Response in
            let p = try principal(request)
            let info = try store.blobInfo(p, try param(context, "hash"))
            var h = Self.blobHeaders(info)
            if request.headers[.ifNoneMatch]?.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == "\"\(info.hash)\"" }) == true {
                return Response(status: .notModified, headers: h)
            }
            let range: Range<Int>?
            do { range = try ServerStore.byteRange(request.headers[.range], size: info.size) } catch let e as APIError {
                var r = json(e.status, e.body)
                r.headers[.contentRange] = "bytes */\(info.size)"
                return r
            }
            let served = range ?? 0..<info.size
            if let range { h[.contentRange] = "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(info.size)" }
            let store = self.store
            return Response(status: range == nil ? .ok : .partialContent, headers: h, body: ResponseBody(contentLength: served.count) { writer in
                let chunk = 1 << 20
                var at = served.lowerBound
                while at < served.upperBound {
                    let end = min(at + chunk, served.upperBound)
                    try await writer.write(ByteBuffer(data: try store.blobBytes(p, info.hash, at..<end)))
                    at = end
                }
                try await writer.finish(nil)
            })
        }

        // Events (W-14..W-17)
        router.get("/events") { request, _ -> Response in
            let p = try principal(request)
            let qp = request.uri.queryParameters
            var filter = EventFilter()
            filter.events = Set(Self.list(qp.get("event")))
            filter.edgeTypes = Set(Self.list(qp.get("edge_type")))
            filter.type = qp.get("type").map { String($0) }
            let start = try store.streamStart(p, lastEventID: request.headers[.lastEventID], retention: eventRetention)
            let headers: HTTPFields = [.contentType: "text/event-stream", .cacheControl: "no-cache", .xAccelBuffering: "no"]
            let streamer = EventStreamer(store: store, principal: p, filter: filter, heartbeat: heartbeat)
            return Response(status: .ok, headers: headers, body: ResponseBody { writer in
                switch start {
                case .tooOld(let minRetained, let requested):
                    let data = JSONCoding.encode(["min_retained_id": .string(String(minRetained)), "requested": .string(requested)] as [String: JSONValue])
                    try await writer.write(ByteBuffer(string: EventStreamer.frame(id: nil, event: "catchup_too_old", data: data)))
                case .after(let id):
                    do {
                        try await streamer.run(start: id) { try await writer.write(ByteBuffer(string: $0)) }
                    } catch {
                        return  // the subscriber went away
                    }
                }
                try await writer.finish(nil)
            })
        }

        // Items (§2)
        router.post("/items") { request, _ in try await write(request) { try store.createItem($0, $1) } }
        router.get("/items") { request, _ -> Response in
            let p = try principal(request)
            return json(200, try store.listItems(p, try listQuery(request)))
        }
        router.get("/items/:id") { request, context -> Response in
            let p = try principal(request)
            return json(200, try store.getItem(p, try id(context)))
        }
        router.patch("/items/:id") { request, context in try await write(request) { (200, try store.patchItem($0, try id(context), $1)) } }
        router.delete("/items/:id") { request, context in
            try await write(request) { p, _ in _ = try store.setState(p, try id(context), to: "trashed"); return (200, ["ok": .bool(true)]) }
        }
        router.post("/items/:id/transition") { request, context in
            try await write(request) { p, b in
                guard let state = try ServerStore.enumField(b, "state", ServerStore.states) else { throw APIError.missing("state") }
                return (200, try store.setState(p, try id(context), to: state))
            }
        }
        router.post("/items/:id/restore") { request, context in
            try await write(request) { p, _ in (200, try store.setState(p, try id(context), to: "active", restore: true)) }
        }
        router.get("/items/:id/versions") { request, context -> Response in
            let p = try principal(request)
            return json(200, try store.versions(p, try id(context)))
        }

        // Tags (§2 metadata)
        // PUT replaces the tag set, PATCH adds to it.
        router.put("/items/:id/metadata") { request, context in
            try await write(request) { p, b in (200, try store.changeTags(p, try id(context), .replace(try ServerStore.checkTags(b["tags"] ?? .array([]))))) }
        }
        router.patch("/items/:id/metadata") { request, context in
            try await write(request) { p, b in (200, try store.changeTags(p, try id(context), .add(try ServerStore.checkTags(b["tags"] ?? .array([]))))) }
        }
        router.post("/items/:id/tags") { request, context in
            try await write(request) { p, b in
                guard b["tags"] != nil else { throw APIError.missing("tags") }
                return (200, try store.changeTags(p, try id(context), .add(try ServerStore.checkTags(b["tags"]))))
            }
        }
        router.delete("/items/:id/tags/:tag") { request, context in
            try await write(request) { p, _ in
                (200, try store.changeTags(p, try id(context), .remove(try param(context, "tag"))))
            }
        }
        router.get("/metadata/tags") { request, _ -> Response in
            let p = try principal(request)
            return json(200, try store.tagCounts(p))
        }
    }
}

/// Every route's path and method, so a request for a real path with a method it does not take is
/// answered 405 with `Allow`, not 404.
final class RouteTable: Sendable {
    private let routes = Mutex<[(segments: [Substring], method: String)]>([])

    func add(_ path: String, _ method: HTTPRequest.Method) {
        routes.withLock { $0.append((path.split(separator: "/"), method.rawValue)) }
    }

    /// The methods the routes matching `path` take (empty: no route has that path).
    func methods(for path: String) -> [String] {
        let parts = path.split(separator: "/")
        return routes.withLock { table in
            table.filter { r in
                r.segments.count == parts.count && zip(r.segments, parts).allSatisfy { $0.hasPrefix(":") || $0 == $1 }
            }.map(\.method)
        }
    }
}

/// The router as `API.register` uses it: each route is also recorded in the `RouteTable`.
struct RecordingRouter {
    let router: Router<BasicRequestContext>
    let table: RouteTable
    typealias Handler<R: ResponseGenerator> = @Sendable (Request, BasicRequestContext) async throws -> R

    private func on<R: ResponseGenerator>(_ path: String, _ method: HTTPRequest.Method, _ handler: @escaping Handler<R>) {
        table.add(path, method)
        router.on(RouterPath(path), method: method, use: handler)
    }
    func get<R: ResponseGenerator>(_ path: String, use handler: @escaping Handler<R>) { on(path, .get, handler) }
    func head<R: ResponseGenerator>(_ path: String, use handler: @escaping Handler<R>) { on(path, .head, handler) }
    func post<R: ResponseGenerator>(_ path: String, use handler: @escaping Handler<R>) { on(path, .post, handler) }
    func put<R: ResponseGenerator>(_ path: String, use handler: @escaping Handler<R>) { on(path, .put, handler) }
    func patch<R: ResponseGenerator>(_ path: String, use handler: @escaping Handler<R>) { on(path, .patch, handler) }
    func delete<R: ResponseGenerator>(_ path: String, use handler: @escaping Handler<R>) { on(path, .delete, handler) }
}
