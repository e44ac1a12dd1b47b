import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

extension FileSystem {
    static let rootEntries: [(String, Node)] = [
        ("archive", .viewRoot(.archive)), ("backlinks", .backlinksRoot), ("by-id", .byIDRoot),
        ("history", .historyLink), ("links", .linksRoot), ("tags", .tagsRoot), ("trash", .viewRoot(.trash)),
        ("types", .viewRoot(.types)), ("vault", .vaultLink),
    ]
    /// Where the vault's tree is (FS-27): reachable by name and through the `vault` symlink, never
    /// listed, so `grep -r` and `find` over the mount see each file once (FS-1).
    static let treeName = "vault"
    static let vaultLinkTarget = ".marfafs/vault"

    /// A tag with no nesting as an older name may spell it (`folder:a∕b` for `folder:a/b`).
    static func tag(fromName name: String) -> String { Names.unescape(name) }

    /// A tag path one level down: `a` + `b` → `a/b`.
    static func tagPath(_ parent: String, _ name: String) -> String { parent.isEmpty ? name : parent + "/" + name }

    /// Where a tag's directory shows: its parent (`tags/` or the level above) and its last name.
    static func tagDirPlace(_ tag: String) -> (Node, String) {
        guard let slash = tag.lastIndex(of: "/"), !tag.hasSuffix("/") else { return (.tagsRoot, tag) }
        return (.tagDir(String(tag[..<slash])), String(tag[tag.index(after: slash)...]))
    }

    /// The directories a tag's directory and its parents show in, for invalidations.
    static func tagDirPlaces(_ tag: String) -> [(Node, String)] {
        var out: [(Node, String)] = []
        var t = tag
        while true {
            let (parent, name) = tagDirPlace(t)
            out.append((parent, name))
            guard case .tagDir(let up) = parent else { break }
            t = up
        }
        if tag.hasPrefix(VaultText.folderPrefix) {
            // A folder of the tree too.
            let f = String(tag.dropFirst(VaultText.folderPrefix.count))
            var path = ""
            for c in f.split(separator: "/") {
                out.append((.treeDir(path), String(c)))
                path = VaultIndex.join(path, String(c))
            }
        }
        return out
    }

    /// Builds the vault's index if it is not built yet, its links not resolved (`ensureLinks`); it is
    /// then kept current in place.
    func ensureVault() throws {
        if catalog.vault != nil { return }
        let start = Date()
        catalog.buildVault()
        log.info("vault tree built", metadata: ["items": "\(catalog.vault?.folderOf.count ?? 0)", "ms": "\(Int(Date().timeIntervalSince(start) * 1000))"])
    }

    /// The index with every link resolved (`links/`, `backlinks/`, `.marfafs/unresolved`): the
    /// first call resolves them all, as the notes are then.
    func ensureLinks() throws {
        if catalog.vault?.linksResolved == true {
            // Names that came since the settler's last pass: the links naming them, as they are now.
            if catalog.vault?.pendingKeys.isEmpty == false { notify(resolvePendingLinks()) }
            return
        }
        let start = Date()
        try ensureVault()
        if catalog.vault?.linksLoaded == false {
            let links = try wrap { try store.allLinks() }
            catalog.loadLinks(links)
        }
        let read = Date()
        let n = catalog.resolveAllLinks()
        log.info("vault index built", metadata: ["links": "\(n)", "ms": "\(Int(Date().timeIntervalSince(start) * 1000))",
                                                 "read_ms": "\(Int(read.timeIntervalSince(start) * 1000))"])
    }

    /// The names of a folder of the vault's tree (nil: it holds no item).
    func treeTable(_ folder: String) throws -> NameTable? {
        try ensureVault()
        return catalog.vault?.trees[folder]
    }

