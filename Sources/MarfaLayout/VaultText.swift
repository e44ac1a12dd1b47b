import Foundation
import MarfaModel

/// A link written in a note (FS-26): `[[Target]]`, `[[Target|alias]]`, `[[Target#Heading]]`,
/// `![[embed]]`, `[text](relative/path.md)`, `![alt](../x.png)`.
public struct VaultLink: Hashable, Sendable {
    /// The path the link names, without its `#heading`, `^block` or `|alias`; percent-decoded for
    /// Markdown links.
    public var target: String
    /// `![[…]]` and `![…](…)` embed the target; the others reference it.
    public var embed: Bool
    /// A Markdown link (`[text](path)`): its path is relative to the note's folder first.
    public var markdown: Bool

    public init(target: String, embed: Bool, markdown: Bool) {
        self.target = target; self.embed = embed; self.markdown = markdown
    }

    /// The edge type the link shows under in `links/` and `backlinks/`.
    public var edgeType: String { embed ? VaultText.embedEdge : VaultText.referenceEdge }
}

/// What a Markdown note says about the vault (FS-26): the links and tags in its text, read as
/// Obsidian reads them. Fenced code blocks, inline code and `%%comments%%` hold neither; a
/// heading's `# ` is not a tag. Pure.
public enum VaultText {
    public static let referenceEdge = "references"
    /// The tag that places an item in a folder of the vault's tree (FS-23, FS-27).
    public static let folderPrefix = "folder:"
    public static let embedEdge = "embeds"

    public struct Scan: Equatable, Sendable {
        public var links: [VaultLink] = []
        /// Front-matter tags first, then inline ones, each once (case-insensitively, the first
        /// spelling kept).
        public var tags: [String] = []
    }

    public static func scan(_ bytes: [UInt8]) -> Scan {
        guard !bytes.contains(0), let text = String(validating: bytes, as: UTF8.self) else { return Scan() }
        return scan(text)
    }

    public static func scan(_ text: String) -> Scan {
        var out = Scan()
        var body = text
        if let (_, rest) = FrontMatter.split(text) {
            body = rest
            if let p = try? FrontMatter.parse(text) { out.tags = frontMatterTags(p.properties) }
        }
        forEachLine(body, skippingPlain: true) { _, line, inComment in scanLine(line, inComment: &inComment, into: &out, tagAt: nil) }
        out.tags = distinctTags(out.tags)
        return out
    }

    /// `tags:` (or `tag:`) as a list or a string of words separated by commas or spaces; a
    /// leading `#` is dropped.
    static func frontMatterTags(_ props: [String: JSONValue]) -> [String] {
        var out: [String] = []
        for key in ["tags", "tag"] {
            switch props[key] {
            case .string(let s)?: out += s.split(whereSeparator: { $0 == "," || $0 == " " }).map(String.init)
            case .array(let a)?: out += a.compactMap { v -> String? in
                switch v { case .string(let s): return s; case .int(let i): return String(i); default: return nil }
            }
            default: break
            }
        }
        return out.map(VaultText.trimmedWhitespace).map { $0.hasPrefix("#") ? String($0.dropFirst()) : $0 }
            .filter(isTag)
    }

    /// A tag as Obsidian takes it: letters, digits, `_`, `-` and `/` (nesting), not only digits,
    /// no empty level.
    public static func isTag(_ s: String) -> Bool {
        guard !s.isEmpty, !s.hasPrefix("/"), !s.hasSuffix("/"), !zip(s.utf8, s.utf8.dropFirst()).contains(where: { $0 == 0x2F && $1 == 0x2F }) else { return false }
        var nonDigit = false
        for c in s.unicodeScalars {
            guard isTagScalar(c) else { return false }
            if !("0"..."9").contains(c) && c != "/" { nonDigit = true }
        }
        return nonDigit
    }

    /// `s` without `CharacterSet.whitespaces` at either end; `s` itself when it has none there.
    static func trimmedWhitespace(_ s: String) -> String {
        guard let f = s.unicodeScalars.first, let l = s.unicodeScalars.last,
              f == " " || l == " " || !f.isASCII || !l.isASCII || f == "\t" || l == "\t" else { return s }
        return s.trimmingCharacters(in: .whitespaces)
    }

    static func isTagScalar(_ c: Unicode.Scalar) -> Bool {
        // ASCII: letters, digits, `_`, `-`, `/` (what the properties below give there).
        if c.isASCII {
            let v = c.value
            return (v >= 0x30 && v <= 0x39) || ((v | 0x20) >= 0x61 && (v | 0x20) <= 0x7a) || c == "_" || c == "-" || c == "/"
        }
        return c.properties.isAlphabetic || c.properties.numericType != nil
            || c.properties.generalCategory == .nonspacingMark || c.properties.isEmojiPresentation
    }

