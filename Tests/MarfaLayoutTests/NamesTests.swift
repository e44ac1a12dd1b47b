import MarfaLayout
import MarfaModel
import PropertyBased
import Testing

/// Characters that stress names and YAML: separators, quotes, controls, look-alikes, non-ASCII.
let trickyCharacters: [Character] = Array("abcXYZ019 -_.:#'\"/\\∕[]{},&*!|>%@`?~=éü日😀\t\n\r") + ["\u{0}", "\u{7}", "\u{1b}", "\u{85}", "\u{2028}"]
let trickyString = Gen<Int>.int(in: 0...(trickyCharacters.count - 1)).map { trickyCharacters[$0] }.array(of: 0...24).map { String($0) }

@Suite struct NamesTests {
    @Test func FS6_slashIsShownAsDivisionSlashAndBack() {
        #expect(Names.escape("a/b") == "a∕b")
        #expect(Names.unescape(Names.escape("a/b/c")) == "a/b/c")
    }

    @Test func FS6_controlCharactersAreDropped() {
        #expect(Names.escape("a\u{0}b\nc\td\u{7f}") == "abcd")
    }

    @Test func FS6_escapingIsReversibleForNamesWithoutControls() async {
        await propertyCheck(input: trickyString) { s in
            let clean = String(String.UnicodeScalarView(s.unicodeScalars.filter { $0.properties.generalCategory != .control }))
            let noStandIn = clean.replacingOccurrences(of: "∕", with: "")
            #expect(Names.unescape(Names.escape(noStandIn)) == noStandIn)
            #expect(!Names.escape(s).contains("/"))
            #expect(!Names.escape(s).unicodeScalars.contains { $0.properties.generalCategory == .control })
        }
    }

    @Test func FS6_namesAreCutTo255BytesOnAUTF8Boundary() {
        let long = String(repeating: "é", count: 200)   // 400 bytes
        let name = Names.compose(stem: long, ext: ".md")
        #expect(name.utf8.count <= 255)
        #expect(name.hasSuffix(".md"))
        #expect(String(validating: Array(name.utf8), as: UTF8.self) != nil)
        let emoji = String(repeating: "😀", count: 100)
        let n2 = Names.compose(stem: emoji, suffix: " [12345678]", ext: ".md")
        #expect(n2.utf8.count <= 255 && n2.hasSuffix(" [12345678].md"))
    }

    @Test func FS7_olderItemKeepsTheNameOthersGetIdSuffix() {
        let a = NameClaim(key: 1, stem: "Plan", ext: ".md", createdAt: "2026-01-02T00:00:00Z", id: "0190aaaa-0000-7000-8000-0000deadbeef")
        let b = NameClaim(key: 2, stem: "Plan", ext: ".md", createdAt: "2026-01-01T00:00:00Z", id: "0190aaaa-0000-7000-8000-0000cafef00d")
        let names = Names.resolve(claims: [a, b])
        #expect(names[2] == "Plan.md")
        #expect(names[1] == "Plan [deadbeef].md")
    }

    @Test func FS7_sameCreatedAtFallsBackToId() {
        let a = NameClaim(key: 1, stem: "x", ext: ".md", createdAt: "t", id: "b-00000002")
        let b = NameClaim(key: 2, stem: "x", ext: ".md", createdAt: "t", id: "a-00000001")
        #expect(Names.resolve(claims: [a, b]) == [2: "x.md", 1: "x [00000002].md"])
    }

    @Test func FS4_untitledItemIsNamedById() {
        let t = TypeSchema.builtIns.first { $0.id == "core.note" }!
        let (stem, ext) = Names.stemAndExt(id: "0190-id", type: t, properties: ["body": "x"], fileName: nil)
        #expect(stem == "0190-id" && ext == ".md")
    }

    @Test func FS5_blobItemsTakeTheExtensionOfTheirFileOrMime() {
        let t = TypeSchema.builtIns.first { $0.id == "core.file.image" }!
        #expect(Names.stemAndExt(id: "i", type: t, properties: ["title": "Sunset", "filename": "IMG_1.JPG", "mime_type": "image/jpeg"], fileName: nil) == ("Sunset", ".JPG"))
        #expect(Names.stemAndExt(id: "i", type: t, properties: ["title": "Sunset", "mime_type": "image/png"], fileName: nil) == ("Sunset", ".png"))
    }

    @Test func FS5_aChosenNameIsKeptExactly() {
        let t = TypeSchema.builtIns.first { $0.id == "core.note" }!
        #expect(Names.stemAndExt(id: "i", type: t, properties: ["title": "Other"], fileName: "todo.txt") == ("todo", ".txt"))
    }

    @Test func UUIDv7_idsAreVersion7AndIncrease() {
        var last = ""
        for _ in 0..<2000 {
            let id = ItemID.make()
            #expect(ItemID.isUUIDv7(id))
            #expect(id > last)
            last = id
        }
    }
}