    /// A listing of a directory that holds sub-directories and entries (`tags/<tag>/`, a folder of
    /// the tree): a sub-directory keeps its name, and an entry of the same name (a file beside a
    /// folder of its name made on another device) shows under its `shadowName`, so it is still
    /// listed, read and copied (`rsync`, `git`, `marfafs export`).
    func dirsThenEntries(_ subs: Set<String>, _ dir: (String) -> Node, _ table: NameTable?, _ entry: (Int64) -> Node) -> [(String, Node)] {
        var out = subs.map { ($0, dir($0)) }
        if let table {
            for n in table.sorted() {
                let k = table.keyOf[n]!
                out.append((subs.contains(n) ? shadowName(n, k) : n, entry(k)))
            }
        }
        return out.sorted { $0.0 < $1.0 }
    }

    /// The name an entry shows under while a sub-directory beside it has its own: FS-7's suffix
    /// (`plan [0a1b2c3d].md`).
    func shadowName(_ name: String, _ r: Int64) -> String {
        let (stem, ext) = Names.split(name)
        return Names.compose(stem: stem, suffix: Names.collisionSuffix(id: catalog.items[r]?.id ?? String(r)), ext: ext)
    }

    /// Where the directories of a tag (and of a folder tag's folders) show an entry of their own
    /// name under its `shadowName`: the kernel forgets those names too when the directory comes
    /// or goes (the entry's own name then names it again).
    func shadowPlaces(_ tag: String) -> [(Node, String)] {
        Self.tagDirPlaces(tag).compactMap { d, n in
            let table: NameTable?
            switch d {
            case .treeDir(let f): table = catalog.vault?.trees[f]
            case .tagDir(let t): table = catalog.tagTables[t]
            default: table = nil
            }
            return table?.keyOf[n].map { (d, shadowName(n, $0)) }
        }
    }

    /// Whether `name` holds " [", as a collision suffix and a `shadowName` do (read as bytes:
    /// asked at each lookup of a missing name).
    static func hasCollisionMark(_ name: String) -> Bool {
        var space = false
        for b in name.utf8 {
            if space && b == UInt8(ascii: "[") { return true }
            space = b == UInt8(ascii: " ")
        }
        return false
    }

    /// The entry a `shadowName` names in a directory (nil: none).
    func shadowed(_ name: String, _ subs: Set<String>, _ table: NameTable?) -> Int64? {
        guard let table, Self.hasCollisionMark(name) else { return nil }
        for n in subs { if let k = table.keyOf[n], shadowName(n, k) == name { return k } }
        return nil
    }

    /// Directories that hold scratch files and parked names (FS-13, FS-14), by a stable key.
    func dirKey(_ n: Node) -> String? {
        switch n {
        case .typeDir(.types, let t): return "types/" + t
        case .tagDir(let tag): return "tags/" + tag
        case .treeDir(let f): return "vault/" + f
        default: return nil
        }
    }

