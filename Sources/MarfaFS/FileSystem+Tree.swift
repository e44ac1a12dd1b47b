import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

extension FileSystem {
    static let rootEntries: [(String, Node)] = [
        ("archive", .viewRoot(.archive)), ("backlinks", .backlinksRoot), ("by-id", .byIDRoot),
        ("links", .linksRoot), ("tags", .tagsRoot), ("trash", .viewRoot(.trash)), ("types", .viewRoot(.types)),
    ]

    /// Tags are shown with FS-6 escaping (`folder:a/b` as `folder:a∕b`).
    static func tagName(_ tag: String) -> String { Names.escape(tag) }
    static func tag(fromName name: String) -> String { Names.unescape(name) }

    /// Directories that hold scratch files and parked names (FS-13, FS-14), by a stable key.
    func dirKey(_ n: Node) -> String? {
        switch n {
        case .typeDir(.types, let t): return "types/" + t
        case .tagDir(let tag): return "tags/" + tag
        default: return nil
        }
    }

    func childNode(_ p: Node, _ name: String) throws -> Node? {
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
            return ControlFile(rawValue: name).map { .controlFile($0.rawValue) }
        case .viewRoot(let v):
            return catalog.typesIn(v).contains(name) ? .typeDir(v, name) : nil
        case .typeDir(let v, let t):
            return catalog.typeTable(v, t)?.keyOf[name].map { .item($0) }
        case .tagsRoot:
            let tag = Self.tag(fromName: name)
            return catalog.allTags().contains(tag) ? .tagDir(tag) : nil
        case .tagDir(let tag):
            return catalog.tagTable(tag).keyOf[name].map { .tagEntry(tag, $0) }
        case .linksRoot, .backlinksRoot:
            let back = p == .backlinksRoot
            return catalog.typesIn(.types).contains(name) ? .linkTypeDir(back, name) : nil
        case .linkTypeDir(let back, let t):
            // Every active item has a links directory (so `mkdir -p links/T/N/E` works); listings show
            // only the items that have edges.
            return catalog.typeTable(.types, t)?.keyOf[name].map { .linkItemDir(back, $0) }
        case .linkItemDir(let back, let r):
            return catalog.edgeTypes(backlinks: back, item: r).contains(name) ? .linkEdgeDir(back, r, name) : nil
        case .linkEdgeDir(let back, let r, let et):
            return catalog.edgeTable(backlinks: back, item: r, edgeType: et).keyOf[name].map { .linkEntry(back, $0) }
        case .byIDRoot:
            return catalog.byID[name].map { .byIDEntry($0) }
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

    func listedChildren(_ n: Node) throws -> [(String, Node)] {
        switch n {
        case .root: return Self.rootEntries
        case .control: return []   // §7: reachable by name, never listed
        case .viewRoot(let v): return catalog.typesIn(v).sorted().map { ($0, .typeDir(v, $0)) }
        case .typeDir(let v, let t):
            guard let table = catalog.typeTable(v, t) else { return [] }
            return table.sorted().map { ($0, .item(table.keyOf[$0]!)) }
        case .tagsRoot:
            return catalog.allTags().map { (Self.tagName($0), Node.tagDir($0)) }.sorted { $0.0 < $1.0 }
        case .tagDir(let tag):
            let table = catalog.tagTable(tag)
            return table.sorted().map { ($0, .tagEntry(tag, table.keyOf[$0]!)) }
        case .linksRoot, .backlinksRoot:
            let back = n == .backlinksRoot
            var types = Set<String>()
            for (r, s) in catalog.items where s.state == .active && catalog.hasEdges(backlinks: back, item: r) { types.insert(s.type) }
            return types.sorted().map { ($0, .linkTypeDir(back, $0)) }
        case .linkTypeDir(let back, let t):
            guard let table = catalog.typeTable(.types, t) else { return [] }
            return table.sorted().compactMap { name in
                let r = table.keyOf[name]!
                return catalog.hasEdges(backlinks: back, item: r) ? (name, .linkItemDir(back, r)) : nil
            }
        case .linkItemDir(let back, let r):
            return catalog.edgeTypes(backlinks: back, item: r).sorted().map { ($0, .linkEdgeDir(back, r, $0)) }
        case .linkEdgeDir(let back, let r, let et):
            let table = catalog.edgeTable(backlinks: back, item: r, edgeType: et)
            return table.sorted().map { ($0, .linkEntry(back, table.keyOf[$0]!)) }
        case .byIDRoot:
            return catalog.byID.keys.sorted().map { ($0, .byIDEntry(catalog.byID[$0]!)) }
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
        case .tagEntry(_, let r): return "../../" + (try canonicalPath(r))
        case .byIDEntry(let r): return "../" + (try canonicalPath(r))
        case .linkEntry(let back, let e):
            guard let rec = catalog.edges[e], let far = catalog.byID[back ? rec.edge.sourceID : rec.edge.targetID] else {
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
