import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

/// The vault as its notes see it (FS-26, FS-27): where each active item sits in the vault's tree
/// (its `folder:` tag and its own name), and what the links in text items resolve to, by
/// Obsidian's rules. Built on first use (a mount that never looks at `links/`, `backlinks/` or
/// `vault/` never pays for it) and kept current by `FileSystem.refreshVault`. Its links are
/// resolved on first use too: a mount that only lists `vault/` (an editor, `grep -r`, `git`) has
/// its tree at once and never waits for every link to be resolved.
struct VaultIndex {
    /// Active items → their folder ("" for the top level).
    var folderOf: [Int64: String] = [:]
    /// Folder → the names of its items (FS-7 within the folder).
    var trees: [String: NameTable] = [:]
    /// Lower-cased name key (`nameKey`) → the active items that have it.
    var byName: [String: Set<Int64>] = [:]
    /// Active items → their vault path, lower-cased (`Catalog.vaultPath`): every link naming an
    /// item's name compares it, so it is made when the item comes or moves, not at each look.
    var pathOf: [Int64: String] = [:]
    /// Text items → the links their text holds.
    var linksOf: [Int64: [VaultLink]] = [:]
    /// Text items → the name key of each of their links (as in `linksOf`, in order): every create
    /// or rename of a name looks for the links that name it, in each note that has one.
    var linkKeysOf: [Int64: [String]] = [:]
    /// Name key → the text items with a link whose last component has it.
    var linkers: [String: Set<Int64>] = [:]
    /// Source → the derived edges it has now: (target, edge type) → edge rowid.
    var derivedOut: [Int64: [Derived: Int64]] = [:]
    /// Every derived edge ever made in this mount keeps its (negative) rowid, so its inode stays.
    var derivedRowids: [DerivedKey: Int64] = [:]
    var nextRowid: Int64 = -1
    /// Source → the targets of its links that resolve to nothing.
    var unresolved: [Int64: [String]] = [:]
    /// Source → what each of its links (as in `linksOf`, in order) resolved to when last looked
    /// at: a change to items of one name re-resolves only the links naming it.
    var targetsOf: [Int64: [Int64?]] = [:]
    /// Whether the links are resolved (`derivedOut`, `unresolved`, `targetsOf`, and the derived
    /// edges in the catalog). Until then a change resolves nothing: the first resolution takes
    /// every note as it is by then.
    var linksResolved = false
    /// Whether `linksOf`, `linkKeysOf` and `linkers` hold the notes' links. The tree is built
    /// without them (the first listing of `vault/` after a mount, which a `grep -r` or an editor
    /// waits for, spent half its time reading and decoding every note's links); they are read
    /// with the first resolution (`FileSystem.ensureLinks`), as the store has them then, and a
    /// change before that takes no account of them.
    var linksLoaded = false
    /// Name keys of items that came, went or moved since the links naming them were last
    /// re-resolved (`FileSystem.resolvePendingLinks`).
    var pendingKeys: Set<String> = []

    struct Derived: Hashable { var target: Int64; var edgeType: String }
    struct DerivedKey: Hashable { var source: Int64; var target: Int64; var edgeType: String }

    /// The key names are found by: lower-cased, without a final `.md` (a link may leave it out).
    static func nameKey(_ name: Substring) -> String {
        let l = name.lowercased()
        return l.hasSuffix(".md") ? String(l.dropLast(3)) : l
    }

    /// The name key a link's target is found by (its last component's).
    static func linkKey(_ link: VaultLink) -> String { nameKey(lastComponent(link.target)) }

    /// Sets the links of `r` and their keys.
    mutating func setLinks(_ r: Int64, _ links: [VaultLink]) {
        linksOf[r] = links.isEmpty ? nil : links
        linkKeysOf[r] = links.isEmpty ? nil : links.map(Self.linkKey)
    }

