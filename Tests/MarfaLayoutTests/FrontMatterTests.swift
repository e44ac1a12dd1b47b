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
        let value = Gen<Int>.int(in: 0...6).map { _ in JSONValue.null }
        _ = value
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
