import Foundation
import MarfaModel

/// Tags written into a note and taken out of it (FS-26: a note's tags are its text's, both ways),
/// keeping the note's style: a flow list stays a flow list, a block list a block list, a string
/// of words a string; every other byte stays as it was. Pure.
extension VaultText {
    /// The text with `tag` among its front matter's tags. Nil when it already has the tag, or
    /// when its front matter cannot be edited in place (not valid YAML).
    public static func addingTag(_ tag: String, to text: String) -> String? {
        if scan(text).tags.contains(where: { $0.lowercased() == tag.lowercased() }) { return nil }
        let value = FrontMatter.plainOrQuoted(tag, inFlow: true)
        guard FrontMatter.split(text) != nil else { return "---\ntags:\n  - \(value)\n---\n" + text }
        guard (try? FrontMatter.parse(text)) != nil else { return nil }
        let edited = FrontMatter.editingLines(text) { lines in
            guard let i = tagKeyLine(lines) else {
                lines += ["tags:", "  - " + value]
                return true
            }
            let end = FrontMatter.valueEnd(lines, i)
            let (key, rest, comment) = keyLine(lines[i])
            let v = rest.trimmingCharacters(in: .whitespaces)
            if v.isEmpty || v == "null" || v == "~" {
                // A block list (or nothing yet): one more item, indented as the others.
                let items = (i + 1..<end).filter { lines[$0].trimmingCharacters(in: .whitespaces).hasPrefix("-") }
                if let last = items.last {
                    let indent = lines[last].prefix { $0 == " " || $0 == "\t" }
                    lines.insert(indent + "- " + value, at: last + 1)
                } else {
                    lines[i] = key + ":" + comment
                    lines.insert("  - " + value, at: i + 1)
                }
            } else if v.hasPrefix("["), let close = v.lastIndex(of: "]") {
                let inner = v[v.index(after: v.startIndex)..<close]
                let list = inner.trimmingCharacters(in: .whitespaces).isEmpty ? value : inner.trimmingCharacters(in: .whitespaces) + ", " + value
                lines[i] = key + ": [" + list + "]" + v[v.index(after: close)...] + comment
            } else if let q = v.first, q == "\"" || q == "'", v.count >= 2, v.last == q {
                let words = String(v.dropFirst().dropLast())
                lines[i] = key + ": " + String(q) + words + (words.contains(",") ? ", " : " ") + tag + String(q) + comment
            } else {
                lines[i] = key + ": " + v + (v.contains(",") ? ", " : " ") + value + comment
            }
            return true
        }
        guard let edited, scan(edited).tags.contains(tag) else { return nil }
        return edited
    }

    /// The text without `tag`: taken out of the front matter's tags (the key goes when its list
    /// empties), and every inline `#tag` made plain text (`#tag` → `tag`). Nil when the text does
    /// not hold the tag or cannot be edited.
    public static func removingTag(_ tag: String, from text: String) -> String? {
        let lower = tag.lowercased()
        guard scan(text).tags.contains(where: { $0.lowercased() == lower }) else { return nil }
        var result = text
        if FrontMatter.split(text) != nil, (try? FrontMatter.parse(text)).map({ frontMatterTags($0.properties) })?.contains(where: { $0.lowercased() == lower }) == true {
            guard let edited = FrontMatter.editingLines(text, { lines in removeFromFrontMatter(lower, &lines) }) else { return nil }
            result = edited
        }
        result = unhashInline(lower, in: result)
        guard !scan(result).tags.contains(where: { $0.lowercased() == lower }) else { return nil }
        return result
    }