    static func lastComponent(_ path: String) -> Substring {
        // An ASCII path is cut at its bytes (every link resolution looks at one, and at each
        // candidate's); any other as Characters, as ever (a mark may join a `/`).
        let cut: Range<Int>?? = path.utf8.withContiguousStorageIfAvailable { p -> Range<Int>? in
            guard Self.isASCII(p) else { return nil }
            var end = p.count
            while end > 0, p[end - 1] == UInt8(ascii: "/") { end -= 1 }
            if end == 0 { return 0..<p.count }
            var start = end
            while start > 0, p[start - 1] != UInt8(ascii: "/") { start -= 1 }
            return start..<end
        }
        if let r = cut ?? nil {
            let u = path.utf8
            return path[u.index(u.startIndex, offsetBy: r.lowerBound)..<u.index(u.startIndex, offsetBy: r.upperBound)]
        }
        return lastComponentByCharacters(path)
    }

    /// The definition: the last component of a split on `/` as Characters.
    static func lastComponentByCharacters(_ path: String) -> Substring {
        path.split(separator: "/", omittingEmptySubsequences: true).last ?? Substring(path)
    }

    /// `a/./b/../c` → `a/c`; nil when it climbs above the top.
    static func normalize(_ path: String) -> String? {
        // Most links are plain already: no `.` component, no empty one.
        let u = path.utf8
        if u.first != UInt8(ascii: "/"), u.last != UInt8(ascii: "/"), u.first != UInt8(ascii: "."),
           !Self.hasDotOrEmptyComponent(u) {
            return path
        }
        if let ascii = asciiNormalized(path) { return ascii }
        return normalizeByCharacters(path)
    }

    /// The definition: a split on `/` as Characters, `.` dropped, `..` taking the one before.
    static func normalizeByCharacters(_ path: String) -> String? {
        var out: [Substring] = []
        for c in path.split(separator: "/", omittingEmptySubsequences: true) {
            if c == "." { continue }
            if c == ".." { if out.isEmpty { return nil }; out.removeLast(); continue }
            out.append(c)
        }
        return out.joined(separator: "/")
    }

    /// `normalize` of an ASCII path, made from its bytes (a Markdown link's `../x.md` joined to
    /// its note's folder); nil when the path is not ASCII, `.some(nil)` when it climbs above the top.
    private static func asciiNormalized(_ path: String) -> String?? {
        let made = path.utf8.withContiguousStorageIfAvailable { p -> String?? in
            guard Self.isASCII(p) else { return nil }
            var parts: [Range<Int>] = []
            var i = 0
            while i < p.count {
                while i < p.count, p[i] == UInt8(ascii: "/") { i += 1 }
                guard i < p.count else { break }
                var j = i
                while j < p.count, p[j] != UInt8(ascii: "/") { j += 1 }
                if j - i == 1, p[i] == UInt8(ascii: ".") {
                } else if j - i == 2, p[i] == UInt8(ascii: "."), p[i + 1] == UInt8(ascii: ".") {
                    if parts.isEmpty { return .some(nil) }
                    parts.removeLast()
                } else {
                    parts.append(i..<j)
                }
                i = j
            }
            var out: [UInt8] = []
            out.reserveCapacity(p.count)
            for (k, r) in parts.enumerated() {
                if k > 0 { out.append(UInt8(ascii: "/")) }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: p[r]))
            }
            return .some(String(decoding: out, as: UTF8.self))
        }
        return made ?? nil
    }

    private static func isASCII(_ p: UnsafeBufferPointer<UInt8>) -> Bool { !p.contains { $0 >= 0x80 } }

    /// Whether a path has a component that starts with `.` after a `/`, or two `/` in a row.
    private static func hasDotOrEmptyComponent(_ u: String.UTF8View) -> Bool {
        var previous: UInt8 = 0
        for b in u {
            if previous == UInt8(ascii: "/"), b == UInt8(ascii: ".") || b == UInt8(ascii: "/") { return true }
            previous = b
        }
        return false
    }

    /// `s` without the spaces and tabs at either end (`CharacterSet.whitespaces`: tab and the
    /// Unicode space separators); `s` itself when it has none there.
    static func trimmedSpaces(_ s: String) -> String {
        func isSpace(_ c: Unicode.Scalar) -> Bool { c == "\t" || c.properties.generalCategory == .spaceSeparator }
        let scalars = s.unicodeScalars
        guard let first = scalars.first, let last = scalars.last, isSpace(first) || isSpace(last) else { return s }
        var a = scalars.startIndex, b = scalars.endIndex
        while a < b, isSpace(scalars[a]) { a = scalars.index(after: a) }
        while b > a, isSpace(scalars[scalars.index(before: b)]) { b = scalars.index(before: b) }
        return String(scalars[a..<b])
    }

    static func join(_ folder: String, _ name: String) -> String { folder.isEmpty ? name : folder + "/" + name }

    /// The folder a path is in ("" at the top): `join`'s inverse.
    static func parent(_ path: String) -> String { path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "" }
}

