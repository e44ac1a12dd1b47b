import Foundation

/// Which new names in the vault's tree are local-only (FS-32): the tool directories every vault
/// keeps to itself, and what the vault's own `.marfafsignore` names (gitignore's syntax, a
/// subset: `#` comments, `!` to take a name back, a trailing `/` for folders only, a pattern with
/// a `/` anchored at the top of the vault, `*`, `?` and `[…]` as in fnmatch(3); the last pattern
/// that matches decides). A rule decides where a name goes when it is made; what exists stays
/// where it is.
struct LocalRules: Sendable {
    static let defaultFolders = [".git", ".hg", ".svn", ".jj", "node_modules"]
    static let fileName = ".marfafsignore"

    /// The `.marfafsignore` the rules were read from, as the mount shows it (nil: none).
    struct Source: Equatable, Sendable {
        var ino: UInt64, mtime: Int64, size: Int64
    }

    struct Pattern: Sendable {
        var glob: String
        var negated: Bool
        var foldersOnly: Bool
        var anchored: Bool
    }
    var patterns: [Pattern]

    init(text: String? = nil) {
        patterns = Self.defaultFolders.map { Pattern(glob: $0, negated: false, foldersOnly: true, anchored: false) }
        for raw in (text ?? "").split(whereSeparator: \.isNewline) {
            var line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            var p = Pattern(glob: "", negated: false, foldersOnly: false, anchored: false)
            if line.hasPrefix("!") { p.negated = true; line.removeFirst() }
            if line.hasSuffix("/") { p.foldersOnly = true; line.removeLast() }
            if line.hasPrefix("/") { line.removeFirst(); p.anchored = true }
            if line.contains("/") { p.anchored = true }
            if line.hasPrefix("**/") { line.removeFirst(3); p.anchored = line.contains("/") }
            if line.isEmpty { continue }
            p.glob = line
            patterns.append(p)
        }
    }

    /// Whether a name made at vault path `rel` (a folder when `folder`) is local-only.
    func isLocal(_ rel: String, folder: Bool) -> Bool {
        let base = rel.split(separator: "/").last.map(String.init) ?? rel
        var local = false
        for p in patterns where !p.foldersOnly || folder {
            let hit = p.anchored ? fnmatch(p.glob, rel, FNM_PATHNAME) == 0 : fnmatch(p.glob, base, 0) == 0
            if hit { local = !p.negated }
        }
        return local
    }
}