    static func removeFromFrontMatter(_ lower: String, _ lines: inout [String]) -> Bool {
        func matches(_ item: Substring) -> Bool {
            var t = item.trimmingCharacters(in: .whitespaces)
            if let q = t.first, q == "\"" || q == "'", t.count >= 2, t.last == q { t = String(t.dropFirst().dropLast()) }
            if t.hasPrefix("#") { t.removeFirst() }
            return t.lowercased() == lower
        }
        var changed = false
        var searchFrom = 0
        while searchFrom < lines.count, let i = tagKeyLine(lines, from: searchFrom) {
            let end = FrontMatter.valueEnd(lines, i)
            let (key, rest, comment) = keyLine(lines[i])
            let v = rest.trimmingCharacters(in: .whitespaces)
            var empty = false
            if v.isEmpty {
                let before = end - i - 1
                var items = Array(lines[(i + 1)..<end])
                items.removeAll { l in
                    let t = l.drop { $0 == " " || $0 == "\t" }
                    return t.hasPrefix("-") && matches(t.dropFirst())
                }
                if items.count != before { changed = true }
                empty = !items.contains { $0.trimmingCharacters(in: .whitespaces).hasPrefix("-") }
                lines.replaceSubrange((i + 1)..<end, with: items)
            } else if v.hasPrefix("["), let close = v.lastIndex(of: "]") {
                let parts = v[v.index(after: v.startIndex)..<close].split(separator: ",", omittingEmptySubsequences: false)
                let kept = parts.filter { !matches($0) }
                if kept.count != parts.count { changed = true }
                empty = kept.allSatisfy { $0.trimmingCharacters(in: .whitespaces).isEmpty }
                lines[i] = key + ": [" + kept.map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: ", ") + "]" + comment
            } else {
                var body = Substring(v), q = ""
                if let f = v.first, f == "\"" || f == "'", v.count >= 2, v.last == f { body = v.dropFirst().dropLast(); q = String(f) }
                let comma = body.contains(",")
                let words = body.split(whereSeparator: { $0 == "," || $0 == " " })
                let kept = words.filter { !matches($0) }
                if kept.count != words.count { changed = true }
                empty = kept.isEmpty
                lines[i] = key + ": " + q + kept.joined(separator: comma ? ", " : " ") + q + comment
            }
            if empty {
                let stop = FrontMatter.valueEnd(lines, i)
                lines.removeSubrange(i..<stop)
                searchFrom = i
            } else {
                searchFrom = i + 1
            }
        }
        return changed
    }

    /// Every inline `#tag` of the body (outside code) made plain: its `#` dropped.
    static func unhashInline(_ lower: String, in text: String) -> String {
        var headEnd = text.startIndex
        var body = text
        if let (_, rest) = FrontMatter.split(text) {
            headEnd = text.index(text.endIndex, offsetBy: -rest.count)
            body = rest
        }
        // Lines as `forEachLine` counts them: split at each "\n" scalar (a "\r" stays with its line).
        var lines = body.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false).map { Array($0) }
        var dropAt: [Int: [Int]] = [:]
        var scratch = Scan()
        forEachLine(body) { n, line, inComment in
            scanLine(line, inComment: &inComment, into: &scratch) { at, tag in
                if tag.lowercased() == lower { dropAt[n, default: []].append(at) }
            }
        }
        if dropAt.isEmpty { return text }
        for (n, positions) in dropAt { for p in positions.sorted(by: >) { lines[n].remove(at: p) } }
        let newBody = lines.map { String(String.UnicodeScalarView($0)) }.joined(separator: "\n")
        return String(text[..<headEnd]) + newBody
    }

    /// The line of the `tags:` (or `tag:`) key, from line `from` on.
    static func tagKeyLine(_ lines: [String], from: Int = 0) -> Int? {
        guard from < lines.count else { return nil }
        return (from..<lines.count).first { i in
            let l = lines[i]
            return ["tags:", "tag:"].contains { l == $0 || l.hasPrefix($0 + " ") || l.hasPrefix($0 + "\t") }
        }
    }

    /// `key: value  # comment` → ("key", " value", "  # comment").
    static func keyLine(_ line: String) -> (String, String, String) {
        guard let colon = line.firstIndex(of: ":") else { return (line, "", "") }
        var rest = String(line[line.index(after: colon)...])
        var comment = ""
        if let hash = rest.range(of: " #"), !rest[..<hash.lowerBound].contains("\""), !rest[..<hash.lowerBound].contains("'") {
            let spaces = rest[..<hash.lowerBound].reversed().prefix { $0 == " " }.count
            comment = String(repeating: " ", count: spaces) + rest[hash.lowerBound...]
            rest = String(rest[..<rest.index(hash.lowerBound, offsetBy: -spaces)])
        }
        return (String(line[..<colon]), rest, comment)
    }
}

extension VaultText {
    /// Every level of the folders the `folder:` tags among `tags` name (`folder:a/b`: `a` and `a/b`).
    public static func folderLevels(_ tags: some Sequence<String>) -> Set<String> {
        var out = Set<String>()
        for tag in tags where tag.hasPrefix(folderPrefix) {
            var path = ""
            for part in tag.dropFirst(folderPrefix.count).split(separator: "/") {
                path = path.isEmpty ? String(part) : path + "/" + part
                out.insert(path)
            }
        }
        return out
    }
}