extension Catalog {
    /// The folder an item's `folder:` tags name (the first in order); "" for none.
    func folder(of r: Int64) -> String {
        guard let tags = tagsOf[r] else { return "" }
        var best: String?
        for t in tags where t.hasPrefix(VaultText.folderPrefix) && t.count > VaultText.folderPrefix.count {
            let f = String(t.dropFirst(VaultText.folderPrefix.count))
            if best == nil || f < best! { best = f }
        }
        return best.flatMap { VaultIndex.normalize($0) } ?? ""
    }

    /// An item's own name: what it is called before FS-7 disambiguation.
    func baseName(_ r: Int64) -> String? { items[r].map { Catalog.claim($0).baseName } }

    /// The vault-relative path of an active item, lower-cased.
    func vaultPath(_ r: Int64) -> String? { vault?.pathOf[r] }

    /// What `vaultPath` of an item in `folder` (nil: none, not active) is to be.
    func vaultPath(_ r: Int64, in folder: String?) -> String? {
        guard let f = folder, let n = baseName(r) else { return nil }
        return VaultIndex.join(f, n).lowercased()
    }

    /// Builds the index's tree and names from the catalog, without the notes' links
    /// (`loadLinks`, `resolveAllLinks`).
    mutating func buildVault() {
        var v = VaultIndex()
        var claims: [String: [NameClaim]] = [:]
        for (r, s) in items where s.state == .active {
            let f = folder(of: r)
            v.folderOf[r] = f
            v.pathOf[r] = vaultPath(r, in: f)
            let c = Catalog.claim(s)
            claims[f, default: []].append(c)
            v.byName[VaultIndex.nameKey(Substring(c.baseName)), default: []].insert(r)
        }
        for (f, c) in claims { v.trees[f] = NameTable(c) }
        vault = v
    }

    /// Takes every text item's links (the store's `links`, as they are now) into the index.
    mutating func loadLinks(_ links: [(Int64, String)]) {
        guard vault?.linksLoaded == false else { return }
        var v = vault!
        vault = nil
        for (r, text) in links where items[r] != nil {
            v.setLinks(r, VaultLinks.decode(text))
            for k in v.linkKeysOf[r] ?? [] { v.linkers[k, default: []].insert(r) }
        }
        v.linksLoaded = true
        vault = consume v
    }

    /// Resolves every note's links (the index built); returns how many it resolved.
    mutating func resolveAllLinks() -> Int {
        guard vault?.linksResolved == false else { return 0 }
        vault!.linksResolved = true
        var n = 0
        for r in Array(vault!.linksOf.keys) { _ = resolveLinks(of: r); n += vault!.linksOf[r]?.count ?? 0 }
        return n
    }

    /// The item a link in `source` names, by Obsidian's rules (man 7, "Links"): a Markdown link or
    /// a `./`, `../` path relative to the note's folder; a `/path` from the top; otherwise among the
    /// files whose path ends with the link (with or without `.md`, case-insensitively): the one at
    /// exactly that vault path, else one in the linking note's own folder, else the shortest path
    /// string (then alphabetically) — `getFirstLinkpathDest`'s order.
    func resolve(_ link: VaultLink, from source: Int64) -> Int64? {
        guard let v = vault else { return nil }
        let target = VaultIndex.trimmedSpaces(link.target)
        let folder = v.folderOf[source] ?? ""
        let explicit = target.hasPrefix("./") || target.hasPrefix("../")
        if target.hasPrefix("/") {
            return VaultIndex.normalize(String(target.dropFirst())).flatMap { exact($0) }
        }
        if link.markdown || explicit {
            if let p = VaultIndex.normalize(VaultIndex.join(folder, target)), let r = exact(p) { return r }
            if explicit { return nil }
        }
        guard let want = VaultIndex.normalize(target)?.lowercased(), !want.isEmpty else { return nil }
        let candidates = v.byName[VaultIndex.nameKey(VaultIndex.lastComponent(want))] ?? []
        var exactHit: (path: String, r: Int64)?
        var besideHit: (length: Int, path: String, r: Int64)?
        var shortest: (length: Int, path: String, r: Int64)?
        let underWant = "/" + want
        for c in candidates {
            guard let p = vaultPath(c) else { continue }
            let bare = p.hasSuffix(".md") ? p.dropLast(3) : Substring(p)
            guard p == want || bare == want || p.hasSuffix(underWant) || bare.hasSuffix(underWant) else { continue }
            if p == want || bare == want {
                if exactHit == nil || p < exactHit!.path { exactHit = (p, c) }
                continue
            }
            let hit = (length: p.count, path: p, r: c)
            if v.folderOf[c] == folder, besideHit == nil || (hit.length, hit.path) < (besideHit!.length, besideHit!.path) { besideHit = hit }
            if shortest == nil || (hit.length, hit.path) < (shortest!.length, shortest!.path) { shortest = hit }
        }
        return exactHit?.r ?? besideHit?.r ?? shortest?.r
    }

