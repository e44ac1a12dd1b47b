import Foundation
import MarfaModel

/// File names of items (FS-4..FS-7). Pure functions; no storage, no I/O.
public enum Names {
    public static let maxNameBytes = 255
    public static let slashStandIn: Character = "\u{2215}"  // ∕ DIVISION SLASH

    /// A title as a file name stem: `/` shown as `∕`, control characters dropped (FS-6).
    public static func escape(_ title: String) -> String {
        var out = String.UnicodeScalarView()
        for u in title.unicodeScalars {
            if u == "/" { out.append(contentsOf: String(slashStandIn).unicodeScalars); continue }
            if u.properties.generalCategory == .control { continue }
            out.append(u)
        }
        return String(out)
    }

    /// The inverse of `escape` for the characters it maps: `∕` back to `/`.
    public static func unescape(_ name: String) -> String {
        name.replacingOccurrences(of: String(slashStandIn), with: "/")
    }

    /// Cuts `s` to at most `bytes` UTF-8 bytes on a scalar boundary.
    public static func truncate(_ s: String, toBytes bytes: Int) -> String {
        if s.utf8.count <= bytes { return s }
        var out = String.UnicodeScalarView()
        var used = 0
        for u in s.unicodeScalars {
            let n = String(u).utf8.count
            if used + n > bytes { break }
            out.append(u); used += n
        }
        return String(out)
    }

    /// Splits a file name into stem and extension (with its dot). A leading dot is part of the stem.
    public static func split(_ name: String) -> (stem: String, ext: String) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (name, "") }
        let ext = String(name[dot...])
        if ext.count > 16 || ext.utf8.contains(UInt8(ascii: " ")) { return (name, "") }
        return (String(name[..<dot]), ext)
    }

    /// A name from stem and extension that fits in 255 bytes, cutting the stem, never the extension.
    public static func compose(stem: String, suffix: String = "", ext: String) -> String {
        let room = maxNameBytes - suffix.utf8.count - ext.utf8.count
        return truncate(stem, toBytes: max(1, room)) + suffix + ext
    }

    /// The FS-7 disambiguation suffix: ` [<last 8 hex digits of id>]`.
    public static func collisionSuffix(id: String) -> String {
        var hex: [UInt8] = []
        for b in id.utf8.reversed() where hex.count < 8 {
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): hex.append(b)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): hex.append(b + 32)
            default: continue
            }
        }
        hex.reverse()
        return " [" + String(decoding: hex, as: UTF8.self) + "]"
    }

    /// True when a name is usable as a file name here (not empty, no `/`, no NUL, not `.`/`..`, ≤ 255 bytes).
    public static func isValidComponent(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && !name.utf8.contains(UInt8(ascii: "/")) && !name.utf8.contains(0)
            && name.utf8.count <= maxNameBytes
    }

    /// The extension a blob item shows (FS-5): from its file name, else from its MIME type.
    public static func blobExtension(filename: String?, mimeType: String?) -> String {
        if let f = filename { let e = split(f).ext; if !e.isEmpty { return e } }
        if let m = mimeType?.lowercased(), let e = mimeExtensions[m] { return e }
        return ""
    }

    public static func mimeType(forExtension ext: String) -> String {
        let e = ext.lowercased()
        return mimeExtensions.first(where: { $0.value == e })?.key ?? fallbackMime[e] ?? "application/octet-stream"
    }

    /// The `core.file` subtype for a MIME type (W-10).
    public static func fileType(forMime mime: String) -> String {
        if mime.hasPrefix("image/") { return "core.file.image" }
        if mime.hasPrefix("audio/") { return "core.file.audio" }
        if mime.hasPrefix("video/") { return "core.file.video" }
        if mime == "application/pdf" || mime.hasPrefix("text/") || mime.contains("document") { return "core.file.document" }
        return "core.file"
    }

    static let mimeExtensions: [String: String] = [
        "image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp", "image/svg+xml": ".svg",
        "audio/mpeg": ".mp3", "audio/ogg": ".ogg", "audio/wav": ".wav", "video/mp4": ".mp4", "video/webm": ".webm",
        "application/pdf": ".pdf", "text/plain": ".txt", "text/csv": ".csv", "application/json": ".json",
        "application/zip": ".zip", "application/octet-stream": ".bin", "text/html": ".html",
    ]
    static let fallbackMime: [String: String] = [
        ".jpeg": "image/jpeg", ".htm": "text/html", ".md": "text/markdown", ".ico": "image/vnd.microsoft.icon", ".bmp": "image/bmp",
        ".avif": "image/avif", ".heic": "image/heic", ".tif": "image/tiff", ".tiff": "image/tiff", ".m4a": "audio/mp4",
        ".flac": "audio/flac", ".mov": "video/quicktime", ".mkv": "video/x-matroska", ".css": "text/css", ".canvas": "application/json",
    ]
}

