import Foundation

/// A JSON value with the distinctions the wire keeps (integers apart from doubles).
/// Owns nothing; never loses a type: a string stays a string however it looks.
public enum JSONValue: Hashable, Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public var stringValue: String? { if case .string(let s) = self { return s }; return nil }
    public var objectValue: [String: JSONValue]? { if case .object(let o) = self { return o }; return nil }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a }; return nil }
}

extension JSONValue: Codable {
    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null; return }
        if let b = try? c.decode(Bool.self) { self = .bool(b); return }
        if let i = try? c.decode(Int64.self) { self = .int(i); return }
        if let d = try? c.decode(Double.self) { self = .double(d); return }
        if let s = try? c.decode(String.self) { self = .string(s); return }
        if let a = try? c.decode([JSONValue].self) { self = .array(a); return }
        if let o = try? c.decode([String: JSONValue].self) { self = .object(o); return }
        throw DecodingError.dataCorruptedError(in: c, debugDescription: "not a JSON value")
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .int(let i): try c.encode(i)
        case .double(let d): try c.encode(d)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }
}

public enum JSONCoding {
    /// Canonical text of a JSON value (sorted keys), written directly: properties and queue
    /// payloads are encoded on every write, so this skips the generic encoder.
    public static func encode(_ value: [String: JSONValue]) -> String {
        var out = ""
        out.reserveCapacity(256)
        write(.object(value), to: &out)
        return out
    }

    public static func encode(_ value: JSONValue) -> String {
        var out = ""
        write(value, to: &out)
        return out
    }

    static func write(_ v: JSONValue, to out: inout String) {
        switch v {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .int(let i): out += String(i)
        case .double(let d):
            if d.isFinite {
                out += d == d.rounded() && abs(d) < 1e15 ? String(format: "%.1f", d) : "\(d)"
            } else { out += "null" }
        case .string(let s): writeString(s, to: &out)
        case .array(let a):
            out += "["
            for (i, e) in a.enumerated() { if i > 0 { out += "," }; write(e, to: &out) }
            out += "]"
        case .object(let o):
            out += "{"
            for (i, k) in o.keys.sorted().enumerated() {
                if i > 0 { out += "," }
                writeString(k, to: &out); out += ":"; write(o[k]!, to: &out)
            }
            out += "}"
        }
    }

    /// `s` as a double-quoted JSON string. With `yamlSafe`, also escapes what YAML does not take
    /// literally inside double quotes (DEL, C1 controls, BOM, line and paragraph separators), so
    /// the result is the same string in both languages.
    public static func quoted(_ s: String, yamlSafe: Bool = false) -> String {
        var out = ""
        writeString(s, to: &out, yamlSafe: yamlSafe)
        return out
    }

    static func writeString(_ s: String, to out: inout String, yamlSafe: Bool = false) {
        out += "\""
        var plain = true
        for u in s.utf8 where u < 0x20 || u == 0x22 || u == 0x5c || (yamlSafe && u >= 0x7f) { plain = false; break }
        if plain { out += s; out += "\""; return }
        if !yamlSafe || !s.utf8.contains(where: { $0 >= 0x7f }) {
            // Byte runs that need no escape are copied whole (notes are mostly such runs).
            var bytes = [UInt8](); bytes.reserveCapacity(s.utf8.count + 64)
            var copy = s
            copy.withUTF8 { u in
                var run = 0
                for i in 0..<u.count {
                    let b = u[i]
                    guard b < 0x20 || b == 0x22 || b == 0x5c else { continue }
                    bytes.append(contentsOf: UnsafeBufferPointer(rebasing: u[run..<i]))
                    run = i + 1
                    bytes.append(0x5c)
                    switch b {
                    case 0x22, 0x5c: bytes.append(b)
                    case 0x0a: bytes.append(UInt8(ascii: "n"))
                    case 0x0d: bytes.append(UInt8(ascii: "r"))
                    case 0x09: bytes.append(UInt8(ascii: "t"))
                    default:
                        bytes.append(UInt8(ascii: "u")); bytes.append(0x30); bytes.append(0x30)
                        bytes.append(ItemIDHex.digits[Int(b >> 4)]); bytes.append(ItemIDHex.digits[Int(b & 0x0f)])
                    }
                }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: u[run..<u.count]))
            }
            out += String(decoding: bytes, as: UTF8.self)
            out += "\""
            return
        }
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                let v = u.value
                let escape = v < 0x20 || (yamlSafe && (v == 0x7f || (0x80..<0xa0).contains(v) || v == 0xfeff || v == 0x2028 || v == 0x2029))
                if escape { out += "\\u" + String(repeating: "0", count: 4 - String(v, radix: 16).count) + String(v, radix: 16) } else { out.unicodeScalars.append(u) }
            }
        }
        out += "\""
    }

    /// Canonical encoding of any Encodable: sorted keys, no escaped slashes.
    public static func encode<T: Encodable>(_ value: T) -> String {
        let enc = JSONEncoder()
        enc.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding our own value types cannot fail; a failure is a programming error worth a clear message.
        guard let data = try? enc.encode(value), let s = String(data: data, encoding: .utf8) else {
            preconditionFailure("JSON encoding of \(T.self) failed")
        }
        return s
    }

    public static func decode<T: Decodable>(_ type: T.Type, from text: String) throws -> T {
        try JSONDecoder().decode(type, from: Data(text.utf8))
    }

    /// Decodes any JSON value, a bare string or number included, keeping integers apart from
    /// doubles (`1.0` stays a double).
    public static func value(from text: String) throws -> JSONValue { try JSONParser.parse(text) }

    public static func object(from text: String) -> [String: JSONValue] {
        (try? value(from: text))?.objectValue ?? [:]
    }


}

extension JSONValue: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
}

/// Lowercase hex digits, for ids and `\\u` escapes.
enum ItemIDHex {
    static let digits = Array("0123456789abcdef".utf8)
}
