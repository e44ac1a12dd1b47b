import Foundation

/// A blob's name (wire.md §5): `sha256:` and the 64 lowercase hex digits of its content's SHA-256
/// digest. The rule is written here once; the digest is computed where the bytes are (swift-crypto,
/// in the store and the server).
public enum BlobHash {
    public static let prefix = "sha256:"

    /// The name of the blob whose SHA-256 digest is `digest` (also one computed a chunk at a time).
    public static func name(digest: some Sequence<UInt8>) -> String {
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        var out = Array(prefix.utf8)
        for b in digest { out.append(hex[Int(b >> 4)]); out.append(hex[Int(b & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Whether `s` is a blob's name: `sha256:` and 64 lowercase hex digits.
    public static func isValid(_ s: String) -> Bool {
        guard s.hasPrefix(prefix) else { return false }
        let hex = s.utf8.dropFirst(prefix.utf8.count)
        return hex.count == 64 && hex.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }
}

/// What a tag may be (wire.md §2), on the server and on the mount alike: a non-empty string of at
/// most 128 characters with no comma (`user.marfa.tags` lists tags comma-separated), newline or
/// other control character.
public enum TagRule {
    public static let maxCharacters = 128
    public static let description = "a tag is a non-empty string of at most 128 characters without commas or control characters"

    public static func isValid(_ tag: String) -> Bool {
        // An ASCII tag (nearly every one: every note's folder tag is checked at each import and
        // settle) by its bytes, each a character: a comma, or a control character (below 0x20, or
        // DEL), refuses it.
        if let ascii = asASCII(tag, { p in !p.isEmpty && p.count <= maxCharacters && !p.contains { $0 == UInt8(ascii: ",") || $0 < 0x20 || $0 == 0x7f } }) {
            return ascii
        }
        return !tag.isEmpty && tag.count <= maxCharacters && !tag.contains(",") && !hasControlCharacter(tag)
    }

    /// Whether `s` holds a control character (general category Cc).
    public static func hasControlCharacter(_ s: String) -> Bool {
        if let ascii = asASCII(s, { p in p.contains { $0 < 0x20 || $0 == 0x7f } }) { return ascii }
        return s.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    /// `check` of the bytes of `s` when they are all ASCII; nil otherwise.
    private static func asASCII(_ s: String, _ check: (UnsafeBufferPointer<UInt8>) -> Bool) -> Bool? {
        var s = s
        return s.withUTF8 { p in p.allSatisfy { $0 < 0x80 } ? check(p) : nil }
    }
}