    /// The active item at exactly this vault path (with or without `.md`).
    func exact(_ path: String) -> Int64? {
        guard let v = vault else { return nil }
        let want = path.lowercased()
        for c in v.byName[VaultIndex.nameKey(VaultIndex.lastComponent(want))] ?? [] {
            guard let p = vaultPath(c) else { continue }
            if p == want || p == want + ".md" { return c }
        }
        return nil
    }

    /// Resolves the links of `source` again and makes its derived edges match; returns the edges
    /// added and removed (for invalidations: a removed edge is still in `edges` until the caller
    /// drops it with `removeEdge`).
    /// `keys`: only the links whose last component has one of these name keys may resolve
    /// differently (items of those names came, went or moved); the others keep what they
    /// resolved to. nil: all of them (the source's own links or folder changed).
    mutating func resolveLinks(of source: Int64, only keys: Set<String>? = nil) -> (added: [EdgeRecord], removed: [EdgeRecord]) {
        // No copy of the index is held here: it is changed in place below, and a second reference
        // would make each change copy a whole table (copy on write), at every rename.
        guard vault?.linksResolved == true, let links = vault.map({ $0.linksOf[source] ?? [] }) else { return ([], []) }
        var want: [VaultIndex.Derived: Int64] = [:]
        var missing: [String] = []
        // An edge made by hand between the same items, of the same type, shows instead.
        var real = Set<VaultIndex.Derived>()
        for e in outEdges[source] ?? [] where !Self.isDerived(e) {
            if let rec = edges[e], let t = byID[rec.edge.targetID] { real.insert(VaultIndex.Derived(target: t, edgeType: rec.edge.edgeType)) }
        }
        if items[source]?.state == .active {
            var targets: [Int64?]
            if let keys, let known = vault!.targetsOf[source], known.count == links.count,
               let linkKeys = vault!.linkKeysOf[source], linkKeys.count == links.count {
                targets = known
                var moved = false
                for (i, link) in links.enumerated() where keys.contains(linkKeys[i]) {
                    targets[i] = resolve(link, from: source)
                    if targets[i] != known[i] { moved = true }
                }
                // Every link still goes where it went (a new file of the same name farther away, as
                // a copy of a folder makes for each of its notes): its edges stand as they are.
                if !moved { return ([], []) }
            } else {
                targets = links.map { resolve($0, from: source) }
            }
            vault!.targetsOf[source] = targets.isEmpty ? nil : targets
            for (link, target) in zip(links, targets) {
                guard let t = target else { missing.append(link.target); continue }
                let d = VaultIndex.Derived(target: t, edgeType: link.edgeType)
                if want[d] != nil || real.contains(d) { continue }
                let key = VaultIndex.DerivedKey(source: source, target: t, edgeType: link.edgeType)
                if let id = vault!.derivedRowids[key] { want[d] = id } else {
                    let id = vault!.nextRowid
                    want[d] = id; vault!.derivedRowids[key] = id; vault!.nextRowid -= 1
                }
            }
        } else {
            vault!.targetsOf[source] = nil
        }
        // Changed in place: a copy of the index would copy every table (copy on write).
        vault!.unresolved[source] = missing.isEmpty ? nil : missing
        let had = vault!.derivedOut[source] ?? [:]
        vault!.derivedOut[source] = want.isEmpty ? nil : want
        var added: [EdgeRecord] = [], removed: [EdgeRecord] = []
        for (d, id) in had where want[d] == nil { if let rec = edges[id] { removed.append(rec) } }
        guard let s = items[source] else { return (added, removed) }
        for (d, id) in want where had[d] == nil {
            guard let t = items[d.target] else { continue }
            let edge = Edge(id: "text:\(-id)", sourceID: s.id, targetID: t.id, edgeType: d.edgeType, createdAt: s.createdAt, updatedAt: s.createdAt)
            let rec = EdgeRecord(rowid: id, edge: edge)
            addEdge(rec)
            added.append(rec)
        }
        return (added, removed)
    }

