import Foundation

/// A strict JSON parser (RFC 8259) into `JSONValue`: integers stay integers, numbers with a
/// fraction or exponent are doubles parsed with correct rounding, and any trailing text is an error.
public struct JSONParser {
    public struct Failure: Error, CustomStringConvertible {
        public var offset: Int
        public var reason: String
        public var description: String { "invalid JSON at byte \(offset): \(reason)" }
    }

    let b: [UInt8]
    var i = 0
    var depth = 0

    public static func parse(_ text: String) throws -> JSONValue {
        var p = JSONParser(b: Array(text.utf8))
        p.skipSpace()
        let v = try p.value()
        p.skipSpace()
        if p.i != p.b.count { throw p.fail("unexpected text after the value") }
        return v
    }

    func fail(_ reason: String) -> Failure { Failure(offset: i, reason: reason) }

    mutating func skipSpace() {
        while i < b.count, b[i] == 0x20 || b[i] == 0x0a || b[i] == 0x0d || b[i] == 0x09 { i += 1 }
    }

    mutating func literal(_ word: String, _ v: JSONValue) throws -> JSONValue {
        let w = Array(word.utf8)
        guard i + w.count <= b.count, Array(b[i..<i + w.count]) == w else { throw fail("expected \(word)") }
        i += w.count
        return v
    }

