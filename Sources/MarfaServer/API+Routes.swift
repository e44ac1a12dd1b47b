import Foundation
import Hummingbird
import HTTPTypes
import MarfaModel
import NIOCore

/// The routes of wire.md, by area.
extension API {
    /// Keys and tenants (W-18).
    func registerKeys(_ router: RecordingRouter) {
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
        router.get("/tenants/current") { request, _ in try answer(request) { p in ["tenant": .object(try store.tenant(p))] } }
        router.post("/tenants") { request, _ -> Response in
            let p = try principal(request)
            guard p.isAdmin && p.isOperator else { throw APIError(403, "forbidden", "only the operator's admin keys add tenants") }
            let (_, b) = try await body(request)
            guard let name = b["name"]?.stringValue, !name.isEmpty else { throw APIError.missing("name") }
            let (tenant, key) = try store.createTenant(name: name)
            return json(201, ["tenant": .object(tenant), "key": .string(key)])
        }
    }

    /// Types (W-9, W-10).
    func registerTypes(_ router: RecordingRouter) {
        router.get("/types") { request, _ -> Response in
            let types = try store.listTypes(try principal(request)).map { JSONCoding.encode($0) }.joined(separator: ",")
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "[" + types + "]\n")))
        }
        router.get("/types/:id") { request, context -> Response in
            let t = try store.getType(try principal(request), try id(context))
            return json(200, JSONCoding.object(from: JSONCoding.encode(t)))
        }
        router.post("/types") { request, _ in try await write(request) { try store.registerType($0, $1) } }
    }

    /// Edges (W-11, W-12).
    func registerEdges(_ router: RecordingRouter) {
        router.post("/edges") { request, _ in try await write(request) { try store.createEdge($0, $1) } }
        router.get("/edges") { request, _ in try answer(request) { p in try store.listEdges(p, try edgeQuery(request)) } }
        router.get("/edges/:id") { request, context in try answer(request) { p in try store.getEdge(p, try id(context)) } }
        router.delete("/edges/:id") { request, context in try await write(request) { p, _ in (200, try store.deleteEdge(p, try id(context))) } }
        router.get("/items/:id/edges") { request, context in try answer(request) { p in try store.listEdges(p, try edgeQuery(request, item: (try id(context), "source"))) } }
        router.get("/items/:id/backrefs") { request, context in try answer(request) { p in try store.listEdges(p, try edgeQuery(request, item: (try id(context), "target"))) } }
    }

    /// Blobs (W-13).
    func registerBlobs(_ router: RecordingRouter) {
        router.post("/blobs") { request, _ -> Response in
            let p = try principal(request)
            let contentType = request.headers[.contentType] ?? "application/octet-stream"
            var mime = contentType.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
            var data = try await blobBytes(request, upTo: maxBlob)
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
    }

    /// The event stream (W-14..W-17).
    func registerEvents(_ router: RecordingRouter) {
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
    }

    /// Items (§2).
    func registerItems(_ router: RecordingRouter) {
        router.post("/items") { request, _ in try await write(request) { try store.createItem($0, $1) } }
        router.get("/items") { request, _ in try answer(request) { p in try store.listItems(p, try listQuery(request)) } }
        router.get("/items/:id") { request, context in try answer(request) { p in try store.getItem(p, try id(context)) } }
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
        router.get("/items/:id/versions") { request, context in try answer(request) { p in try store.versions(p, try id(context)) } }
    }

    /// Tags (§2 metadata).
    func registerTags(_ router: RecordingRouter) {
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
        router.get("/metadata/tags") { request, _ in try answer(request) { p in try store.tagCounts(p) } }
    
    }
}