    /// Calls `body` with each line of the text outside fenced code blocks (its index among all
    /// lines, its scalars without the line end, and whether a `%%comment%%` is open).
    /// `skippingPlain`: lines holding none of the bytes `scanLine` acts on (`%` `` ` `` `\\` `[`
    /// `#`) are not handed over, since scanning them finds nothing and changes nothing.
    static func forEachLine(_ text: String, skippingPlain: Bool = false, _ body: (Int, [Unicode.Scalar], inout Bool) -> Void) {
        // Over the text's UTF-8 bytes: lines end at "\n" (a "\r" before it is dropped), fences and
        // the bytes scanning acts on are ASCII; only the lines handed over are decoded.
        var text = text
        text.withUTF8 { u in
            var fence: (char: UInt8, count: Int)?
            var inComment = false
            var line: [Unicode.Scalar] = []
            line.reserveCapacity(256)
            var n = 0, start = 0
            let space = UInt8(ascii: " "), tab = UInt8(ascii: "\t")
            func handle(_ from: Int, _ to: Int) {
                var end = to
                if end > from, u[end - 1] == 13 { end -= 1 }
                var t = from
                while t < end, u[t] == space || u[t] == tab { t += 1 }
                func run(of c: UInt8) -> Int { var r = t; while r < end, u[r] == c { r += 1 }; return r - t }
                if let f = fence {
                    let r = run(of: f.char)
                    var k = t + r
                    while k < end, u[k] == space || u[k] == tab { k += 1 }
                    if r >= f.count && k == end { fence = nil }
                    return
                }
                var lead = from
                while lead < end, u[lead] == space { lead += 1 }
                if lead - from < 4, t < end, u[t] == UInt8(ascii: "`") || u[t] == UInt8(ascii: "~") {
                    let c = u[t], r = run(of: c)
                    var tick = false
                    if c == UInt8(ascii: "`") { var k = t + r; while k < end { if u[k] == c { tick = true; break }; k += 1 } }
                    if r >= 3 && !tick { fence = (c, r); return }
                }
                if skippingPlain {
                    var acts = false
                    for k in from..<end {
                        let b = u[k]
                        if b == 0x25 || b == 0x60 || b == 0x5c || b == 0x5b || b == 0x23 { acts = true; break }
                    }
                    if !acts { return }
                }
                line.removeAll(keepingCapacity: true)
                for sc in String(decoding: UnsafeBufferPointer(rebasing: u[from..<end]), as: UTF8.self).unicodeScalars { line.append(sc) }
                body(n, line, &inComment)
            }
            var i = 0
            while i < u.count {
                if u[i] == 10 {
                    handle(start, i)
                    n += 1
                    start = i + 1
                }
                i += 1
            }
            handle(start, u.count)
        }
    }

    /// The links and tags of one line; `tagAt` is told where each tag's `#` is.
    static func scanLine(_ s: [Unicode.Scalar], inComment: inout Bool, into out: inout Scan, tagAt: ((Int, String) -> Void)?) {
        var i = 0
        func at(_ j: Int) -> Unicode.Scalar? { j < s.count ? s[j] : nil }
        while i < s.count {
            let c = s[i]
            if inComment {
                if c == "%" && at(i + 1) == "%" { inComment = false; i += 2 } else { i += 1 }
                continue
            }
            switch c {
            case "%" where at(i + 1) == "%":
                inComment = true; i += 2
            case "`":
                // Inline code: up to a run of as many backticks.
                var run = 0
                while at(i + run) == "`" { run += 1 }
                var j = i + run
                var closed = false
                while j < s.count {
                    if s[j] == "`" {
                        var r = 0
                        while at(j + r) == "`" { r += 1 }
                        if r == run { closed = true; j += r; break }
                        j += r
                    } else { j += 1 }
                }
                i = closed ? j : i + run
            case "\\":
                i += 2
            case "[":
                // `[[wikilink]]` or `[text](path)`, either one an embed after `!`.
                let wiki = at(i + 1) == "["
                let start = i + (wiki ? 2 : 1)
                if let (link, end) = wiki ? wikilink(s, from: start) : markdownLink(s, from: start) {
                    if let link { out.links.append(VaultLink(target: link, embed: i > 0 && s[i - 1] == "!", markdown: !wiki)) }
                    i = end
                } else { i = start }
            case "#":
                let prevOK = i == 0 || s[i - 1] == " " || s[i - 1] == "\t"
                var j = i + 1
                while j < s.count, isTagScalar(s[j]) { j += 1 }
                var tag = String(String.UnicodeScalarView(s[(i + 1)..<j]))
                while tag.hasSuffix("/") { tag.removeLast() }
                if prevOK, isTag(tag) { out.tags.append(tag); tagAt?(i, tag) }
                i = max(j, i + 1)
            default:
                i += 1
            }
        }
    }

    /// `[[path#heading|alias]]` from just after `[[`: the path (nil for a link inside the same
    /// note) and where the link ends.
    static func wikilink(_ s: [Unicode.Scalar], from start: Int) -> (String?, Int)? {
        var j = start
        while j + 1 < s.count, !(s[j] == "]" && s[j + 1] == "]") {
            if s[j] == "[" { return nil }
            j += 1
        }
        guard j + 1 < s.count else { return nil }
        var inner = String(String.UnicodeScalarView(s[start..<j]))
        // `\|` inside a table cell.
        inner = inner.replacingOccurrences(of: "\\|", with: "|")
        if let bar = inner.firstIndex(of: "|") { inner = String(inner[..<bar]) }
        if let hash = inner.firstIndex(of: "#") { inner = String(inner[..<hash]) }
        let path = inner.trimmingCharacters(in: .whitespaces)
        return (path.isEmpty ? nil : path, j + 2)
    }

