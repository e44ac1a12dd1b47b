import Foundation
import MarfaLayout
import MarfaModel
import PropertyBased
import Testing

@Suite struct FrontMatterTests {
    @Test func FS8_frontMatterAndBodyParse() throws {
        let text = "---\ndue: 2026-12-01\nstatus: draft\ncount: 3\nratio: 0.5\ndone: false\nnothing: null\nlist: [a, 1]\n---\nthe body\n"
        let p = try FrontMatter.parse(text)
        #expect(p.properties["due"] == .string("2026-12-01"))
        #expect(p.properties["status"] == .string("draft"))
        #expect(p.properties["count"] == .int(3))
        #expect(p.properties["ratio"] == .double(0.5))
        #expect(p.properties["done"] == .bool(false))
        #expect(p.properties["nothing"] == .null)
        #expect(p.properties["list"] == .array([.string("a"), .int(1)]))
        #expect(p.properties["body"] == .string("the body\n"))
        #expect(!p.hasTitleKey)
    }

    /// What Obsidian still reads of broken front matter: each top-level key whose lines parse
    /// alone, a one-line key that does not as its text, and the body after the block.
    @Test func FS32_salvageReadsTheKeysThatParseAloneAndTheBody() throws {
        let text = "---\ntitle: Centro: HUB\ntags:\n  - crm\n  - hub\nbad: [unclosed\n  still: bad\nn: 3\n---\nBody [[x]]\n"
        #expect(throws: FrontMatterError.self) { try FrontMatter.parse(Array(text.utf8)) }
        let p = try #require(FrontMatter.salvage(Array(text.utf8)))
        #expect(p["title"] == .string("Centro: HUB"))
        #expect(p["tags"] == .array([.string("crm"), .string("hub")]))
        #expect(p["n"] == .int(3))
        #expect(p["bad"] == nil, "a key over several lines that does not parse is left out")
        #expect(p["body"] == .string("Body [[x]]\n"))
        #expect(FrontMatter.salvage([0x66, 0, 0x67]) == nil, "not text")
        // The same note written with "\r\n" line ends (Windows): the same keys.
        let crlf = text.replacingOccurrences(of: "\n", with: "\r\n")
        #expect(throws: FrontMatterError.self) { try FrontMatter.parse(Array(crlf.utf8)) }
        let q = try #require(FrontMatter.salvage(Array(crlf.utf8)))
        #expect(q["title"] == .string("Centro: HUB"))
        #expect(q["tags"] == .array([.string("crm"), .string("hub")]))
        #expect(q["n"] == .int(3))
        #expect(q["bad"] == nil)
    }

    /// Plain scalars get the types YAML 1.1 gives them (Yams's default resolver), explicit tags
    /// and quotes win, and a key is a key whatever it looks like.
    @Test func FS8_plainScalarsAreTypedAsYAMLReadsThem() throws {
        let text = """
            ---
            a: yes
            b: Off
            c: ~
            d:
            e: 0x1F
            f: -0o17
            g: 1_000
            h: 1:30
            i: .5
            j: -.inf
            k: 6.02e+23
            l: 2024-01-02 03:04:05
            m: The title
            n: "42"
            o: !!str 42
            p: '+1'
            q: =
            r: Yes please
            s: [on, 7, x]
            1: numeric key
            ---
            body
            """
        let p = try FrontMatter.parse(text).properties
        #expect(p["a"] == .bool(true) && p["b"] == .bool(false) && p["c"] == .null && p["d"] == .null)
        #expect(p["e"] == .int(31) && p["f"] == .int(-15) && p["g"] == .int(1000) && p["h"] == .int(90))
        #expect(p["i"] == .double(0.5) && p["j"] == .double(-.infinity) && p["k"] == .double(6.02e23))
        #expect(p["l"] == .string("2024-01-02 03:04:05") && p["m"] == .string("The title") && p["r"] == .string("Yes please"))
        #expect(p["n"] == .string("42") && p["o"] == .string("42") && p["p"] == .string("+1") && p["q"] == .string("="))
        #expect(p["s"] == .array([.bool(true), .int(7), .string("x")]))
        #expect(p["1"] == .string("numeric key"))
        // What renders plain reads back as the same string.
        for v in ["yes", "1:30", ".5", "~", "<<", "=", "2024-01-02", "The title", "0x1F", "-", "a-b"] {
            let back = try FrontMatter.parse(FrontMatter.render(["title": .string("t"), "v": .string(v), "body": .string("")], includeTitle: false)).properties["v"]
            #expect(back == .string(v), "\(v)")
        }
    }

    @Test func FS8_titleAndBodyOnlyRendersAsBareBody() {
        #expect(FrontMatter.render(["title": "T", "body": "just text\n"]) == "just text\n")
    }

    @Test func FS8_stringsThatLookLikeOtherTypesAreQuoted() throws {
        let props: [String: JSONValue] = ["d": "2026-12-01", "n": "42", "b": "yes", "z": "null", "f": "1.5", "body": ""]
        let text = FrontMatter.render(props)
        #expect(text.contains("d: \"2026-12-01\""))
        #expect(text.contains("n: \"42\""))
        let back = try FrontMatter.parse(text)
        #expect(back.properties == props)
    }