    /// Whether an edge is derived from a note's text (it cannot be removed but by editing the text).
    static func isDerived(_ edgeRowid: Int64) -> Bool { edgeRowid < 0 }

    /// The sub-folders of a folder: from the `folder:` tags in use and those made with `mkdir`.
    mutating func subfolders(_ folder: String) -> Set<String> {
        let prefix = VaultText.folderPrefix
        if folder.isEmpty {
            return Set(tagChildren("").compactMap { $0.hasPrefix(prefix) && $0.count > prefix.count ? String($0.dropFirst(prefix.count)) : nil })
        }
        return tagChildren(prefix + folder)
    }

    /// Every level of tag paths (`tagChildren` for all of them at once), built if it is not.
    mutating func currentTagTree() -> [String: Set<String>] {
        _ = tagChildren("")
        return tagTree ?? [:]
    }

    /// The next level of tag paths under `path` ("" for the top): `tags/a/` holds `b` when the tag
    /// `a/b` (or `a/b/…`) is in use or made locally (FS-26: nested tags are nested directories).
    mutating func tagChildren(_ path: String) -> Set<String> {
        if tagTree == nil {
            var tree: [String: Set<String>] = [:]
            for tag in allTags() {
                let comps = tag.split(separator: "/", omittingEmptySubsequences: false)
                guard !comps.contains(where: \.isEmpty) else { continue }
                var parent = ""
                for c in comps {
                    tree[parent, default: []].insert(String(c))
                    parent = parent.isEmpty ? String(c) : parent + "/" + c
                }
            }
            tagTree = tree
        }
        return tagTree?[path] ?? []
    }
}