    /// `[text](destination "title")` from just after `[`: the local path it names (nil for a URL,
    /// an anchor or an email) and where the link ends; nil when this `[` starts no link.
    static func markdownLink(_ s: [Unicode.Scalar], from start: Int) -> (String?, Int)? {
        var j = start, depth = 0
        while j < s.count {
            if s[j] == "\\" { j += 2; continue }
            if s[j] == "[" { depth += 1 }
            if s[j] == "]" { if depth == 0 { break }; depth -= 1 }
            j += 1
        }
        guard j + 1 < s.count, s[j + 1] == "(" else { return nil }
        var k = j + 2
        var dest: String
        if k < s.count, s[k] == "<" {
            let open = k + 1
            while k < s.count, s[k] != ">" { k += 1 }
            guard k < s.count else { return nil }
            dest = String(String.UnicodeScalarView(s[open..<k]))
            while k < s.count, s[k] != ")" { k += 1 }
        } else {
            let open = k
            var parens = 0
            while k < s.count {
                if s[k] == "(" { parens += 1 }
                if s[k] == ")" { if parens == 0 { break }; parens -= 1 }
                if s[k] == " " { break }
                k += 1
            }
            dest = String(String.UnicodeScalarView(s[open..<k]))
            while k < s.count, s[k] != ")" { k += 1 }
        }
        guard k < s.count else { return nil }
        let end = k + 1
        if let hash = dest.firstIndex(of: "#") { dest = String(dest[..<hash]) }
        if dest.isEmpty || isURL(dest) { return (nil, end) }
        return ((dest.removingPercentEncoding ?? dest), end)
    }

    /// `https://…`, `mailto:…`, `obsidian://…`: a scheme of letters before a colon.
    static func isURL(_ s: String) -> Bool {
        guard let colon = s.firstIndex(of: ":") else { return false }
        let scheme = s[..<colon]
        return scheme.count >= 2 && scheme.allSatisfy { $0.isLetter || $0 == "+" || $0 == "-" || $0 == "." }
    }
}

extension VaultText {
    /// What a text item's properties say, in one reading: the tags of its front matter, then its
    /// body's links and inline tags, then the wikilinks in its front-matter values
    /// (`related: "[[X]]"`).
    public static func read(properties: [String: JSONValue], bodyField: String) -> Scan {
        var out = Scan()
        out.tags = frontMatterTags(properties)
        if case .string(let body)? = properties[bodyField] {
            forEachLine(body, skippingPlain: true) { _, line, inComment in scanLine(line, inComment: &inComment, into: &out, tagAt: nil) }
        }
        for (k, v) in properties.sorted(by: { $0.key < $1.key }) where k != bodyField {
            let strings: [String]
            switch v {
            case .string(let s): strings = [s]
            case .array(let a): strings = a.compactMap(\.stringValue)
            default: strings = []
            }
            for s in strings where hasWikiOpening(s) {
                var scratch = Scan(), inComment = false
                scanLine(Array(s.unicodeScalars), inComment: &inComment, into: &scratch, tagAt: nil)
                out.links += scratch.links.filter { !$0.markdown }
            }
        }
        out.tags = distinctTags(out.tags)
        return out
    }

    /// Whether `s` holds `[[`.
    static func hasWikiOpening(_ s: String) -> Bool { hasBytes(s, 0x5b, 0x5b) }

    /// Whether `s` holds byte `first` right before byte `second`: a scan of its bytes (Foundation's
    /// search of a `String` goes through UTF-16 first).
    static func hasBytes(_ s: String, _ first: UInt8, _ second: UInt8) -> Bool {
        var previous: UInt8 = 0
        for b in s.utf8 {
            if b == second && previous == first { return true }
            previous = b
        }
        return false
    }

    /// Each tag once, case-insensitively, the first spelling kept.
    static func distinctTags(_ tags: [String]) -> [String] {
        var seen = Set<String>()
        return tags.filter { seen.insert($0.lowercased()).inserted }
    }
}

/// Links as the store keeps them: one per line, `<embed 0|1><markdown 0|1><target>` (a target
/// never holds a line end: links are read line by line).
public enum VaultLinks {
    public static func encode(_ links: [VaultLink]) -> String {
        links.map { ($0.embed ? "1" : "0") + ($0.markdown ? "1" : "0") + $0.target }.joined(separator: "\n")
    }

    public static func decode(_ text: String) -> [VaultLink] {
        text.split(separator: "\n").compactMap { l in
            guard l.count > 2 else { return nil }
            let u = Array(l.utf8)
            return VaultLink(target: String(l.dropFirst(2)), embed: u[0] == UInt8(ascii: "1"), markdown: u[1] == UInt8(ascii: "1"))
        }
    }
}
