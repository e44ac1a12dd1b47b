import Foundation
import MarfaModel
import Yams

/// Why a file body could not be read as properties (FS-10).
public enum FrontMatterError: Error, Equatable, CustomStringConvertible {
    case invalidYAML(String)
    case notAMapping
    case invalidUTF8
    case nulBytes

    public var description: String {
        switch self {
        case .invalidYAML(let m): return "front matter is not valid YAML: \(m)"
        case .notAMapping: return "front matter is not a mapping of keys to values"
        case .invalidUTF8: return "the file is not valid UTF-8"
        case .nulBytes: return "the file holds NUL bytes (binary content belongs in a core.file item)"
        }
    }
}

/// Markdown with optional YAML front matter ⇄ properties (FS-8). Pure.
public enum FrontMatter {
    /// The result of parsing a text file: its properties and whether it named its own title.
    public struct Parsed: Equatable, Sendable {
        public var properties: [String: JSONValue]
        public var hasTitleKey: Bool
    }

    /// Parses file bytes into properties: front matter keys plus the body field.
    /// The title is not set here unless the front matter writes it.
    public static func parse(_ bytes: [UInt8], bodyField: String = "body", titleField: String = "title") throws -> Parsed {
        if bytes.contains(0) { throw FrontMatterError.nulBytes }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw FrontMatterError.invalidUTF8 }
        return try parse(text, bodyField: bodyField, titleField: titleField)
    }

    public static func parse(_ text: String, bodyField: String = "body", titleField: String = "title") throws -> Parsed {
        guard let (yaml, body) = split(text) else {
            return Parsed(properties: [bodyField: .string(text)], hasTitleKey: false)
        }
        var props: [String: JSONValue] = [:]
        if !yaml.allSatisfy({ $0.isWhitespace }) {
            // The common shape is read directly (`PlainFrontMatter`); any other by YAML.
            props = try PlainFrontMatter.read(yaml) ?? yamlProperties(yaml)
        }
        let hasTitle = props[titleField] != nil
        props[bodyField] = .string(body)
        return Parsed(properties: props, hasTitleKey: hasTitle)
    }

    /// The properties a YAML block gives, read by the YAML parser.
    static func yamlProperties(_ yaml: String) throws -> [String: JSONValue] {
        let node: Node?
        do { node = try compose(yaml) } catch {
            throw FrontMatterError.invalidYAML(String(describing: error).split(separator: "\n").first.map(String.init) ?? "error")
        }
        var props: [String: JSONValue] = [:]
        if let node {
            guard case .mapping(let m) = node else { throw FrontMatterError.notAMapping }
            for (k, v) in m {
                guard let key = scalarKey(k) else { throw FrontMatterError.notAMapping }
                props[key] = json(v)
            }
        }
        return props
    }

    /// What can still be read of a text whose front matter does not parse (FS-32), as Obsidian
    /// reads such a note: the body after the block, and each top-level key whose own lines parse
    /// alone (a key whose one line does not, such as `title: a: b`, gives the rest of its line as
    /// text). Nil for bytes that are not text.
    public static func salvage(_ bytes: [UInt8], bodyField: String = "body") -> [String: JSONValue]? {
        if bytes.contains(0) { return nil }
        guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
        guard let (yaml, body) = split(text) else { return [bodyField: .string(text)] }
        var props: [String: JSONValue] = [:]
        var chunks: [[Substring]] = []
        for line in lines(yaml) {
            let starts = line.first.map { !$0.isWhitespace && $0 != "#" && $0 != "-" } ?? false
            if starts || chunks.isEmpty { chunks.append([line]) } else { chunks[chunks.count - 1].append(line) }
        }
        for chunk in chunks {
            let whole = chunk.joined(separator: "\n")
            if let node = try? compose(whole), case .mapping(let m) = node {
                for (k, v) in m { if let key = scalarKey(k) { props[key] = json(v) } }
                continue
            }
            guard chunk.count == 1 || chunk.dropFirst().allSatisfy({ $0.allSatisfy(\.isWhitespace) }),
                  let colon = chunk[0].firstIndex(of: ":") else { continue }
            let key = chunk[0][..<colon].trimmingCharacters(in: .whitespaces)
            let value = chunk[0][chunk[0].index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
            if !key.isEmpty, !value.isEmpty { props[key] = .string(value) }
        }
        props[bodyField] = .string(body)
        return props
    }

    /// Splits `---\n<yaml>---\n<body>`; nil when the text has no complete front matter block.
    static func split(_ text: String) -> (String, String)? {
        let u = Array(text.utf8)
        func lineEnd(_ i: Int) -> Int { var j = i; while j < u.count && u[j] != 10 { j += 1 }; return j }
        let first = lineEnd(0)
        var firstLine = u[0..<first]
        if firstLine.last == 13 { firstLine = firstLine.dropLast() }
        guard Array(firstLine) == Array("---".utf8), first < u.count else { return nil }
        var i = first + 1
        let yamlStart = i
        while i <= u.count {
            let e = lineEnd(i)
            var line = u[i..<e]
            if line.last == 13 { line = line.dropLast() }
            if Array(line) == Array("---".utf8) || Array(line) == Array("...".utf8) {
                let yaml = String(decoding: u[yamlStart..<i], as: UTF8.self)
                let bodyStart = min(e + 1, u.count)
                return (yaml, String(decoding: u[bodyStart...], as: UTF8.self))
            }
            if e >= u.count { break }
            i = e + 1
        }
        return nil
    }

    /// YAML text as nodes. Plain scalars are typed by `plainTag` when read (`json`), not by Yams's
    /// default resolver (seven regular expressions per scalar, and again each time a key is
    /// hashed); the encoding is named, so Yams does not read the environment for it at each call.
    static func compose(_ yaml: String) throws -> Node? {
        try Yams.compose(yaml: yaml, .basic, .default, .utf8)
    }

    /// The type YAML 1.1 (Yams's default resolver) gives an untagged plain scalar: exactly what
    /// `Resolver.default` says, with its regular expressions run only for text that starts as a
    /// number, a date or a float can (the other rules match whole words).
    static func plainTag(_ v: String) -> Tag.Name {
        switch v {
        case "yes", "Yes", "YES", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF":
            return .bool
        case "~", "null", "Null", "NULL", "": return .null
        case "<<": return .merge
        case "=": return .value
        default:
            guard let f = v.utf8.first, f == UInt8(ascii: "+") || f == UInt8(ascii: "-") || f == UInt8(ascii: ".") || (f >= 0x30 && f <= 0x39) else {
                return .str
            }
            // The two shapes front matter holds most, without the regular expressions: a
            // decimal integer, a date (`created: 2024-07-03`).
            if PlainFrontMatter.isDecimal(Substring(v)) { return .int }
            if PlainFrontMatter.isDate(v) { return .timestamp }
            return Resolver.default.resolveTag(of: Node(v))
        }
    }

    static func scalarKey(_ n: Node) -> String? {
        if case .scalar(let s) = n { return s.string }
        return nil
    }

    static func json(_ n: Node) -> JSONValue {
        switch n {
        case .scalar(let s):
            // Untagged (read before `n.tag` resolves it in place): typed here; else its own tag.
            let untagged = s.tag.description.isEmpty
            switch untagged && s.style == .plain ? plainTag(s.string) : Tag.Name(rawValue: n.tag.rawValue) {
            case .null: return .null
            case .bool: return n.bool.map(JSONValue.bool) ?? .string(s.string)
            case .int: return n.int.map { .int(Int64($0)) } ?? .string(s.string)
            case .float: return n.float.map(JSONValue.double) ?? .string(s.string)
            default: return .string(s.string)
            }
        case .mapping(let m):
            var o: [String: JSONValue] = [:]
            for (k, v) in m { o[scalarKey(k) ?? String(describing: k)] = json(v) }
            return .object(o)
        case .sequence(let seq):
            return .array(seq.map(json))
        case .alias:
            return .null
        }
    }

    // MARK: rendering

    /// Renders properties as a text file (FS-8): front matter of every property but the title and
    /// the body (the title too when `includeTitle`), then the body verbatim. Title + body only: bare body.
    public static func render(_ properties: [String: JSONValue], bodyField: String = "body",
                              titleField: String = "title", includeTitle: Bool = false) -> String {
        let body: String
        switch properties[bodyField] {
        case .string(let s)?: body = s
        case nil, .null?: body = ""
        case let other?: body = flow(other)
        }
        let keys = properties.keys.filter { $0 != bodyField && (includeTitle || $0 != titleField) }.sorted()
        if keys.isEmpty { return body }
        var out = "---\n"
        for k in keys { out += plainOrQuoted(k, inFlow: false) + ": " + block(properties[k]!) + "\n" }
        out += "---\n"
        return out + body
    }

    static func block(_ v: JSONValue) -> String {
        switch v {
        case .string(let s): return plainOrQuoted(s, inFlow: false)
        default: return flow(v)
        }
    }

    static func flow(_ v: JSONValue) -> String {
        switch v {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .int(let i): return String(i)
        case .double(let d):
            if d.isNaN { return ".nan" }
            if d.isInfinite { return d < 0 ? "-.inf" : ".inf" }
            let s = "\(d)"
            return s.contains(".") || s.contains("e") ? s : s + ".0"
        case .string(let s): return quoted(s)
        case .array(let a): return "[" + a.map(flow).joined(separator: ", ") + "]"
        case .object(let o):
            return "{" + o.keys.sorted().map { quoted($0) + ": " + flow(o[$0]!) }.joined(separator: ", ") + "}"
        }
    }

    /// A YAML double-quoted scalar (JSON string syntax, which YAML reads the same way).
    static func quoted(_ s: String) -> String { JSONCoding.quoted(s, yamlSafe: true) }

    /// Plain when YAML reads it back as exactly this string, else double-quoted (FS-8 keeps JSON types).
    static func plainOrQuoted(_ s: String, inFlow: Bool) -> String {
        isSafePlain(s) ? s : quoted(s)
    }

    static func isSafePlain(_ s: String) -> Bool {
        guard let f = s.unicodeScalars.first, let l = s.unicodeScalars.last else { return false }
        if f == " " || l == " " { return false }
        if "-?:,[]{}#&*!|>'\"%@`~=".unicodeScalars.contains(f) { return false }
        for u in s.unicodeScalars {
            if u.value < 0x20 || u.value == 0x7f || (u.value >= 0x80 && u.value < 0xa0) || u.value == 0xfeff { return false }
            if u.value == 0x2028 || u.value == 0x2029 || u.value == 0x85 { return false }
        }
        if s.contains(": ") || s.contains(" #") || s.hasSuffix(":") || s.contains("\t") { return false }
        return plainTag(s) == .str
    }
}