    func childNode(_ p: Node, _ name: String) throws -> Node? {
        // links/ and backlinks/ show the edges the notes' text makes: the links are resolved first.
        if Self.showsEdges(p) { try ensureLinks() }
        if let key = dirKey(p) {
            if let parked = catalog.parked[key]?[name] { return .item(parked.item) }
            if let s = catalog.scratchByDir[key]?[name] { return .scratch(s) }
            if catalog.parked[key]?.isEmpty == false, catalog.hiddenNames(key).contains(name) { return nil }
        }
        switch p {
        case .root:
            if name == ".marfafs" { return .control }
            return Self.rootEntries.first { $0.0 == name }?.1
        case .control:
            if name == Self.treeName { return .treeDir("") }
            if name == Self.historyName { return .historyRoot }
            if name == Self.previewsName { return .previewDir("") }
            return ControlFile(rawValue: name).map { .controlFile($0.rawValue) }
        case .treeDir(let f):
            let subs = catalog.subfolders(f)
            if subs.contains(name) { return .treeDir(VaultIndex.join(f, name)) }
            let table = try treeTable(f)
            return (table?.keyOf[name] ?? shadowed(name, subs, table)).map { .item($0) }
        case .viewRoot(let v):
            return typeListed(name) ? .typeDir(v, name) : nil
        case .typeDir(let v, let t):
            return catalog.typeTable(v, t)?.keyOf[name].map { .item($0) }
        case .tagsRoot:
            if catalog.tagChildren("").contains(name) { return .tagDir(name) }
            let tag = Self.tag(fromName: name)
            return catalog.allTags().contains(tag) ? .tagDir(tag) : nil
        case .tagDir(let tag):
            let subs = catalog.tagChildren(tag)
            if subs.contains(name) { return .tagDir(Self.tagPath(tag, name)) }
            let table = catalog.tagTable(tag)
            return (table.keyOf[name] ?? shadowed(name, subs, table)).map { .tagEntry(tag, $0) }
        case .linksRoot, .backlinksRoot:
            let d = LinkDirection(root: p)
            return typeListed(name) ? .linkTypeDir(d, name) : nil
        case .linkTypeDir(let d, let t):
            // Every active item has a links directory (so `mkdir -p links/T/N/E` works); listings show
            // only the items that have edges.
            return catalog.typeTable(.types, t)?.keyOf[name].map { .linkItemDir(d, $0) }
        case .linkItemDir(let d, let r):
            return catalog.edgeTypes(d, item: r).contains(name) ? .linkEdgeDir(d, r, name) : nil
        case .linkEdgeDir(let d, let r, let et):
            return catalog.edgeTable(d, item: r, edgeType: et).keyOf[name].map { .linkEntry(d, $0) }
        case .byIDRoot:
            return catalog.byID[name].map { .byIDEntry($0) }
        case .historyRoot, .historyType, .historyItem:
            return try historyChild(p, name)
        case .previewDir(let f):
            return try previewChild(f, name)
        default:
            throw FSError(.notDirectory, name)
        }
    }

    func children(_ n: Node) throws -> [(String, Node)] {
        let listed = try listedChildren(n)
        guard let key = dirKey(n), catalog.parked[key]?.isEmpty == false || catalog.scratchByDir[key]?.isEmpty == false else { return listed }
        let hidden = catalog.hiddenNames(key)
        var out = listed.filter { !hidden.contains($0.0) }
        for (name, p) in catalog.parked[key] ?? [:] { out.append((name, .item(p.item))) }
        for (name, s) in catalog.scratchByDir[key] ?? [:] { out.append((name, .scratch(s))) }
        return out.sorted { $0.0 < $1.0 }
    }

    static func showsEdges(_ n: Node) -> Bool {
        switch n {
        case .linksRoot, .backlinksRoot, .linkTypeDir, .linkItemDir, .linkEdgeDir: return true
        default: return false
        }
    }

    /// The directories a directory holds, for its link count (`..` of each, as a disk counts
    /// them: `find` and pjdfstest read it). The views whose count would take a walk of every item
    /// (`links/`, `backlinks/`, `history/`) say 0: a link count of 2.
    /// Call with the lock held.
    func subdirectoryCount(_ n: Node) -> UInt32 {
        switch n {
        // `.marfafs` is one too, reachable though never listed.
        case .root: return UInt32(Self.rootEntries.count { $0.1.kind == .directory } + 1)
        case .viewRoot(let v): return UInt32(catalog.typesIn(v).count)
        case .tagsRoot: return UInt32(catalog.tagChildren("").count)
        case .tagDir(let tag): return UInt32(catalog.tagChildren(tag).count)
        case .treeDir(let f):
            let folders = catalog.subfolders(f)
            // Local-only folders (`.git`) are folders of the tree too; the local side also holds a
            // folder for each tree folder with a local entry deeper down.
            return UInt32(folders.count + local.subdirectories(f).count { !folders.contains($0) })
        default: return 0
        }
    }

