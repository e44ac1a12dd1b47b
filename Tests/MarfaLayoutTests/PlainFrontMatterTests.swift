import MarfaModel
import PropertyBased
import Synchronization
import Testing
import Yams
@testable import MarfaLayout

/// FS-8: the front matter read without the YAML parser is what the parser reads, or is left to it.
@Suite struct PlainFrontMatterTests {
    /// Pieces of lines as notes and tricky hands write them: keys YAML types otherwise, values
    /// of every scalar type and of none, quoting, comments, flow and block collections, the
    /// characters that end or start a plain scalar, and line breaks YAML 1.1 counts.
    static let keys = ["title", "tags", "a", "yes", "on", "null", "_x", "b-c", "a1", "1", "tag", "body", "title", "my key", "k\u{e9}"]
    static let separators = [": ", ":", ":  ", ": ", ": ", ":\t", " : "]
    static let values = [
        "hello", "Hello World", "yes", "No", "off", "TRUE", "~", "null", "Null", "0", "-0", "+0", "+5", "-12", "42", "007", "08",
        "1_000", "1:30", "0x1F", "0o17", ".5", "1.5", "-1.5", "1e3", "6.02e+23", ".inf", ".NaN", "2024-07-03", "2024-7-3",
        "2024-07-03 10:00:00", "2024-07-03T10:00:00Z", "a: b", "a:b", "a :b", "a #c", "C#", "#x", "x#", "[a, b]", "[a,b]", "[]", "[ ]",
        "[a, [b]]", "[a, ]", "[yes, 1, x y, 2024-07-03]", "[a:b]", "[a: b]", "[\"q\"]", "['q', r]", "[a #b]", "{a: 1}", "'q'", "\"q\"",
        "-", "- x", "-x", "?x", "? x", "*a", "&a x", "!!str 1", "!x y", "x ", "x  ", "é ü", "\u{85}x", "a\u{2028}b", "a\tb", "=", "<<",
        "...", "a, b", "a]", "|", ">", "%x", "@x", "`x", "a\u{1}b", "x:", "http://example.com/a?b=c", "Centro: HUB", "[index, query, latency]",
    ]
    /// Values of the shape read directly, drawn as often as all the others together.
    static let common = ["hello", "Hello World", "yes", "off", "~", "0", "+5", "-12", "42", "2024-07-03", "C#", "[a, b]", "[]",
                         "[yes, 1, x y, 2024-07-03]", "é ü", "http://example.com/a?b=c", "[index, query, latency]", "x#"]
    /// A line: a key, a separator and a value (index `values.count`: none, `key:` alone).
    static let line = zip(Gen<Int>.int(in: 0...(keys.count - 1)), Gen<Int>.int(in: 0...(separators.count - 1)),
                          Gen<Int>.int(in: 0...(2 * values.count)))
        .map { k, s, v in
            keys[k] + (v == values.count ? ":" : separators[s] + (v < values.count ? values[v] : common[v % common.count]))
        }
    /// A block of lines, joined as YAML may be: with CRLF, blank lines, a nested list, a comment.
    static let block = zip(Gen<Int>.int(in: 0...9), line.array(of: 1...4))
        .map { shape, lines -> String in
            switch shape {
            case 0: return lines.joined(separator: "\n")
            case 1: return lines.joined(separator: "\r\n") + "\r\n"
            case 2: return lines.joined(separator: "\n\n") + "\n"
            case 3: return lines.joined(separator: "\n") + "\n  - nested\n"
            case 4: return "# a comment\n" + lines.joined(separator: "\n")
            default: return lines.joined(separator: "\n") + "\n"
            }
        }

    @Test func FS8_plainFrontMatterReadsAsYAMLDoes() async {
        let taken = Mutex(0)
        await propertyCheck(count: 6000, input: Self.block) { yaml in
            guard let plain = PlainFrontMatter.read(yaml) else { return }
            taken.withLock { $0 += 1 }
            let parsed = try? FrontMatter.yamlProperties(yaml)
            #expect(parsed == plain, "\(yaml.debugDescription)")
        }
        // Enough blocks were read directly for the comparison to mean something.
        #expect(taken.withLock { $0 } >= 300)
    }

    /// A note's usual front matter takes the direct way; the shapes it is not sure of go to YAML.
    @Test func FS8_commonFrontMatterIsReadDirectly() throws {
        let common = "title: Or Anconra Anconkami\ntags: [index, query, latency]\ncreated: 2024-07-03\nn: 7\ndone: yes\nempty:\nurl: http://x.org/a#b\n"
        let p = try #require(PlainFrontMatter.read(common))
        #expect(p == (try FrontMatter.yamlProperties(common)))
        #expect(p["tags"] == .array([.string("index"), .string("query"), .string("latency")]))
        #expect(p["created"] == .string("2024-07-03") && p["n"] == .int(7) && p["done"] == .bool(true) && p["empty"] == .null)
        for other in ["title: 'quoted'", "a: 1.5", "a: 007", "a: -0", "a: b # note", "tags:\n  - x", "a: [x,\n  y]", "a: 1\na: 2",
                      "a: x\r\n", "title: Centro: HUB", "a: *ref", "a:\tb"] {
            #expect(PlainFrontMatter.read(other) == nil, "\(other.debugDescription)")
        }
    }

    /// The cheap typing rules give the tag YAML's resolver gives.
    @Test func FS8_cheapScalarTypesAreTheResolversTypes() {
        for v in ["0", "7", "+5", "-12", "1234567890123", "99999999999999999999", "2024-07-03", "2024-13-45", "0000-00-00"] {
            #expect(FrontMatter.plainTag(v) == Resolver.default.resolveTag(of: Node(v)), "\(v)")
        }
        #expect(PlainFrontMatter.isDecimal("-0") == false && PlainFrontMatter.isDecimal("007") == false && PlainFrontMatter.isDecimal("0"))
    }
}
