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
    /// Canonical encoding: sorted keys, no escaped slashes. Used for storage and for queue payloads.
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

    /// Decodes any JSON value, a bare string or number included.
    public static func value(from text: String) throws -> JSONValue {
        guard let v = try decode([JSONValue].self, from: "[" + text + "]").first else {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "empty"))
        }
        return v
    }

    public static func object(from text: String) -> [String: JSONValue] {
        (try? decode([String: JSONValue].self, from: text)) ?? [:]
    }
}

extension JSONValue: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
}
