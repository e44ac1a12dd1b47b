import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

/// The in-memory index the hot path answers from: item summaries, tags, edges, and one name
/// table per `types|archive|trash/<type>` directory and per tag directory in use.
struct Catalog {
    var items: [Int64: ItemSummary] = [:]
    var byID: [String: Int64] = [:]
    var typeTables: [StateView: [String: NameTable]] = [:]
    var tagsOf = TagIndex()
    var tagMembers: [String: Set<Int64>] = [:]
    /// Tag → how many active items have it. A tag is in use (a directory in `tags/`, a folder of
    /// the tree) while an active item has it: trashed and archived items keep their tags, so a
    /// restore puts them back where they were, but an emptied folder is empty (FS-31).
    var tagActive: [String: Int] = [:]
    var tagTables: [String: NameTable] = [:]
    var localTags: Set<String> = [] {
        didSet { if tagTree != nil { for t in localTags.symmetricDifference(oldValue) { tagCameOrWent(t) } } }
    }
    /// Tag path → the next level of nested tags (`tagChildren`), kept as tags come and go; nil
    /// until first asked for.
    var tagTree: [String: Set<String>]?
    /// The vault's tree and links (FS-26, FS-27), built on first use.
    var vault: VaultIndex?
    var edges: [Int64: EdgeRecord] = [:]
    var outEdges: [Int64: Set<Int64>] = [:]
    var inEdges: [Int64: Set<Int64>] = [:]
    var edgeDirs: [Int64: Set<String>] = [:]
    var registeredTypes: Set<String> = []
    /// Items absorbed by an editor's save (FS-13) → the item that took their bytes. The kernel may
    /// still hold the absorbed inode under the target's name until it re-looks it up.
    var aliases: [Int64: Int64] = [:]
    /// Items whose file was replaced under its name: the number their inode comes from (FS-31).
    var itemNumber: [Int64: Int64] = [:]
    /// Files replaced under their name while the kernel held them, by inode (FS-31).
    var detached: [UInt64: DetachedFile] = [:]
    /// Scratch files (FS-14), and their names per directory key (`types/core.note`, `tags/x`).
    var scratch: [Int64: ScratchFile] = [:]
    var scratchByDir: [String: [String: Int64]] = [:]
    /// Items renamed to a backup name (`note.md` → `note.md~`), per directory key and backup name.
    var parked: [String: [String: Parked]] = [:]
    /// Scratch files an editor renamed over an item, or that became an item → that item.
    var scratchAliases: [Int64: Int64] = [:]
    /// Items made through this mount (FS-28: a copy in progress takes the original's attributes).
    var createdHere: Set<Int64> = []
    /// Those of them given an item's `user.marfa.id` (`cp -a`, `rsync -aX`, `tar --xattrs`
    /// copying a file with its attributes, or restoring it), and when: the folder the original's
    /// tags name is not theirs (`FileSystem.isCopyWithAttributes`).
    var copies: [Int64: Date] = [:]
    /// Times set on directories, by directory key.
    var dirTimes: [String: Int64] = [:]
    /// Directories whose time moved with their names and is not yet in the store.
    var dirtyDirTimes: Set<String> = []
    /// Permission bits of files made through the mount that have no row yet (FS-31).
    var stagedModes: [Int64: UInt16] = [:]
    /// Permission bits set on scratch files (FS-14), in memory: the item a scratch file becomes
    /// when renamed to an item's name takes them (`rsync`'s `chmod` of its temporary file).
    var scratchModes: [Int64: UInt16] = [:]
    /// Extended attributes set on scratch files (FS-14, FS-17), in memory, in the order written:
    /// the item a scratch file becomes takes them (`rsync -X`'s temporary file).
    var scratchXattrs: [Int64: [(name: String, value: [UInt8])]] = [:]
    /// Permission bits set on folders of the vault's tree (FS-31).
    var dirModes: [String: UInt16] = [:]
    /// Owners other than the mount's user (FS-31): of items, by rowid, and of the tree's folders.
    var owners: [Int64: Store.Owner] = [:]
    var dirOwners: [String: Store.Owner] = [:]
    /// Access and change times by inode, while mounted (FS-31).
    var atimes: [UInt64: Int64] = [:]
    var ctimes: [UInt64: Int64] = [:]
    /// Items just moved to the trash by `unlink`, per directory key and name: a create of the same
    /// name right after brings the item back (`FileSystem.reattachWindow`).
    var unlinked: [String: [String: (item: Int64, at: Date)]] = [:]