    func listedChildren(_ n: Node) throws -> [(String, Node)] {
        if Self.showsEdges(n) { try ensureLinks() }
        switch n {
        case .root: return Self.rootEntries
        case .control: return []   // §7: reachable by name, never listed
        case .viewRoot(let v): return catalog.typesIn(v).sorted().map { ($0, .typeDir(v, $0)) }
        case .typeDir(let v, let t):
            guard let table = catalog.typeTable(v, t) else { return [] }
            return table.sorted().map { ($0, .item(table.keyOf[$0]!)) }
        case .tagsRoot:
            return catalog.tagChildren("").sorted().map { ($0, Node.tagDir($0)) }
        case .tagDir(let tag):
            return dirsThenEntries(catalog.tagChildren(tag), { .tagDir(Self.tagPath(tag, $0)) }, catalog.tagTable(tag), { .tagEntry(tag, $0) })
        case .treeDir(let f):
            return dirsThenEntries(catalog.subfolders(f), { .treeDir(VaultIndex.join(f, $0)) }, try treeTable(f), { .item($0) })
        case .linksRoot, .backlinksRoot:
            let d = LinkDirection(root: n)
            var types = Set<String>()
            for (r, s) in catalog.items where s.state == .active && catalog.hasEdges(d, item: r) { types.insert(s.type) }
            return types.sorted().map { ($0, .linkTypeDir(d, $0)) }
        case .linkTypeDir(let d, let t):
            guard let table = catalog.typeTable(.types, t) else { return [] }
            return table.sorted().compactMap { name in
                let r = table.keyOf[name]!
                return catalog.hasEdges(d, item: r) ? (name, .linkItemDir(d, r)) : nil
            }
        case .linkItemDir(let d, let r):
            return catalog.edgeTypes(d, item: r).sorted().map { ($0, .linkEdgeDir(d, r, $0)) }
        case .linkEdgeDir(let d, let r, let et):
            let table = catalog.edgeTable(d, item: r, edgeType: et)
            return table.sorted().map { ($0, .linkEntry(d, table.keyOf[$0]!)) }
        case .byIDRoot:
            return catalog.byID.keys.sorted().map { ($0, .byIDEntry(catalog.byID[$0]!)) }
        case .historyRoot, .historyType, .historyItem:
            return try historyChildren(n)
        case .previewDir(let f):
            return try previewChildren(f)
        default:
            throw FSError(.notDirectory, "not a directory")
        }
    }

    /// The canonical path of an item relative to the mount root (FS-1).
    func canonicalPath(_ r: Int64) throws -> String {
        guard let s = catalog.items[r], let name = catalog.name(of: r) else { throw FSError(.notFound, "item \(r)") }
        return "\(StateView.of(s.state).rawValue)/\(s.type)/\(name)"
    }

    /// Relative symlink targets, so links keep working when the mount point moves (FS-1).
    func readlinkLocked(_ n: Node) throws -> String {
        switch n {
        case .tagEntry(let tag, let r):
            let depth = tag.split(separator: "/", omittingEmptySubsequences: false).count
            return String(repeating: "../", count: depth + 1) + (try canonicalPath(r))
        case .vaultLink: return Self.vaultLinkTarget
        case .historyLink: return Self.historyLinkTarget
        case .byIDEntry(let r): return "../" + (try canonicalPath(r))
        case .linkEntry(let d, let e):
            guard let rec = catalog.edges[e], let far = catalog.byID[d.far(of: rec.edge)] else {
                throw FSError(.notFound, "edge \(e)")
            }
            return "../../../../" + (try canonicalPath(far))
        case .scratch(let id):
            guard let target = catalog.scratch[id]?.link else { throw FSError(.invalid, "not a symlink") }
            return target
        default: throw FSError(.invalid, "not a symlink")
        }
    }

    /// The directory that lists a node and the name it has there, for invalidations.
    func parentAndName(_ n: Node) -> (Node, String)? {
        switch n {
        case .item(let r):
            guard let s = catalog.items[r], let name = catalog.name(of: r) else { return nil }
            return (.typeDir(StateView.of(s.state), s.type), name)
        default: return nil
        }
    }
}