extension FrontMatter {
    /// The text with one front-matter key set to `value` (nil: removed), every other line kept as
    /// it is (comments, order, quoting style): the key's own line and its continuation lines are
    /// replaced, a trailing comment on a one-line value is kept, a new key goes last, and text
    /// with no front matter gets a block holding only that key. Nil when the key cannot be edited
    /// in place (the caller renders the whole file instead). FS-28.
    public static func settingKey(_ text: String, key: String, to value: JSONValue?) -> String? {
        let keyText = plainOrQuoted(key, inFlow: false)
        let newLine = value.map { keyText + ": " + block($0) }
        guard split(text) != nil else {
            guard let newLine else { return nil }
            return "---\n" + newLine + "\n---\n" + text
        }
        return editingLines(text) { lines in
            // The key's line: `key:` at the start of a line (plain or as rendered).
            let starts = [key + ":", keyText + ":"]
            let found = lines.firstIndex { l in starts.contains { l == $0 || l.hasPrefix($0 + " ") || l.hasPrefix($0 + "\t") } }
            if let i = found {
                let end = Self.valueEnd(lines, i)
                let old = lines[i]
                if var nl = newLine {
                    // `status: draft  # TODO`: the comment stays with the new value (a one-line,
                    // unquoted old value: a `#` inside quotes is not a comment).
                    if end == i + 1, let hash = old.range(of: " #") {
                        let valuePart = old[old.index(old.startIndex, offsetBy: min(old.count, key.count + 1))..<hash.lowerBound]
                        if !valuePart.contains("\"") && !valuePart.contains("'") {
                            let spaces = old[..<hash.lowerBound].reversed().prefix { $0 == " " }.count
                            nl += String(repeating: " ", count: spaces) + old[hash.lowerBound...]
                        }
                    }
                    lines.replaceSubrange(i..<end, with: [nl])
                } else {
                    lines.removeSubrange(i..<end)
                }
                return true
            }
            guard let newLine else { return false }
            lines.append(newLine)
            return true
        }
    }

