import MarfaModel
import Yams

/// Front matter of the shape nearly every note has, read without a YAML parser: one `key: value`
/// per line, each value a plain scalar on that line or a one-line `[a, b, c]` of plain scalars
/// (`title: …`, `tags: [a, b]`, `created: 2024-07-03`). Whatever this reads, it reads exactly as
/// `FrontMatter.compose` + `json` do (tested against them on generated blocks); anything it is not
/// sure of (quotes, comments, nested or multi-line values, anchors, tabs, line ends other than
/// `\n`, a repeated key, a scalar typed by more than the cheap rules) returns nil and goes to the
/// YAML parser. Pure.
enum PlainFrontMatter {
    /// The properties of a YAML block, or nil when the block is not of that shape.
    static func read(_ yaml: String) -> [String: JSONValue]? {
        var props: [String: JSONValue] = [:]
        var keys = Set<Substring>()
        for line in yaml.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.isEmpty { continue }
            guard let colon = line.utf8.firstIndex(of: UInt8(ascii: ":")) else { return nil }
            let key = line[..<colon]
            guard isPlainKey(key), keys.insert(key).inserted else { return nil }
            var rest = line[line.index(after: colon)...]
            if rest.isEmpty { props[String(key)] = .null; continue }
            // `key:value` is one scalar, not a pair; spaces after `: ` are not the value's.
            guard rest.first == " " else { return nil }
            while rest.first == " " { rest = rest.dropFirst() }
            if rest.isEmpty { return nil }
            if rest.first == "[" {
                guard rest.last == "]" else { return nil }
                guard let items = flowItems(rest.dropFirst().dropLast()) else { return nil }
                props[String(key)] = .array(items)
            } else {
                guard isPlain(rest, inFlow: false), let v = value(rest) else { return nil }
                props[String(key)] = v
            }
        }
        return props
    }

    /// `a, b, c` between the brackets of a one-line flow sequence; nil unless each is plain.
    private static func flowItems(_ inner: Substring) -> [JSONValue]? {
        if inner.allSatisfy({ $0 == " " }) { return [] }
        var out: [JSONValue] = []
        for part in inner.split(separator: ",", omittingEmptySubsequences: false) {
            var item = part
            while item.first == " " { item = item.dropFirst() }
            while item.last == " " { item = item.dropLast() }
            guard !item.isEmpty, isPlain(item, inFlow: true), let v = value(item) else { return nil }
            out.append(v)
        }
        return out
    }

    /// A key of letters, digits, `_` and `-` that starts with a letter or `_`.
    private static func isPlainKey(_ k: Substring) -> Bool {
        guard let f = k.utf8.first, isLetter(f) || f == UInt8(ascii: "_") else { return false }
        return k.utf8.allSatisfy { isLetter($0) || isDigit($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }
    }

    /// A scalar YAML reads as plain text that is all of `s`: it starts with no indicator, holds no
    /// `: ` nor ` #` (nor, in a flow sequence, a flow indicator or `:` at all), ends in no space
    /// or `:`, and has no control character, tab or line break (YAML 1.1 counts NEL, LS and PS).
    private static func isPlain(_ s: Substring, inFlow: Bool) -> Bool {
        guard let f = s.unicodeScalars.first, let l = s.unicodeScalars.last else { return false }
        if "-?:,[]{}#&*!|>'\"%@` ".unicodeScalars.contains(f) || l == " " || l == ":" { return false }
        var previous: Unicode.Scalar = " "
        for c in s.unicodeScalars {
            let v = c.value
            if v < 0x20 || v == 0x7f || (v >= 0x80 && v < 0xa0) || v == 0xfeff || v == 0x2028 || v == 0x2029 { return false }
            if c == ":" && (inFlow || previous == " ") { return false }
            if previous == ":" && c == " " { return false }
            if c == "#" && previous == " " { return false }
            if inFlow && (c == "," || c == "[" || c == "]" || c == "{" || c == "}") { return false }
            previous = c
        }
        return true
    }

    /// What `FrontMatter.json` gives a plain scalar, for the types read here without YAML's own
    /// constructors: text, null, booleans, decimal integers; nil for the others.
    private static func value(_ s: Substring) -> JSONValue? {
        let text = String(s)
        switch FrontMatter.plainTag(text) {
        case .str, .timestamp: return .string(text)
        case .null: return .null
        case .bool:
            switch text {
            case "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON": return .bool(true)
            default: return .bool(false)
            }
        case .int:
            guard isDecimal(s) else { return nil }
            return Int64(text).map(JSONValue.int) ?? .string(text)
        default: return nil
        }
    }

    /// `0`, or a digit 1–9 then digits after an optional sign: an integer as written (`-0` and
    /// `007` are read otherwise by YAML's constructor).
    static func isDecimal(_ s: Substring) -> Bool {
        if s == "0" { return true }
        var u = s.utf8[...]
        if let f = u.first, f == UInt8(ascii: "+") || f == UInt8(ascii: "-") { u = u.dropFirst() }
        guard let first = u.first, first != UInt8(ascii: "0") else { return false }
        return u.allSatisfy(isDigit)
    }

    /// `dddd-dd-dd`: YAML 1.1's date, the first form of its timestamp.
    static func isDate(_ s: String) -> Bool {
        let u = Array(s.utf8)
        guard u.count == 10, u[4] == UInt8(ascii: "-"), u[7] == UInt8(ascii: "-") else { return false }
        return [0, 1, 2, 3, 5, 6, 8, 9].allSatisfy { isDigit(u[$0]) }
    }

    private static func isLetter(_ b: UInt8) -> Bool { (b | 0x20) >= UInt8(ascii: "a") && (b | 0x20) <= UInt8(ascii: "z") }
    static func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }
}