/// One entry that wants a name in a directory, for FS-7 disambiguation.
public struct NameClaim: Sendable {
    public var key: Int64
    public var stem: String { didSet { baseName = Names.compose(stem: stem, ext: ext) } }
    public var ext: String { didSet { baseName = Names.compose(stem: stem, ext: ext) } }
    public var createdAt: String
    public var id: String
    /// The name it asks for: its stem and extension, composed once (a directory's table looks
    /// it up several times per change).
    public private(set) var baseName: String
    public init(key: Int64, stem: String, ext: String, createdAt: String, id: String) {
        self.key = key; self.stem = stem; self.ext = ext; self.createdAt = createdAt; self.id = id
        baseName = Names.compose(stem: stem, ext: ext)
    }
}

extension Names {
    /// Resolves FS-7 for a group of claims that share one base name: the oldest (created_at, then id)
    /// keeps it, the others get the id suffix. Returns key → name.
    public static func resolve(group: [NameClaim]) -> [(Int64, String)] {
        if group.isEmpty { return [] }
        if group.count == 1 { return [(group[0].key, group[0].baseName)] }
        let sorted = group.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
        var out: [(Int64, String)] = [(sorted[0].key, sorted[0].baseName)]
        for c in sorted.dropFirst() {
            out.append((c.key, compose(stem: c.stem, suffix: collisionSuffix(id: c.id), ext: c.ext)))
        }
        return out
    }

    /// FS-7 over a whole directory.
    public static func resolve(claims: [NameClaim]) -> [Int64: String] {
        var groups: [String: [NameClaim]] = [:]
        for c in claims { groups[c.baseName, default: []].append(c) }
        var out: [Int64: String] = [:]
        out.reserveCapacity(claims.count)
        for (_, g) in groups { for (k, n) in resolve(group: g) { out[k] = n } }
        return out
    }

    /// The name an item asks for in a directory before FS-7 disambiguation (FS-4, FS-5).
    public static func stemAndExt(id: String, type: TypeSchema, properties: [String: JSONValue],
                                  fileName: String?) -> (stem: String, ext: String) {
        if let f = fileName, Names.isValidComponent(f) { return Names.split(f) }
        if TypeSchema.isBlobType(type.id) {
            let filename = properties["filename"]?.stringValue
            let ext = Names.blobExtension(filename: filename, mimeType: properties["mime_type"]?.stringValue)
            if let t = properties[type.titleField]?.stringValue, !Names.escape(t).isEmpty {
                let stem = Names.escape(t)
                return Names.split(stem).ext.lowercased() == ext.lowercased() && !ext.isEmpty
                    ? (Names.split(stem).stem, ext) : (stem, ext)
            }
            if let f = filename, !Names.escape(f).isEmpty { return (Names.split(Names.escape(f)).stem, ext) }
            return (id, ext)
        }
        if let t = properties[type.titleField]?.stringValue {
            let s = Names.escape(t)
            if !s.isEmpty && s != "." && s != ".." { return (s, ".md") }
        }
        return (id, ".md")
    }
}
