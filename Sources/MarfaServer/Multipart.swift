import Foundation

/// `multipart/form-data` (RFC 7578) as upstream's clients send a blob: the file part is the blob.
enum Multipart {
    struct Part {
        var name: String?
        var filename: String?
        var mimeType: String
        var bytes: [UInt8]
    }

    /// The part that holds the file: the one named `file`, else the first with a file name, else
    /// the only part. A body that is not a well-formed form, or a form with no such part, is a 400.
    static func filePart(_ body: [UInt8], contentType: String) throws -> Part {
        guard let boundary = parameter("boundary", of: contentType), !boundary.isEmpty, boundary.utf8.count <= 70 else {
            throw APIError.validation("a multipart/form-data body needs a boundary parameter (RFC 7578)", field: "Content-Type")
        }
        let parts = try split(body, boundary: boundary)
        if let p = parts.first(where: { $0.name == "file" }) ?? parts.first(where: { $0.filename != nil }) ?? (parts.count == 1 ? parts.first : nil) {
            return p
        }
        throw APIError.validation("the form has no file part (a part named \"file\", or one with a filename)", field: "file")
    }

    /// A parameter of a header value (`multipart/form-data; boundary=xyz`, `form-data; name="file"`).
    static func parameter(_ name: String, of value: String) -> String? {
        for piece in value.split(separator: ";").dropFirst() {
            let kv = piece.split(separator: "=", maxSplits: 1)
            guard kv.count == 2, kv[0].trimmingCharacters(in: .whitespaces).lowercased() == name else { continue }
            var v = kv[1].trimmingCharacters(in: .whitespaces)
            if v.count >= 2, v.hasPrefix("\""), v.hasSuffix("\"") { v = String(v.dropFirst().dropLast()) }
            return v
        }
        return nil
    }

    static func split(_ body: [UInt8], boundary: String) throws -> [Part] {
        let delimiter = Array("--\(boundary)".utf8)
        let bad = APIError.validation("the multipart/form-data body is not well formed (RFC 7578)", field: "body")
        // The first delimiter; anything before it is a preamble.
        guard var at = find(delimiter, in: body, from: 0) else { throw bad }
        var parts: [Part] = []
        while true {
            at += delimiter.count
            // `--` after a delimiter ends the form.
            if at + 1 < body.count, body[at] == 45, body[at + 1] == 45 { return parts }
            // The rest of the delimiter line (transport padding), then the part's headers.
            guard let lineEnd = find([13, 10], in: body, from: at) else { throw bad }
            let headerStart = lineEnd + 2
            guard let headerEnd = find([13, 10, 13, 10], in: body, from: headerStart) else { throw bad }
            let contentStart = headerEnd + 4
            guard let next = find([13, 10] + delimiter, in: body, from: headerEnd + 2) else { throw bad }
            let headers = String(decoding: body[headerStart..<headerEnd], as: UTF8.self)
            var part = Part(name: nil, filename: nil, mimeType: "application/octet-stream",
                            bytes: next >= contentStart ? Array(body[contentStart..<next]) : [])
            for line in headers.components(separatedBy: "\r\n") {
                let kv = line.split(separator: ":", maxSplits: 1)
                guard kv.count == 2 else { continue }
                let value = kv[1].trimmingCharacters(in: .whitespaces)
                switch kv[0].trimmingCharacters(in: .whitespaces).lowercased() {
                case "content-disposition":
                    part.name = parameter("name", of: value)
                    part.filename = parameter("filename", of: value)
                case "content-type":
                    part.mimeType = value.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? part.mimeType
                default: break
                }
            }
            parts.append(part)
            at = next + 2
        }
    }

    /// Where `needle` first occurs in `hay` from `start` (memchr for its first byte, then a compare).
    static func find(_ needle: [UInt8], in hay: [UInt8], from start: Int) -> Int? {
        guard !needle.isEmpty, start >= 0, hay.count - start >= needle.count else { return nil }
        return hay.withUnsafeBytes { h -> Int? in
            let base = h.baseAddress!
            var i = start
            let last = hay.count - needle.count
            while i <= last {
                guard let hit = memchr(base + i, Int32(needle[0]), last - i + 1) else { return nil }
                i = base.distance(to: UnsafeRawPointer(hit))
                if memcmp(base + i, needle, needle.count) == 0 { return i }
                i += 1
            }
            return nil
        }
    }
}
