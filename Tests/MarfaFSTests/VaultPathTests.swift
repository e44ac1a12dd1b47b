import Foundation
@testable import MarfaFS
import PropertyBased
import Testing

/// The vault index cuts and normalizes the paths links name (FS-27): an ASCII path from its bytes,
/// any other as Characters (the definitions, `…ByCharacters`). The bytes read every path exactly
/// as the definitions do.
@Suite struct VaultPathTests {
    static let pieces = ["a", "Note", "x y", ".", "..", "...", "/", "//", ".md", "é", "日", "\u{301}", "\r\n", "#h", "|"]
    static let paths = Gen<Int>.int(in: 0...(pieces.count - 1)).array(of: 0...9).map { $0.map { pieces[$0] }.joined() }

    @Test func FS27_aPathsLastComponentAndNormalFormAreTheCharacterwiseOnes() async {
        await propertyCheck(count: 2000, input: Self.paths) { path in
            #expect(VaultIndex.lastComponent(path) == VaultIndex.lastComponentByCharacters(path), "\(path.debugDescription)")
            #expect(VaultIndex.normalize(path) == VaultIndex.normalizeByCharacters(path), "\(path.debugDescription)")
        }
        #expect(VaultIndex.normalize("a/../../b") == nil, "above the top")
        #expect(VaultIndex.normalize("area00/../area01/./n.md") == "area01/n.md")
        #expect(VaultIndex.lastComponent("a/b//") == "b")
        #expect(VaultIndex.lastComponent("a/\u{301}b") == "a/\u{301}b", "a mark joins the slash: one component")
    }
}