    struct Parked {
        var item: Int64
        var originalName: String
    }

    init(store: Store) throws {
        var claims: [StateView: [String: [NameClaim]]] = [:]
        try store.scanCatalog(count: { n in
            items.reserveCapacity(n)
            byID.reserveCapacity(n)
        }, items: { s in
            items[s.rowid] = s
            byID[s.id] = s.rowid
            claims[StateView.of(s.state), default: [:]][s.type, default: []].append(Self.claim(s))
        }, tags: { itemID, tag in
            guard let r = byID[itemID] else { return }
            tagsOf.add(tag, to: r)
            tagMembers[tag, default: []].insert(r)
            if items[r]?.state == .active { tagActive[tag, default: 0] += 1 }
        })
        for (v, byType) in claims { for (t, c) in byType { typeTables[v, default: [:]][t] = NameTable(c) } }
        localTags = Set(try store.localTags())
        for e in try store.allEdges() { addEdge(e) }
        for (itemID, et) in try store.edgeDirs() { if let r = byID[itemID] { edgeDirs[r, default: []].insert(et) } }
        registeredTypes = Set(store.allTypes().map(\.id))
        for s in try store.allScratch() { addScratch(s) }
        dirTimes = try store.dirTimes()
        dirModes = try store.treeDirModes()
        owners = try store.itemOwners()
        dirOwners = try store.treeDirOwners()
        for (number, r) in try store.itemNumbers() where items[r] != nil {
            aliases[number] = r
            itemNumber[r] = number
        }
    }

    mutating func setItem(_ s: ItemSummary) {
        items[s.rowid] = s
        byID[s.id] = s.rowid
    }

    mutating func addScratch(_ s: ScratchFile) {
        if let old = scratch[s.rowid] { scratchByDir[old.dir]?.removeValue(forKey: old.name) }
        if let other = scratchByDir[s.dir]?[s.name], other != s.rowid { scratch.removeValue(forKey: other) }
        scratch[s.rowid] = s
        scratchByDir[s.dir, default: [:]][s.name] = s.rowid
    }

    mutating func removeScratch(_ rowid: Int64) {
        scratchModes.removeValue(forKey: rowid)
        scratchXattrs.removeValue(forKey: rowid)
        guard let s = scratch.removeValue(forKey: rowid) else { return }
        scratchByDir[s.dir]?.removeValue(forKey: s.name)
    }

    /// The original names of parked items in a directory: hidden until re-attached.
    func hiddenNames(_ key: String) -> Set<String> {
        Set((parked[key] ?? [:]).values.map(\.originalName))
    }

    static func claim(_ s: ItemSummary, key: Int64? = nil) -> NameClaim {
        NameClaim(key: key ?? s.rowid, stem: s.stem, ext: s.ext, createdAt: s.createdAt, id: s.id)
    }

    mutating func addEdge(_ e: EdgeRecord) {
        guard let s = byID[e.edge.sourceID], let t = byID[e.edge.targetID] else { edges[e.rowid] = e; return }
        edges[e.rowid] = e
        outEdges[s, default: []].insert(e.rowid)
        inEdges[t, default: []].insert(e.rowid)
    }

    mutating func removeEdge(_ rowid: Int64) {
        guard let e = edges.removeValue(forKey: rowid) else { return }
        if let s = byID[e.edge.sourceID] { outEdges[s]?.remove(rowid) }
        if let t = byID[e.edge.targetID] { inEdges[t]?.remove(rowid) }
    }

    func typeTable(_ v: StateView, _ t: String) -> NameTable? { typeTables[v]?[t] }

    /// The name an item shows in its own state view.
    func name(of r: Int64) -> String? {
        guard let s = items[r] else { return nil }
        return typeTables[StateView.of(s.state)]?[s.type]?.nameOf[r]
    }

    /// Tag directories list active items only; archived and trashed items keep their tags.
    mutating func tagTable(_ tag: String) -> NameTable {
        if let t = tagTables[tag] { return t }
        let members = (tagMembers[tag] ?? []).compactMap { items[$0] }.filter { $0.state == .active }
        let t = NameTable(members.map { Self.claim($0) })
        tagTables[tag] = t
        return t
    }

