import Foundation
import MarfaModel

/// One HTTP call of the wire contract, before it is sent.
public struct WireRequest: Sendable, Equatable {
    public enum Body: Sendable, Equatable {
        case none
        case json([String: JSONValue])
        /// Raw bytes with their MIME type (`POST /blobs`).
        case bytes([UInt8], mimeType: String)
    }
    public var method: String
    /// Path and query, percent-encoded, starting with `/`.
    public var path: String
    public var body: Body = .none
    public var idempotencyKey: String?
    /// A 404 is what the call wanted (deleting what is already gone): `call` takes it as done.
    public var goneIsDone = false
    /// Headers of this call besides the credential's (`Range`).
    public var headers: [String: String] = [:]

    public init(method: String, path: String, body: Body = .none, idempotencyKey: String? = nil) {
        self.method = method; self.path = path; self.body = body; self.idempotencyKey = idempotencyKey
    }

    /// A path segment, percent-encoded (ids are opaque strings, W-1).
    public static func segment(_ s: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~:@")
        return s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s
    }

    public enum MappingError: Error, Equatable, CustomStringConvertible {
        case missing(String)
        public var description: String {
            switch self { case .missing(let f): return "the queued mutation has no \(f)" }
        }
    }

    /// The call that sends a queued mutation (W-5: its idempotency key on every retry).
    /// `baseVersion` replaces the version an update was based on when the server has since
    /// acknowledged a newer one of our own (a create, or an earlier update); `blob` gives the bytes
    /// of an upload.
    public static func sending(_ m: Mutation, baseVersion: Int64? = nil, blob: ((String) throws -> [UInt8]?)? = nil) throws -> WireRequest {
        let item = segment(m.itemID)
        let p = m.payload
        func field(_ name: String) throws -> JSONValue {
            guard let v = p[name], v != .null else { throw MappingError.missing(name) }
            return v
        }
        var r: WireRequest
        switch m.kind {
        case .create:
            var body = p
            body["id"] = .string(m.itemID)
            _ = try field("type")
            r = WireRequest(method: "POST", path: "/items", body: .json(body))
        case .update:
            var body: [String: JSONValue] = [:]
            if let v = baseVersion { body["version"] = .int(v) } else if case .int(let v)? = p["base_version"], v > 0 { body["version"] = .int(v) }
            if let props = p["properties"], props != .null {
                body["properties"] = props
                body["properties_mode"] = "replace"
            }
            if let tier = p["tier"], tier != .null { body["tier"] = tier }
            if let ext = p["extensions"], ext != .null { body["extensions"] = ext }
            r = WireRequest(method: "PATCH", path: "/items/\(item)", body: .json(body))
        case .transition:
            r = WireRequest(method: "POST", path: "/items/\(item)/transition", body: .json(["state": try field("state")]))
        case .setTags:
            r = WireRequest(method: "PUT", path: "/items/\(item)/metadata", body: .json(["tags": try field("tags")]))
        case .createEdge:
            var body: [String: JSONValue] = ["id": try field("id"), "source_id": try field("source_id"),
                                             "target_id": try field("target_id"), "edge_type": try field("edge_type")]
            if let props = p["properties"], props != .null { body["properties"] = props }
            r = WireRequest(method: "POST", path: "/edges", body: .json(body))
        case .deleteEdge:
            guard let id = try field("id").stringValue else { throw MappingError.missing("id") }
            r = WireRequest(method: "DELETE", path: "/edges/\(segment(id))")
            r.goneIsDone = true
        case .uploadBlob:
            guard let hash = try field("hash").stringValue else { throw MappingError.missing("hash") }
            guard let bytes = try blob?(hash) else { throw MappingError.missing("the bytes of blob \(hash)") }
            let mime = p["mime_type"]?.stringValue ?? "application/octet-stream"
            r = WireRequest(method: "POST", path: "/blobs?hash=\(segment(hash))", body: .bytes(bytes, mimeType: mime))
        }
        r.idempotencyKey = m.idempotencyKey
        return r
    }
}