    @Test func FS8_textWithoutClosingDelimiterIsAllBody() throws {
        let p = try FrontMatter.parse("---\nnot front matter\n")
        #expect(p.properties == ["body": "---\nnot front matter\n"])
    }

    @Test func FS10_malformedFrontMatterIsAnError() {
        #expect(throws: FrontMatterError.self) { try FrontMatter.parse("---\nkey: [unclosed\n---\nbody") }
        #expect(throws: FrontMatterError.self) { try FrontMatter.parse("---\n- a list\n---\nbody") }
        #expect(throws: FrontMatterError.invalidUTF8) { try FrontMatter.parse([0x66, 0xff, 0xfe]) }
    }

    @Test func FS8_renderThenParseIsIdentity() async {
        await propertyCheck(count: 300, input: trickyString, trickyString, Gen<Int>.int(in: -1000...1000), trickyString) { key, str, n, body in
            var props: [String: JSONValue] = ["body": .string(body)]
            let k = key.isEmpty ? "k" : key
            if k != "body" && k != "title" {
                props[k] = .string(str)
                props[k + "_n"] = .int(Int64(n))
                props[k + "_list"] = .array([.string(str), .double(Double(n) / 4), .bool(n % 2 == 0), .null])
                props[k + "_obj"] = .object(["s": .string(str)])
            }
            let text = FrontMatter.render(props)
            let back = try? FrontMatter.parse(text)
            #expect(back?.properties == props, "render: \(text.debugDescription)")
        }
    }

    @Test func FS8_parseKeepsBodyBytesVerbatim() async {
        await propertyCheck(input: trickyString) { body in
            let text = "---\na: 1\n---\n" + body
            #expect((try? FrontMatter.parse(text))?.properties["body"] == .string(body))
        }
    }
}

@Suite struct JSONCodingTests {
    @Test func encodeThenDecodeIsIdentity() async {
        await propertyCheck(count: 300, input: trickyString, Gen<Int>.int(in: -1_000_000...1_000_000), trickyString) { s, n, k in
            var v: [String: JSONValue] = [
                "n": .int(Int64(n)), "d": .double(Double(n) / 7), "i": .double(Double(n)),
                "a": .array([.null, .bool(n % 2 == 0), .string(s), .object([k: .int(-1)])]),
            ]
            v[s] = .string(k)   // a generated key may be one of the above: assignment, not a literal
            let text = JSONCoding.encode(v)
            #expect(JSONCoding.object(from: text) == v, "\(text)")
        }
    }

    /// A note's body is read out of its properties' JSON without parsing the rest: the same string
    /// a full parse gives, for any key and any text around it.
    @Test func oneStringFieldIsWhatAFullParseGives() async {
        await propertyCheck(count: 300, input: trickyString, trickyString, trickyString) { body, key, other in
            let v: [String: JSONValue] = ["title": .string(other), "body": .string(body), key: .string(other), "n": .array([.string(body), .int(3)])]
            let text = JSONCoding.encode(v)
            for k in ["body", key, "title"] {
                #expect(JSONParser.stringField(k, in: text) == v[k]?.stringValue, "\(k) in \(text)")
            }
            #expect(JSONParser.stringField("n", in: text) == nil, "not a string")
            #expect(JSONParser.stringField("missing", in: text) == (v["missing"]?.stringValue))
        }
        #expect(JSONParser.stringField("b", in: "{\"b\": \"1\", \"b\": \"2\"}") == "2", "the last of duplicates, as parse")
        #expect(JSONParser.stringField("b", in: "{\"b\": \"1\", \"b\": 2}") == nil, "the last of duplicates is not a string")
        #expect(JSONParser.stringField("b", in: "{\"b\": \"x\"") == nil, "not a whole object")
        #expect(JSONParser.stringField("b", in: "[\"b\"]") == nil)
    }
}

