import Testing
@testable import MarfaLayout

/// FS-26: links and tags read from a note's text as Obsidian reads them, and tags written back.
@Suite struct VaultTextTests {
    @Test func FS26_linksOfEveryForm() {
        let text = """
        ---
        tags: [alpha, "#beta"]
        ---
        # Heading is not a tag
        See [[Plain]], [[Aliased|the alias]], [[Headed#Section]], [[Both#Part|shown]], [[folder/Deep]].
        An embed: ![[diagram.png]] and ![[Note#^block]]. A self link [[#Local]].
        Relative: [text](../Attachments/x%20y.png "title"), ![img](pics/a.png), [web](https://example.com/#x), [anchor](#here).
        Table: | [[Piped\\|alias]] |
        Inline `[[not-a-link]] #not-a-tag` and %% [[hidden]] #hidden %%.
        ```
        [[not-a-link-either]] #nor-this
        ```
        #gamma at the start, a #nested/tag, an#inword, a #123 number, #delta.
        ~~~md
        #no
        ~~~
        """
        let s = VaultText.scan(text)
        #expect(s.links.map(\.target) == ["Plain", "Aliased", "Headed", "Both", "folder/Deep", "diagram.png", "Note",
                                          "../Attachments/x y.png", "pics/a.png", "Piped"])
        #expect(s.links.filter(\.embed).map(\.target) == ["diagram.png", "Note", "pics/a.png"])
        #expect(s.links.filter(\.markdown).map(\.target) == ["../Attachments/x y.png", "pics/a.png"])
        #expect(s.tags == ["alpha", "beta", "gamma", "nested/tag", "delta"])
    }

    @Test func FS26_frontMatterTagStyles() {
        #expect(VaultText.scan("---\ntags: one, two\n---\nx").tags == ["one", "two"])
        #expect(VaultText.scan("---\ntags: one two\n---\nx").tags == ["one", "two"])
        #expect(VaultText.scan("---\ntags:\n  - one\n  - proj/two\n---\nx").tags == ["one", "proj/two"])
        #expect(VaultText.scan("---\ntag: solo\n---\n#Solo #other").tags == ["solo", "other"])
    }

    @Test func FS26_addingATagKeepsTheStyle() {
        #expect(VaultText.addingTag("new", to: "---\ntags: [a, b]\n---\nbody\n") == "---\ntags: [a, b, new]\n---\nbody\n")
        #expect(VaultText.addingTag("new", to: "---\ntags:\n  - a\nstatus: x\n---\nbody\n") == "---\ntags:\n  - a\n  - new\nstatus: x\n---\nbody\n")
        #expect(VaultText.addingTag("new", to: "---\ntags: a, b\n---\nbody\n") == "---\ntags: a, b, new\n---\nbody\n")
        #expect(VaultText.addingTag("new", to: "---\ntags: a\n---\nbody\n") == "---\ntags: a new\n---\nbody\n")
        #expect(VaultText.addingTag("new", to: "---\nstatus: x\n---\nbody\n") == "---\nstatus: x\ntags:\n  - new\n---\nbody\n")
        #expect(VaultText.addingTag("p/q", to: "just a body\n") == "---\ntags:\n  - p/q\n---\njust a body\n")
        #expect(VaultText.addingTag("a", to: "has #a inline\n") == nil)
    }

    @Test func FS26_removingATagFromFrontMatterAndText() {
        #expect(VaultText.removingTag("b", from: "---\ntags: [a, b]\n---\nbody\n") == "---\ntags: [a]\n---\nbody\n")
        #expect(VaultText.removingTag("a", from: "---\ntags:\n  - a\n  - b\n---\nbody\n") == "---\ntags:\n  - b\n---\nbody\n")
        #expect(VaultText.removingTag("a", from: "---\ntags:\n  - a\nstatus: x\n---\nbody\n") == "---\nstatus: x\n---\nbody\n")
        #expect(VaultText.removingTag("a", from: "---\ntags: [a]\n---\nbody #a and `#a` and #ab\n") == "body a and `#a` and #ab\n")
        #expect(VaultText.removingTag("x/y", from: "see #x/y, #x/y/z\n") == "see x/y, #x/y/z\n")
        #expect(VaultText.removingTag("zzz", from: "nothing\n") == nil)
    }

    /// Windows line ends: lines end at each "\n" (a "\r\n" is one character, and was never a line
    /// end), so fences are seen and a tag's removal keeps every "\r".
    @Test func FS26_crlfTextHasLinesFencesAndTags() {
        let text = "A [[One]] #t\r\n```\r\n[[Not]] #u\r\n```\r\nB [[Two]]\r\n"
        let s = VaultText.scan(text)
        #expect(s.links.map(\.target) == ["One", "Two"])
        #expect(s.tags == ["t"])
        #expect(VaultText.removingTag("t", from: text) == "A [[One]] t\r\n```\r\n[[Not]] #u\r\n```\r\nB [[Two]]\r\n")
        // Front matter with "\r\n" keeps it on every line a tag's change writes, and no blank line.
        let crlf = "---\r\ntags: [a, b]\r\n---\r\nBody\r\n"
        #expect(VaultText.removingTag("a", from: crlf) == "---\r\ntags: [b]\r\n---\r\nBody\r\n")
        #expect(VaultText.addingTag("c", to: crlf) == "---\r\ntags: [a, b, c]\r\n---\r\nBody\r\n")
        #expect(VaultText.addingTag("c", to: "---\r\ntitle: x\r\n---\r\nBody\r\n") == "---\r\ntitle: x\r\ntags:\r\n  - c\r\n---\r\nBody\r\n")
    }

    /// The ASCII shortcut of a tag's characters is what Unicode's properties say of them, and
    /// trimming a front-matter tag trims what Foundation's whitespace set holds.
    @Test func FS26_tagCharactersAndTrimmingAsUnicodeSays() {
        for v in UInt32(0)..<128 {
            let c = Unicode.Scalar(v)!
            let byProperties = c == "_" || c == "-" || c == "/" || c.properties.isAlphabetic || c.properties.numericType != nil
                || c.properties.generalCategory == .nonspacingMark || c.properties.isEmojiPresentation
            #expect(VaultText.isTagScalar(c) == byProperties, "U+\(String(v, radix: 16))")
        }
        for s in ["a", " a", "a ", "\ta\t", "\u{a0}a\u{2003}", "é", "", " ", "a b"] {
            #expect(VaultText.trimmedWhitespace(s) == s.trimmingCharacters(in: .whitespaces), "\(s.debugDescription)")
        }
        #expect(VaultText.hasWikiOpening("x [[y") && !VaultText.hasWikiOpening("[x] [") && !VaultText.hasWikiOpening(""))
    }
}