    /// Names in a `links|backlinks/.../<edge_type>` directory: the far item of each edge (FS-7 applies).
    /// The edges that leave item `r` (`links/`) or reach it (`backlinks/`).
    func edgeIDs(_ d: LinkDirection, item r: Int64) -> Set<Int64> {
        (d == .backlinks ? inEdges[r] : outEdges[r]) ?? []
    }

    func edgeTable(_ d: LinkDirection, item r: Int64, edgeType: String) -> NameTable {
        var claims: [NameClaim] = []
        for e in edgeIDs(d, item: r) {
            guard let rec = edges[e], rec.edge.edgeType == edgeType else { continue }
            guard let far = byID[d.far(of: rec.edge)], let s = items[far] else { continue }
            claims.append(Self.claim(s, key: e))
        }
        return NameTable(claims)
    }

    func edgeTypes(_ d: LinkDirection, item r: Int64) -> Set<String> {
        var out = Set(edgeIDs(d, item: r).compactMap { edges[$0]?.edge.edgeType })
        if d == .links { out.formUnion(edgeDirs[r] ?? []) }
        return out
    }

    func hasEdges(_ d: LinkDirection, item r: Int64) -> Bool {
        if !edgeIDs(d, item: r).isEmpty { return true }
        return d == .links && !(edgeDirs[r] ?? []).isEmpty
    }

    /// Keeps `tagTree` true after `tag` came into use or went out of it: a new tag adds its path,
    /// a gone one takes away the levels that then name nothing. (Rebuilding the tree from every
    /// tag made each `mkdir` and `rmdir` in a large vault cost as much as listing all folders.)
    mutating func tagCameOrWent(_ tag: String) {
        guard tagTree != nil else { return }
        let comps = tag.split(separator: "/", omittingEmptySubsequences: false)
        guard !comps.isEmpty, !comps.contains(where: \.isEmpty) else { return }
        if tagInUse(tag) {
            var parent = ""
            for c in comps {
                tagTree![parent, default: []].insert(String(c))
                parent = parent.isEmpty ? String(c) : parent + "/" + c
            }
            return
        }
        var path = Substring(tag)
        while !path.isEmpty, !tagInUse(String(path)), tagTree![String(path)]?.isEmpty ?? true {
            tagTree![String(path)] = nil
            let slash = path.lastIndex(of: "/")
            let parent = slash.map { path[..<$0] } ?? ""
            let leaf = slash.map { path[path.index(after: $0)...] } ?? path
            tagTree![String(parent)]?.remove(String(leaf))
            path = parent
        }
    }

    func allTags() -> Set<String> {
        Set(tagActive.filter { $0.value > 0 }.keys).union(localTags)
    }

    /// Whether an active item other than `r` has `tag`, or the tag was made locally.
    func tagInUse(_ tag: String, besides r: Int64? = nil) -> Bool {
        let mine = r.map { items[$0]?.state == .active && tagsOf[$0]?.contains(tag) == true } == true ? 1 : 0
        return Self.inUse(tag, localTags: localTags, active: (tagActive[tag] ?? 0) - mine)
    }

    /// Every view lists every known type: the registry's and any type an item has, so that
    /// `mv types/T/N archive/T/` works before the first item of T is archived.
    func typesIn(_ v: StateView) -> Set<String> {
        registeredTypes.union(typeTables.values.flatMap(\.keys)).filter { Self.listed($0, registered: registeredTypes, tables: typeTables) }
    }

    // The two rules above, over the tables they read: the filesystem asks them with its catalog's
    // tables in place (a method called on the catalog it holds copies the whole catalog first).

    /// A tag is in use while `active` items have it, or it was made locally.
    static func inUse(_ tag: String, localTags: Set<String>, active: Int) -> Bool { localTags.contains(tag) || active > 0 }

    /// A type is listed while it is registered or a view holds an item of it.
    static func listed(_ t: String, registered: Set<String>, tables: [StateView: [String: NameTable]]) -> Bool {
        registered.contains(t) || tables.values.contains { ($0[t]?.count ?? 0) > 0 }
    }
}

/// Each item's tags, kept as a small array per item (most items have one or two tags; a set
/// each would cost a hash table per item), read and written as a set.
struct TagIndex {
    private var lists: [Int64: [String]] = [:]
    subscript(_ r: Int64) -> Set<String>? {
        get { lists[r].map(Set.init) }
        set { lists[r] = newValue.map { $0.sorted() } }
    }
    mutating func add(_ tag: String, to r: Int64) {
        if lists[r]?.contains(tag) == true { return }
        lists[r, default: []].append(tag)
    }
}
