import Foundation
import MarfaModel
import MarfaStore

/// A MyLifeDB server's HTTP API as recorded in `shared/spec/mylifedb.md` (FS-34): which of its two
/// route versions a server has, and each call in both. Paths are data-relative, `/`-separated,
/// without a leading slash; every segment is percent-encoded. Answers are read liberally: errors
/// come as `{"error":{"code","message"}}` or as `{"error":"…"}`.
public struct MyLifeDBAPI: Sendable {
    public enum Routes: String, Sendable {
        /// `/api/data/*` (a7d8d30e and later).
        case current
        /// `/api/library/*` and `/api/notifications/stream` (before 2026-05-04).
        case legacy
    }
    public var routes: Routes

    public init(routes: Routes) { self.routes = routes }

    static func encoded(_ path: String) -> String {
        path.split(separator: "/", omittingEmptySubsequences: true).map { WireRequest.segment(String($0)) }.joined(separator: "/")
    }

    static func query(_ s: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~/")
        return s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s
    }

    static func root(_ routes: Routes) -> WireRequest {
        WireRequest(method: "GET", path: routes == .current ? "/api/data/root" : "/api/library/root")
    }

    static let loginPath = "/api/system/auth/login"

    static func login(password: String) -> WireRequest {
        WireRequest(method: "POST", path: loginPath, body: .json(["password": .string(password)]))
    }

    /// A folder's children, one level.
    func tree(_ folder: String) -> WireRequest {
        let base = routes == .current ? "/api/data/tree" : "/api/library/tree"
        return WireRequest(method: "GET", path: base + "?path=\(Self.query(folder))&depth=1")
    }

    func info(_ path: String) -> WireRequest {
        routes == .current ? WireRequest(method: "GET", path: "/api/data/files/" + Self.encoded(path))
            : WireRequest(method: "GET", path: "/api/library/file-info?path=" + Self.query(path))
    }

    func raw(_ path: String, range: ClosedRange<Int64>? = nil) -> WireRequest {
        var r = WireRequest(method: "GET", path: "/raw/" + Self.encoded(path))
        if let range { r.headers["Range"] = "bytes=\(range.lowerBound)-\(range.upperBound)" }
        return r
    }

    func put(_ path: String, _ bytes: [UInt8]) -> WireRequest {
        WireRequest(method: "PUT", path: "/raw/" + Self.encoded(path), body: .bytes(bytes, mimeType: "application/octet-stream"))
    }

    func makeFolder(parent: String, name: String) -> WireRequest {
        routes == .current
            ? WireRequest(method: "POST", path: "/api/data/folders", body: .json(["parent": .string(parent), "name": .string(name)]))
            : WireRequest(method: "POST", path: "/api/library/folder", body: .json(["path": .string(parent), "name": .string(name)]))
    }

    func move(_ path: String, toFolder folder: String) -> WireRequest {
        routes == .current
            ? WireRequest(method: "PATCH", path: "/api/data/files/" + Self.encoded(path), body: .json(["parent": .string(folder)]))
            : WireRequest(method: "POST", path: "/api/library/move", body: .json(["path": .string(path), "targetPath": .string(folder)]))
    }

    func rename(_ path: String, to name: String) -> WireRequest {
        routes == .current
            ? WireRequest(method: "PATCH", path: "/api/data/files/" + Self.encoded(path), body: .json(["name": .string(name)]))
            : WireRequest(method: "POST", path: "/api/library/rename", body: .json(["path": .string(path), "newName": .string(name)]))
    }

    func delete(_ path: String) -> WireRequest {
        var r = routes == .current ? WireRequest(method: "DELETE", path: "/api/data/files/" + Self.encoded(path))
            : WireRequest(method: "DELETE", path: "/api/library/file?path=" + Self.query(path))
        r.goneIsDone = true
        return r
    }

    /// A preview image in the server's archive.
    static func preview(_ name: String) -> WireRequest { WireRequest(method: "GET", path: "/sqlar/" + encoded(name)) }

    var eventsPath: String { routes == .current ? "/api/data/events" : "/api/notifications/stream" }

    // MARK: reading answers

    /// A tree listing's children: files and folders, paths made whole (the answer's are relative to
    /// the folder asked for). The server's own temporary files (`.tmp-…`) are left out.
    static func children(_ json: [String: JSONValue], of folder: String) -> (files: [RemoteFile], folders: [String]) {
        var files: [RemoteFile] = [], folders: [String] = []
        guard case .array(let list)? = json["children"] else { return ([], []) }
        for case .object(let c) in list {
            guard let rel = c["path"]?.stringValue, !rel.isEmpty else { continue }
            let name = rel.split(separator: "/").last.map(String.init) ?? rel
            if name.hasPrefix(".tmp-") { continue }
            let path = folder.isEmpty ? rel : folder + "/" + rel
            if c["type"]?.stringValue == "folder" {
                folders.append(path)
            } else {
                files.append(RemoteFile(path: path, size: int(c["size"]) ?? 0, modifiedMs: int(c["modifiedAt"]) ?? 0))
            }
        }
        return (files, folders)
    }

    /// A file's description (`GET /api/data/files/…`): its hash, and what the server says of it,
    /// as extended attributes under `user.mylifedb.`.
    static func file(_ json: [String: JSONValue], path: String) -> RemoteFile? {
        guard json["isFolder"]?.boolValue != true else { return nil }
        var attrs: [String: String] = [:]
        func keep(_ key: String, _ name: String) {
            switch json[key] {
            case .string(let s)?: attrs["user.mylifedb." + name] = s
            case .bool(let b)?: attrs["user.mylifedb." + name] = b ? "true" : "false"
            case .int(let n)?: attrs["user.mylifedb." + name] = String(n)
            default: break
            }
        }
        keep("hash", "hash"); keep("textPreview", "text_preview"); keep("previewStatus", "preview_status")
        keep("isPinned", "pinned"); keep("mimeType", "mime_type"); keep("previewSqlar", "preview_sqlar")
        return RemoteFile(path: json["path"]?.stringValue ?? path, size: int(json["size"]) ?? 0, modifiedMs: int(json["modifiedAt"]) ?? 0,
                          hash: json["hash"]?.stringValue?.lowercased(), attributes: attrs)
    }

    static func int(_ v: JSONValue?) -> Int64? {
        switch v { case .int(let n)?: return n; case .double(let d)?: return Int64(d); default: return nil }
    }
}

extension JSONValue {
    var boolValue: Bool? { if case .bool(let b) = self { return b }; return nil }
}