extension FileSystem {
    /// Keeps the vault's index true after item `r` changed (`refreshItem`): its place in the
    /// tree, its name among the names links look for, its own links, and the links of every note
    /// that names it, before or after. `folder`, `key`: where it was and what it was called.
    /// `linksKept`: its bytes did not change, so neither did its links (none are read).
    /// Returns what the kernel must forget. Call with the lock held.
    func refreshVault(_ r: Int64, folder old: String?, key oldKey: String?, removed: Bool, facts: Store.ItemFacts? = nil,
                      linksKept: Bool = false) throws -> [Invalidation] {
        // Taken out while it changes, so its tables are changed in place, not copied.
        guard var v = catalog.vault else { return [] }
        catalog.vault = nil
        var dirs: [Node: Set<String>] = [:]
        let s = catalog.items[r]
        let active = s?.state == .active
        let newFolder = active ? catalog.folder(of: r) : nil
        let newKey = active ? catalog.baseName(r).map { VaultIndex.nameKey(Substring($0)) } : nil
        if let old, old != newFolder, let changed = v.trees[old]?.remove(r) { dirs[.treeDir(old), default: []].formUnion(changed) }
        if let f = newFolder, let s {
            let table = v.trees[f] ?? { let t = NameTable(); v.trees[f] = t; return t }()
            dirs[.treeDir(f), default: []].formUnion(table.upsert(Catalog.claim(s)))
        }
        v.folderOf[r] = newFolder
        v.pathOf[r] = catalog.vaultPath(r, in: newFolder)
        if oldKey != newKey || old != newFolder {
            if let k = oldKey { v.byName[k]?.remove(r) }
            if let k = newKey { v.byName[k, default: []].insert(r) }
        }
        // Its own links, as the store now has them (none kept before they are first loaded).
        let before = v.linksOf[r] ?? []
        var after: [VaultLink] = linksKept ? before : []
        do {
            // A file made through the mount that has no row yet has no links read either.
            if !linksKept, v.linksLoaded, !removed, let s, !TypeSchema.isBlobType(s.type), !store.isNewlyStaged(StagedKey(.item, r)) {
                after = try (facts.flatMap { $0.linksStale ? nil : .some($0.links) } ?? wrap { try store.links(rowid: r) }).map(VaultLinks.decode) ?? []
            }
        } catch { catalog.vault = v; throw error }
        if before != after {
            for k in v.linkKeysOf[r] ?? [] { v.linkers[k]?.remove(r) }
            v.setLinks(r, after)
            for k in v.linkKeysOf[r] ?? [] { v.linkers[k, default: []].insert(r) }
        }
        // Its own links are resolved again now. The links naming its old and new name may resolve
        // differently too: in the notes that have them, later, every such name at once
        // (`resolvePendingLinks`), not in the request that made the name (each new file of `cp -r`
        // re-resolved every note naming it). Links never resolved yet are resolved all at once
        // later, as they are then (`ensureLinks`).
        let resolved = v.linksResolved
        if resolved, oldKey != newKey || old != newFolder {
            v.pendingKeys.formUnion([oldKey, newKey].compactMap { $0 })
            settler.wake()
        }
        // Handed back, not copied: `v` must not outlive this line, or each change `resolveLinks`
        // makes below would copy a whole table of the index (copy on write).
        catalog.vault = consume v
        var inv = invalidations(dirs)
        guard resolved else { return inv }
        let (added, gone) = catalog.resolveLinks(of: r)
        for rec in gone { inv += edgeInvalidations(rec); noteEdge(rec, added: false); catalog.removeEdge(rec.rowid) }
        for rec in added { inv += edgeInvalidations(rec); noteEdge(rec, added: true) }
        return inv
    }

    /// Re-resolves, in the notes that have them, the links naming the names that came, went or
    /// moved since the last call (`VaultIndex.pendingKeys`); returns what the kernel must forget.
    /// Called by the settler's passes (`settled`), by whatever shows edges before it does so
    /// (`ensureLinks`), and as the store's changes are followed (their edges' watchers hear of
    /// them). Call with the lock held.
    func resolvePendingLinks() -> [Invalidation] {
        guard catalog.vault?.linksResolved == true, let keys = catalog.vault?.pendingKeys, !keys.isEmpty else { return [] }
        catalog.vault!.pendingKeys = []
        var sources = Set<Int64>()
        for k in keys { sources.formUnion(catalog.vault!.linkers[k] ?? []) }
        var inv: [Invalidation] = []
        for src in sources.sorted() {
            let (added, gone) = catalog.resolveLinks(of: src, only: keys)
            for rec in gone { inv += edgeInvalidations(rec); noteEdge(rec, added: false); catalog.removeEdge(rec.rowid) }
            for rec in added { inv += edgeInvalidations(rec); noteEdge(rec, added: true) }
        }
        return inv
    }

    /// The links of `source` resolved again after an edge of its own came or went (a derived edge
    /// gives way to a hand-made one of the same type, and comes back when it goes).
    func reresolve(_ source: Int64?) -> [Invalidation] {
        guard let source, catalog.vault != nil else { return [] }
        let (added, gone) = catalog.resolveLinks(of: source)
        var inv: [Invalidation] = []
        for rec in gone { inv += edgeInvalidations(rec); noteEdge(rec, added: false); catalog.removeEdge(rec.rowid) }
        for rec in added { inv += edgeInvalidations(rec); noteEdge(rec, added: true) }
        return inv
    }

    /// `.marfafs/unresolved`: one line per link that names no item: the note's path in the vault,
    /// a tab, the link as written.
    func unresolvedText() -> String {
        guard (try? ensureLinks()) != nil, let v = catalog.vault else { return "" }
        var lines: [String] = []
        for (src, targets) in v.unresolved {
            guard let f = v.folderOf[src], let name = v.trees[f]?.nameOf[src] else { continue }
            for t in targets { lines.append(VaultIndex.join(f, name) + "\t" + t) }
        }
        return lines.sorted().map { $0 + "\n" }.joined()
    }
}
