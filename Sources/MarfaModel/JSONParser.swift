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
        let start = i + 1
        let end = plainEnd(from: start)
        // The common string, with no escape: made in one step (the text came from a String, so
        // any run between two ASCII quotes is whole UTF-8).
        if end < b.count, b[end] == UInt8(ascii: "\"") {
            i = end + 1
            return b.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[start..<end]), as: UTF8.self) }
        }
        var out = [UInt8]()
        try stringBytes(into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// The string whose opening quote is at `i`, decoded and appended to `out` as UTF-8; `i` moves
    /// past its closing quote. The text came from a String and each escape makes a whole scalar
    /// (a lone surrogate is refused), so what is appended is valid UTF-8 without a check.
    mutating func stringBytes(into out: inout [UInt8]) throws {
        i += 1
        while true {
            // Bytes that need no decoding are copied a run at a time.
            let run = i
            i = plainEnd(from: i)
            if i > run { b.withUnsafeBufferPointer { out.append(contentsOf: UnsafeBufferPointer(rebasing: $0[run..<i])) } }
            guard i < b.count else { throw fail("unterminated string") }
            let c = b[i]
            if c == UInt8(ascii: "\"") { i += 1; return }
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
                UTF8.encode(u) { out.append($0) }
            default: throw fail("bad escape")
            }
        }
    }

    /// The end of the run of a string's bytes from `from` that need no decoding: the index of the
    /// first quote, backslash or control character, or the end of the text. A note's body is
    /// thousands of bytes, read out of its properties at every read of the note: eight bytes are
    /// looked at a time (a word in which none can be one of those three ends no run), then the
    /// word that may hold one byte by byte.
    func plainEnd(from: Int) -> Int {
        b.withUnsafeBufferPointer { p in
            let n = p.count
            var j = from
            if let base = p.baseAddress {
                let raw = UnsafeRawPointer(base)
                let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
                while j + 8 <= n {
                    let w = raw.loadUnaligned(fromByteOffset: j, as: UInt64.self)
                    let quote = w ^ (ones &* 0x22), backslash = w ^ (ones &* 0x5c)
                    // A byte of 0 in `quote` or `backslash`, or below 0x20 in `w`, sets its high bit
                    // here (no byte is missed; one next to such a byte may be flagged too).
                    let maybe = ((quote &- ones) & ~quote | (backslash &- ones) & ~backslash | (w &- ones &* 0x20) & ~w) & highs
                    if maybe != 0 { break }
                    j += 8
                }
            }
            while j < n {
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
        var out = [UInt8]()
        guard appendStringField(key, in: text, to: &out) else { return nil }
        return String(decoding: out, as: UTF8.self)
    }

    /// `stringField`'s value appended to `out` as UTF-8 (a note's head and body made in one
    /// buffer); false, and `out` unchanged, where `stringField` is nil.
    public static func appendStringField(_ key: String, in text: String, to out: inout [UInt8]) -> Bool {
        // The value is decoded in place after what `out` held (`mark`); a later duplicate
        // replaces it, and anything short of a whole object with a string there takes it back.
        let mark = out.count
        var found = false
        var p = JSONParser(b: Array(text.utf8))
        let k = Array(key.utf8)
        func ends(_ result: Bool) -> Bool {
            if !result { out.removeSubrange(mark...) }
            return result
        }
        p.skipSpace()
        guard p.i < p.b.count, p.b[p.i] == UInt8(ascii: "{") else { return false }
        p.i += 1
        p.skipSpace()
        if p.i < p.b.count, p.b[p.i] == UInt8(ascii: "}") { return false }
        while true {
            p.skipSpace()
            guard p.i < p.b.count, p.b[p.i] == UInt8(ascii: "\"") else { return ends(false) }
            var name = [UInt8]()
            guard (try? p.stringBytes(into: &name)) != nil else { return ends(false) }
            p.skipSpace()
            guard p.i < p.b.count, p.b[p.i] == UInt8(ascii: ":") else { return ends(false) }
            p.i += 1
            p.skipSpace()
            guard p.i < p.b.count else { return ends(false) }
            if name == k {
                out.removeSubrange(mark...)
                found = p.b[p.i] == UInt8(ascii: "\"")
                let decoded = found ? (try? p.stringBytes(into: &out)) != nil : (try? p.value()) != nil
                guard decoded else { return ends(false) }
            } else {
                guard (try? p.skip()) != nil else { return ends(false) }
            }
            p.skipSpace()
            guard p.i < p.b.count else { return ends(false) }
            if p.b[p.i] == UInt8(ascii: ",") { p.i += 1; continue }
            return ends(p.b[p.i] == UInt8(ascii: "}") && found)
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