    mutating func value() throws -> JSONValue {
        guard i < b.count else { throw fail("unexpected end") }
        switch b[i] {
        case UInt8(ascii: "{"): return try object()
        case UInt8(ascii: "["): return try array()
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): return try literal("true", .bool(true))
        case UInt8(ascii: "f"): return try literal("false", .bool(false))
        case UInt8(ascii: "n"): return try literal("null", .null)
        default: return try number()
        }
    }

    mutating func object() throws -> JSONValue {
        depth += 1; defer { depth -= 1 }
        if depth > 512 { throw fail("nested too deeply") }
        i += 1
        var o: [String: JSONValue] = [:]
        skipSpace()
        if i < b.count, b[i] == UInt8(ascii: "}") { i += 1; return .object(o) }
        while true {
            skipSpace()
            guard i < b.count, b[i] == UInt8(ascii: "\"") else { throw fail("expected a key") }
            let k = try string()
            skipSpace()
            guard i < b.count, b[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
            i += 1; skipSpace()
            o[k] = try value()
            if try closes(UInt8(ascii: "}")) { return .object(o) }
        }
    }

    mutating func array() throws -> JSONValue {
        depth += 1; defer { depth -= 1 }
        if depth > 512 { throw fail("nested too deeply") }
        i += 1
        var a: [JSONValue] = []
        skipSpace()
        if i < b.count, b[i] == UInt8(ascii: "]") { i += 1; return .array(a) }
        while true {
            skipSpace()
            a.append(try value())
            if try closes(UInt8(ascii: "]")) { return .array(a) }
        }
    }

    /// After a member of an object or array: true at its closing bracket, false after a comma.
    mutating func closes(_ close: UInt8) throws -> Bool {
        skipSpace()
        guard i < b.count else { throw fail("unexpected end") }
        if b[i] == UInt8(ascii: ",") { i += 1; return false }
        if b[i] == close { i += 1; return true }
        throw fail("expected ',' or '\(Character(UnicodeScalar(close)))'")
    }

    mutating func hex4() throws -> UInt32 {
        guard i + 4 <= b.count, let v = UInt32(String(decoding: b[i..<i + 4], as: UTF8.self), radix: 16) else { throw fail("bad \\u escape") }
        i += 4
        return v
    }

    mutating func string() throws -> String {
        i += 1
        let start = i
        i = plainEnd(from: i)
        // The common string, with no escape: validated and made in one step.
        if i < b.count, b[i] == UInt8(ascii: "\"") {
            let end = i
            i += 1
            guard let s = b.withUnsafeBufferPointer({ String(validating: UnsafeBufferPointer(rebasing: $0[start..<end]), as: UTF8.self) }) else {
                throw fail("string is not UTF-8")
            }
            return s
        }
        // Escapes: the decoded text is at most as long as the encoded one, to its closing quote.
        var out = [UInt8]()
        out.reserveCapacity(encodedEnd(from: i) - start)
        out.append(contentsOf: b[start..<i])
        while true {
            guard i < b.count else { throw fail("unterminated string") }
            let c = b[i]
            if c == UInt8(ascii: "\"") { i += 1; break }
            if c < 0x20 { throw fail("control character in a string") }
            i += 1
            guard i < b.count else { throw fail("unterminated escape") }
            let e = b[i]; i += 1
            switch e {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0c)
            case UInt8(ascii: "n"): out.append(0x0a)
            case UInt8(ascii: "r"): out.append(0x0d)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xd800..<0xdc00).contains(scalar), i + 1 < b.count, b[i] == UInt8(ascii: "\\"), b[i + 1] == UInt8(ascii: "u") {
                    i += 2
                    let low = try hex4()
                    guard (0xdc00..<0xe000).contains(low) else { throw fail("bad surrogate pair") }
                    scalar = 0x10000 + ((scalar - 0xd800) << 10) + (low - 0xdc00)
                }
                guard let u = Unicode.Scalar(scalar) else { throw fail("bad \\u escape") }
                out.append(contentsOf: Array(String(u).utf8))
            default: throw fail("bad escape")
            }
            // Bytes that need no decoding are copied a run at a time.
            let run = i
            i = plainEnd(from: i)
            out.append(contentsOf: b[run..<i])
        }
        guard let s = String(validating: out, as: UTF8.self) else { throw fail("string is not UTF-8") }
        return s
    }

    /// Where a string whose text goes on at `from` ends (its closing quote), escapes skipped;
    /// the end of the text if it has none. Only a size: the decoding finds the errors.
    func encodedEnd(from: Int) -> Int {
        var j = from
        while true {
            j = plainEnd(from: j)
            guard j < b.count, b[j] != UInt8(ascii: "\""), b[j] >= 0x20 else { return min(j, b.count) }
            j += 2
        }
    }

    /// The end of the run of a string's bytes from `from` that need no decoding: the index of the
    /// first quote, backslash or control character, or the end of the text. Read from the buffer
    /// directly: a note's body is thousands of bytes, read at every save.
    func plainEnd(from: Int) -> Int {
        b.withUnsafeBufferPointer { p in
            var j = from
            while j < p.count {
                let c = p[j]
                if c == UInt8(ascii: "\"") || c == UInt8(ascii: "\\") || c < 0x20 { break }
                j += 1
            }
            return j
        }
    }

    /// The string value of top-level `key` in JSON object `text`, read without building the other
    /// values (they are skipped): a note's body from its properties. nil when the text is not a
    /// well-formed object, has no such key, or its value is not a string (the last of duplicates wins,
    /// as in `parse`).
    public static func stringField(_ key: String, in text: String) -> String? {
        var p = JSONParser(b: Array(text.utf8))
        p.skipSpace()
        guard p.i < p.b.count, p.b[p.i] == UInt8(ascii: "{") else { return nil }
        p.i += 1
        var found: String?
        p.skipSpace()
        if p.i < p.b.count, p.b[p.i] == UInt8(ascii: "}") { return nil }
        while true {
            p.skipSpace()
            guard p.i < p.b.count, p.b[p.i] == UInt8(ascii: "\""), let k = try? p.string() else { return nil }
            p.skipSpace()
            guard p.i < p.b.count, p.b[p.i] == UInt8(ascii: ":") else { return nil }
            p.i += 1
            p.skipSpace()
            guard p.i < p.b.count else { return nil }
            if k == key {
                guard let v = try? p.value() else { return nil }
                found = v.stringValue
            } else {
                guard (try? p.skip()) != nil else { return nil }
            }
            p.skipSpace()
            guard p.i < p.b.count else { return nil }
            if p.b[p.i] == UInt8(ascii: ",") { p.i += 1; continue }
            guard p.b[p.i] == UInt8(ascii: "}") else { return nil }
            return found
        }
    }

    /// Moves past one value: a string without building it (only its end and escapes are looked at),
    /// anything else parsed.
    mutating func skip() throws {
        guard i < b.count else { throw fail("unexpected end") }
        switch b[i] {
        case UInt8(ascii: "\""):
            i += 1
            while true {
                i = plainEnd(from: i)
                guard i < b.count else { throw fail("unterminated string") }
                let c = b[i]
                if c == UInt8(ascii: "\"") { i += 1; return }
                if c < 0x20 { throw fail("control character in a string") }
                i += 2
            }
        default:
            _ = try value()
        }
    }

    mutating func number() throws -> JSONValue {
        let start = i
        if i < b.count, b[i] == UInt8(ascii: "-") { i += 1 }
        var isDouble = false
        func digits(_ p: inout JSONParser) -> Int { let s = p.i; while p.i < p.b.count, p.b[p.i] >= 48, p.b[p.i] <= 57 { p.i += 1 }; return p.i - s }
        guard digits(&self) > 0 else { throw fail("expected a value") }
        if i < b.count, b[i] == UInt8(ascii: ".") { i += 1; isDouble = true; guard digits(&self) > 0 else { throw fail("bad number") } }
        if i < b.count, b[i] == UInt8(ascii: "e") || b[i] == UInt8(ascii: "E") {
            i += 1; isDouble = true
            if i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") { i += 1 }
            guard digits(&self) > 0 else { throw fail("bad exponent") }
        }
        let text = String(decoding: b[start..<i], as: UTF8.self)
        // A number is kept exactly or refused, never changed: integers are 64-bit, other numbers
        // finite doubles (1e309 and a 100-digit integer are errors, not infinity or a rounding).
        if !isDouble {
            guard let n = Int64(text) else { throw fail("an integer past 64 bits") }
            return .int(n)
        }
        guard let d = Double(text), d.isFinite else { throw fail("a number past a double's range") }
        return .double(d)
    }
}