    /// Where the value of the key on line `i` ends: its continuation lines are indented or list items.
    static func valueEnd(_ lines: [String], _ i: Int) -> Int {
        var end = i + 1
        while end < lines.count, let c = lines[end].first, c == " " || c == "\t" || lines[end].hasPrefix("- ") || lines[end] == "-" { end += 1 }
        return end
    }

    /// The lines of a block, split at each "\n" byte, a "\r" before it dropped. A `String`'s own
    /// splitting takes "\r\n" for one character and never splits there: a block written with
    /// "\r\n" was one line with its line ends inside (a tag added to it left a blank line before
    /// the closing `---`; broken front matter salvaged one key, with the rest as its value).
    static func lines(_ text: String) -> [Substring] {
        text.utf8.split(separator: 10, omittingEmptySubsequences: false).map { Substring($0.last == 13 ? $0.dropLast() : $0) }
    }

    /// Whether the text has a "\r\n" line end (a byte scan: Foundation's search through UTF-16
    /// was a tenth of a tag's change on a note).
    static func hasCRLF(_ text: String) -> Bool { VaultText.hasBytes(text, 13, 10) }

    /// The text with its front-matter lines (without line ends) changed by `edit`, every other
    /// byte kept; nil when the text has no front matter or `edit` returns false. A block left
    /// empty goes.
    static func editingLines(_ text: String, _ edit: (inout [String]) -> Bool) -> String? {
        guard let (yaml, body) = split(text) else { return nil }
        let eol = Self.hasCRLF(text) ? "\r\n" : "\n"
        var lines = Self.lines(yaml).map(String.init)
        if lines.last == "" { lines.removeLast() }
        var out = lines
        guard edit(&out) else { return nil }
        if out.allSatisfy({ $0.trimmingCharacters(in: .whitespaces).isEmpty }) { return body }
        // The opening line as it was (`---`), then the block, then the closing line as it was.
        let openLen = text.hasPrefix("---\r\n") ? 5 : 4
        let closeStart = text.utf8.count - body.utf8.count
        let head = String(decoding: Array(text.utf8)[0..<openLen], as: UTF8.self)
        let yamlEnd = openLen + yaml.utf8.count
        let close = String(decoding: Array(text.utf8)[yamlEnd..<closeStart], as: UTF8.self)
        return head + out.map { $0 + eol }.joined() + close + body
    }
}