@Suite struct JSONParserTests {
    /// FS-8: a note's text is its head then its body read out of its properties' JSON, eight
    /// bytes at a time where nothing needs decoding. Long texts with quotes, backslashes, control
    /// characters and multi-byte letters at every offset of a word come back byte for byte, after
    /// whatever the buffer held.
    @Test func FS8_aBodyReadOutOfItsPropertiesIsItsBytesWhereverItsEscapesFall() async {
        let pieces = ["a", "bcdefgh", "\"", "\\", "\n", "\t", "\u{1}", "é", "😀", "/", " ", "0123456789abcdef", "\u{7f}"]
        await propertyCheck(count: 400, input: Gen<Int>.int(in: 0...(pieces.count - 1)).array(of: 0...60), Gen<Int>.int(in: 0...9)) { picks, pad in
            let body = picks.map { pieces[$0] }.joined()
            let text = JSONCoding.encode(["title": .string(String(repeating: "x", count: pad)), "body": .string(body), "z": .int(1)])
            #expect(JSONParser.stringField("body", in: text) == body, "\(text)")
            var out: [UInt8] = Array("head\n".utf8)
            #expect(JSONParser.appendStringField("body", in: text, to: &out))
            #expect(out == Array("head\n".utf8) + Array(body.utf8), "\(text)")
            var unchanged: [UInt8] = [1, 2]
            #expect(!JSONParser.appendStringField("missing", in: text, to: &unchanged) && unchanged == [1, 2])
        }
        // A value decoded in place is taken back when a later duplicate is not a string or the
        // object does not end; a later string replaces an earlier value.
        var held: [UInt8] = [7]
        #expect(!JSONParser.appendStringField("b", in: "{\"b\": \"1\", \"b\": 2}", to: &held) && held == [7])
        #expect(!JSONParser.appendStringField("b", in: "{\"b\": \"1\"", to: &held) && held == [7])
        #expect(JSONParser.appendStringField("b", in: "{\"b\": \"1\", \"b\": \"x\\ny\"}", to: &held) && held == [7] + Array("x\ny".utf8))
    }

    @Test func strictParserRefusesMalformedText() {
        for bad in ["", "{", "[1,]", "{\"a\" 1}", "\"unterminated", "\"ctl\u{1}\"", "01x", "1 2", "tru", "{\"a\":1}}", "\"\\x\""] {
            #expect(throws: JSONParser.Failure.self, "\(bad.debugDescription)") { _ = try JSONParser.parse(bad) }
        }
    }

    /// A string's text, escapes and plain runs in any order, reads as Foundation's parser reads
    /// it; a raw control character or a bad escape anywhere is refused, as there (RFC 8259).
    @Test func stringsReadAsFoundationReadsThem() async throws {
        let pieces = ["a", "plain run of text ", "é", "😀", "\\n", "\\\"", "\\\\", "\\/", "\\t", "\\u00e9", "\\ud83d\\ude00",
                      "\\u0000", "\\b\\f\\r", "\u{7f}", "'", "{", "]", ","]
        await propertyCheck(count: 500, input: Gen<Int>.int(in: 0...(pieces.count - 1)).array(of: 0...12)) { picks in
            let json = "\"" + picks.map { pieces[$0] }.joined() + "\""
            let foundation = try? JSONSerialization.jsonObject(with: Data(json.utf8), options: [.fragmentsAllowed]) as? String
            #expect(foundation != nil, "\(json)")
            #expect((try? JSONParser.parse(json)) == foundation.map { JSONValue.string($0) }, "\(json)")
            #expect(JSONParser.stringField("k", in: "{\"k\": \(json), \"z\": \(json)}") == foundation, "\(json)")
        }
        for bad in ["\"a\u{1}b\"", "\"a\\qb\"", "\"\\u12\"", "\"abc", "\"a\\\"", "\"\\ud800x\\u0041\""] {
            #expect(throws: JSONParser.Failure.self, "\(bad.debugDescription)") { _ = try JSONParser.parse(bad) }
        }
    }

    @Test func parserKeepsNumberKindsAndEscapes() throws {
        #expect(try JSONParser.parse("1") == .int(1))
        #expect(try JSONParser.parse("1.0") == .double(1.0))
        #expect(try JSONParser.parse("-2e3") == .double(-2000))
        #expect(try JSONParser.parse("0.1") == .double(0.1))
        #expect(try JSONParser.parse("\"a\\u00e9\\ud83d\\ude00\\n\"") == .string("aé😀\n"))
        #expect(try JSONParser.parse(" [true, null, {\"k\": []}] ") == .array([.bool(true), .null, .object(["k": .array([])])]))
    }
}

@Suite struct TagRuleTests {
    /// FS-26, wire.md §2: what a tag may be, checked by its bytes when it is ASCII, is what the rule says in
    /// characters: at most 128, no comma, no control character (DEL and "\r\n" included).
    @Test func FS26_aTagIsValidByItsCharactersWhetherASCIIOrNot() async {
        func rule(_ t: String) -> Bool {
            !t.isEmpty && t.count <= TagRule.maxCharacters && !t.unicodeScalars.contains { $0 == "," || $0.properties.generalCategory == .control }
        }
        let pieces = ["a", "folder:x/y", ",", "\r\n", "\t", "\u{7f}", "\u{85}", "é", "e\u{301}", "😀", " ", String(repeating: "z", count: 60)]
        await propertyCheck(count: 500, input: Gen<Int>.int(in: 0...(pieces.count - 1)).array(of: 0...5)) { picks in
            let t = picks.map { pieces[$0] }.joined()
            #expect(TagRule.isValid(t) == rule(t), "\(t.debugDescription)")
            #expect(TagRule.hasControlCharacter(t) == t.unicodeScalars.contains { $0.properties.generalCategory == .control }, "\(t.debugDescription)")
        }
        #expect(TagRule.isValid(String(repeating: "a", count: 128)) && !TagRule.isValid(String(repeating: "a", count: 129)))
    }
}
