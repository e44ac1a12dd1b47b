import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

// Changes that came without a system call on the mount, replayed on it as the system call that
// would have made them, so that inotify watchers see them (FS-25; the notifier thread in
// MarfaFUSE makes the calls).

/// Where an item shows, as far as watchers are concerned: its file in `types/` (or `archive/`,
/// `trash/`), the same file in the vault's tree, and its entries in the tag directories the kernel
/// has seen.
struct Placement {
    var dir: Node
    var name: String
    var attr: FileAttr
    /// tag → the entry's name and attributes in `tags/<tag>/`.
    var tags: [String: (name: String, attr: FileAttr)]
    /// Its folder in the vault's tree and its name there (FS-30); nil: not in the tree (not
    /// active, or the tree was never looked at).
    var tree: (dir: Node, name: String)?

    static func dirPath(_ d: Node) -> String {
        switch d {
        case .typeDir(let v, let t): return "\(v.rawValue)/\(t)"
        case .tagDir(let tag): return "tags/" + tag
        case .tagsRoot: return "tags"
        case .treeDir(let f): return FileSystem.vaultLinkTarget + (f.isEmpty ? "" : "/" + f)
        default: preconditionFailure("no replays in \(d)")
        }
    }
}

extension FileSystem {
    /// Where item `r` shows now (nil: nowhere). Call with the lock held.
    func placement(_ r: Int64) -> Placement? {
        guard let s = catalog.items[r], let name = catalog.name(of: r), var a = try? attr(.item(r)) else { return nil }
        a.timeout = 0; a.entryTimeout = 0
        var tags: [String: (name: String, attr: FileAttr)] = [:]
        if s.state == .active {
            // Only directories the kernel has seen can be watched.
            for tag in catalog.tagsOf[r] ?? [] where knownIno(.tagDir(tag)) != nil { tags[tag] = tagEntry(tag, r) }
        }
        var tree: (dir: Node, name: String)?
        if s.state == .active, let v = catalog.vault, let f = v.folderOf[r], let n = v.trees[f]?.nameOf[r] { tree = (.treeDir(f), n) }
        return Placement(dir: .typeDir(StateView.of(s.state), s.type), name: name, attr: a, tags: tags, tree: tree)
    }

    /// Where a replay acts: a name in directory `d`, by its path from the mount point.
    func replayPlace(_ d: Node, _ name: String) -> Replay.Place {
        Replay.Place(parent: ino(d), name: name, path: "\(Placement.dirPath(d))/\(name)")
    }

    /// What a directory a change removed still shows to the replay thread.
    func dirGhost(_ d: Node) -> FileAttr {
        FileAttr(ino: ino(d), kind: .directory, size: 0, mtimeNs: Int64(Date().timeIntervalSince1970 * 1e9), nlink: 2, timeout: 0)
    }

    /// Item `r`'s entry in `tags/<tag>/`: its name, and attributes no cache keeps.
    func tagEntry(_ tag: String, _ r: Int64) -> (name: String, attr: FileAttr)? {
        guard let n = catalog.tagTable(tag).nameOf[r], var a = try? attr(.tagEntry(tag, r)) else { return nil }
        a.timeout = 0; a.entryTimeout = 0
        return (n, a)
    }

    static func isTrash(_ d: Node) -> Bool { if case .typeDir(.trash, _) = d { return true }; return false }

    /// The system calls that make watchers see what happened to item `r` (its file created,
    /// removed, moved, changed; its tag entries and tag directories created, removed, renamed), in
    /// the order a local change would make them. Directories the kernel has never seen are left
    /// out: nothing can watch them. `modified`: its bytes changed (IN_MODIFY, IN_CLOSE_WRITE);
    /// `attributes`: its tags, tier or extended attributes changed (IN_ATTRIB), also when its bytes
    /// changed with them (a tag written into a note's front matter changes both). Call with the
    /// lock held, after `refreshItem`.
    /// `foldersBefore`: the tag tree before the change, when the vault's tree is watched (its
    /// folders come from `folder:` tags).
    func replays(_ r: Int64, before: Placement?, after: Placement?, tagsBefore: Set<String>, modified: Bool, attributes: Bool,
                 foldersBefore: [String: Set<String>]? = nil) -> [Replay] {
        var out: [Replay] = []
        let place = replayPlace
        func seen(_ d: Node) -> Bool { knownIno(d) != nil }
        // Tag directories that came into use or went out of use with this change.
        let tagsAfter = catalog.tagsOf[r] ?? []
        var tagDirsMade: [String] = [], tagDirsGone: [String] = []
        if seen(.tagsRoot) {
            for tag in tagsBefore.symmetricDifference(tagsAfter) {
                let others = catalog.tagInUse(tag, besides: r) || !catalog.tagChildren(tag).isEmpty
                if others { continue }
                if tagsAfter.contains(tag) { tagDirsMade.append(tag) } else { tagDirsGone.append(tag) }
            }
        }
        for tag in tagDirsMade.sorted() {
            let (d, n) = Self.tagDirPlace(tag)
            if seen(d) { out.append(Replay(at: place(d, n), op: .create(.directory))) }
        }

        // The file itself.
        switch (before, after) {
        case (nil, let a?):
            if seen(a.dir) { out.append(Replay(at: place(a.dir, a.name), op: .create(itemKind(r)))) }
        case (let b?, nil):
            if seen(b.dir) { out.append(Replay(at: place(b.dir, b.name), op: .remove(ghost: b.attr))) }
        case (let b?, let a?):
            if b.dir != a.dir || b.name != a.name {
                if seen(b.dir) || seen(a.dir) {
                    out.append(Replay(at: place(b.dir, b.name), op: .rename(to: place(a.dir, a.name), ghost: b.attr)))
                }
                if modified, seen(a.dir) { out.append(Replay(at: place(a.dir, a.name), op: .touch(modified: true))) }
                if attributes, seen(a.dir) { out.append(Replay(at: place(a.dir, a.name), op: .touch(modified: false))) }
            } else if seen(a.dir), !Self.isTrash(a.dir) {
                if modified { out.append(Replay(at: place(a.dir, a.name), op: .touch(modified: true))) }
                if attributes || !modified { out.append(Replay(at: place(a.dir, a.name), op: .touch(modified: false))) }
            }
        case (nil, nil):
            break
        }

        out += treeReplays(r, before: before, after: after, tagsBefore: tagsBefore, tagsAfter: tagsAfter, foldersBefore: foldersBefore,
                           modified: modified, attributes: attributes)

        // Its entries in tag directories (a new tag directory is seen once it is made).
        var entriesAfter = after?.tags ?? [:]
        if after != nil, catalog.items[r]?.state == .active {
            for tag in tagDirsMade { entriesAfter[tag] = tagEntry(tag, r) }
        }
        let beforeTags = before?.tags ?? [:]
        var goneDirs: [String: Replay.Ghost] = [:]
        for tag in tagDirsGone {
            let ghost = dirGhost(.tagDir(tag))
            let (d, n) = Self.tagDirPlace(tag)
            goneDirs[tag] = Replay.Ghost(at: place(d, n), attr: ghost)
        }
        for tag in Set(beforeTags.keys).union(entriesAfter.keys).sorted() {
            let d = Node.tagDir(tag)
            switch (beforeTags[tag], entriesAfter[tag]) {
            case (nil, let e?): out.append(Replay(at: place(d, e.name), op: .create(.symlink)))
            case (let e?, nil): out.append(Replay(at: place(d, e.name), op: .remove(ghost: e.attr), gone: goneDirs[tag].map { [$0] } ?? []))
            case (let e?, let f?) where e.name != f.name:
                out.append(Replay(at: place(d, e.name), op: .rename(to: place(d, f.name), ghost: e.attr)))
            default: break
            }
        }
        for tag in tagDirsGone.sorted() {
            guard let g = goneDirs[tag] else { continue }
            out.append(Replay(at: g.at, op: .remove(ghost: g.attr)))
        }
        return out.map(withWalk)
    }

    /// Replay `r` with the directories on its way as they show now (`Replay.walk`).
    func withWalk(_ r: Replay) -> Replay {
        var r = r
        var places = [r.at]
        if case .rename(let to, _) = r.op { places.append(to) }
        for p in places {
            for g in walk(to: p) where !r.gone.contains(where: { $0.at == g.at }) && !r.walk.contains(where: { $0.at == g.at }) {
                r.walk.append(g)
            }
        }
        return r
    }

    /// The folders of the vault's tree, or the tag directories, that `p`'s path walks through,
    /// those the kernel has seen, as they show now.
    func walk(to p: Replay.Place) -> [Replay.Ghost] {
        guard let slash = p.path.lastIndex(of: "/") else { return [] }
        let dir = p.path[..<slash]
        var out: [Replay.Ghost] = []
        if dir.hasPrefix(Self.vaultLinkTarget + "/") {
            var f = String(dir.dropFirst(Self.vaultLinkTarget.count + 1))
            while !f.isEmpty {
                let (parent, name) = Self.treeDirPlace(f)
                if knownIno(.treeDir(f)) != nil { out.append(Replay.Ghost(at: replayPlace(parent, name), attr: dirGhost(.treeDir(f)))) }
                f = parent.treeFolder ?? ""
            }
        } else if dir.hasPrefix("tags/") {
            var tag = String(dir.dropFirst("tags/".count))
            while !tag.isEmpty {
                let (parent, name) = Self.tagDirPlace(tag)
                if knownIno(.tagDir(tag)) != nil { out.append(Replay.Ghost(at: replayPlace(parent, name), attr: dirGhost(.tagDir(tag)))) }
                guard case .tagDir(let above) = parent else { break }
                tag = above
            }
        }
        return out
    }

    /// The replays in the vault's tree (FS-30), as in `types/`: the folders that came into use
    /// (parents first), the file created, removed, moved between folders or changed, then the
    /// folders that went out of use (deepest first). A folder made by this change is seen once it
    /// is made.
    func treeReplays(_ r: Int64, before: Placement?, after: Placement?, tagsBefore: Set<String>, tagsAfter: Set<String>,
                     foldersBefore: [String: Set<String>]?, modified: Bool, attributes: Bool) -> [Replay] {
        guard catalog.vault != nil, knownIno(.treeDir("")) != nil else { return [] }
        var out: [Replay] = []
        let place = replayPlace
        // Folders: every level of each `folder:` tag that came or went, or of all of them when the
        // file came into the tree or left it (a file moved to the trash keeps its tags, yet no
        // longer holds its folders: a remote `rm -rf` empties them); the tag tree is built again
        // only then.
        let enteredOrLeft = (before?.tree == nil) != (after?.tree == nil)
        let paths = VaultText.folderLevels(enteredOrLeft ? tagsBefore.union(tagsAfter) : tagsBefore.symmetricDifference(tagsAfter))
        var made: [String] = [], gone: [String] = []
        if let foldersBefore, !paths.isEmpty {
            (made, gone) = Self.folderChanges(paths, before: foldersBefore, after: catalog.currentTagTree())
        }
        let madeSet = Set(made)
        func seen(_ d: Node) -> Bool { seenDir(d, came: madeSet) }
        out += folderCreations(made)
        // Folders gone with this change still show to the replay thread until they are removed, so
        // the file's path through them can be walked.
        var ghosts: [String: Replay.Ghost] = [:]
        for f in gone {
            let (parent, name) = Self.treeDirPlace(f)
            ghosts[f] = Replay.Ghost(at: place(parent, name), attr: dirGhost(.treeDir(f)))
        }
        func ghostsOn(_ d: Node) -> [Replay.Ghost] {
            guard case .treeDir(let f) = d else { return [] }
            return ghosts.filter { f == $0.key || f.hasPrefix($0.key + "/") }.sorted { $0.key < $1.key }.map(\.value)
        }
        switch (before?.tree, after?.tree) {
        case (nil, let a?):
            if seen(a.dir) { out.append(Replay(at: place(a.dir, a.name), op: .create(itemKind(r)))) }
        case (let b?, nil):
            if seen(b.dir), let ghost = before?.attr { out.append(Replay(at: place(b.dir, b.name), op: .remove(ghost: ghost), gone: ghostsOn(b.dir))) }
        case (let b?, let a?):
            if b.dir != a.dir || b.name != a.name {
                if seen(b.dir) || seen(a.dir), let ghost = before?.attr {
                    out.append(Replay(at: place(b.dir, b.name), op: .rename(to: place(a.dir, a.name), ghost: ghost), gone: ghostsOn(b.dir)))
                }
            }
            if seen(a.dir) {
                if modified { out.append(Replay(at: place(a.dir, a.name), op: .touch(modified: true))) }
                if attributes || (!modified && b.dir == a.dir && b.name == a.name) { out.append(Replay(at: place(a.dir, a.name), op: .touch(modified: false))) }
            }
        case (nil, nil):
            break
        }
        for f in gone {
            let (parent, _) = Self.treeDirPlace(f)
            guard seen(parent), knownIno(.treeDir(f)) != nil, let g = ghosts[f] else { continue }
            // Its parents that went with it still show while it is removed (deepest first).
            out.append(Replay(at: g.at, op: .remove(ghost: g.attr), gone: ghostsOn(parent)))
        }
        return out
    }

    /// A batch's replays, each able to walk the folders a later one of the batch removes: changes
    /// applied together (a remote `rm -rf`: every file, then the last one's folders) are replayed
    /// once all are in the catalog, and only the replay of the change that emptied a folder knew
    /// it was there before. Each replay looks its own folders up (its path's depth), not every
    /// later removal (a remote `rm -rf` of thousands of files in hundreds of folders).
    static func throughFoldersRemovedLater(_ replays: [Replay]) -> [Replay] {
        // Each folder a replay of the batch removes (itself, or a parent that goes with it): the
        // replays that do, in order, with what it showed.
        var removedBy: [String: [(index: Int, ghost: Replay.Ghost)]] = [:]
        for (j, r) in replays.enumerated() {
            guard case .remove(let ghost) = r.op, ghost.kind == .directory else { continue }
            for g in r.gone + [Replay.Ghost(at: r.at, attr: ghost)] where removedBy[g.at.path]?.last?.index != j {
                removedBy[g.at.path, default: []].append((j, g))
            }
        }
        if removedBy.isEmpty { return replays }
        var out = replays
        for i in out.indices {
            var missing: [Replay.Ghost] = [], path = Substring(out[i].at.path)
            while let slash = path.lastIndex(of: "/") {
                path = path[..<slash]
                guard let later = removedBy[String(path)]?.first(where: { $0.index > i }),
                      !out[i].gone.contains(where: { $0.at.path == later.ghost.at.path }) else { continue }
                missing.append(later.ghost)
            }
            if !missing.isEmpty { out[i].gone = (out[i].gone + missing).sorted { $0.at.path < $1.at.path } }
        }
        return out
    }

    /// The folders among `levels` that came into the tree and went from it between two tag trees
    /// (`Catalog.currentTagTree`): those that came parents first, those that went deepest first.
    static func folderChanges(_ levels: Set<String>, before: [String: Set<String>], after: [String: Set<String>]) -> (came: [String], went: [String]) {
        let depth: (String) -> Int = { $0.reduce(0) { $1 == "/" ? $0 + 1 : $0 } }
        var came: [String] = [], went: [String] = []
        for f in levels {
            let (b, a) = (folderExists(before, f), folderExists(after, f))
            if a && !b { came.append(f) } else if b && !a { went.append(f) }
        }
        return (came.sorted { (depth($0), $0) < (depth($1), $1) }, went.sorted { (depth($0), $0) > (depth($1), $1) })
    }

    /// Whether a watcher can see directory `d`: the kernel knows it, or it is a folder that came
    /// with the same change (seen once it is made).
    func seenDir(_ d: Node, came: Set<String>) -> Bool {
        if case .treeDir(let f) = d, came.contains(f) { return true }
        return knownIno(d) != nil
    }

    /// IN_CREATE|IN_ISDIR of each folder that came (parents first) in a parent a watcher can see.
    func folderCreations(_ came: [String]) -> [Replay] {
        let cameSet = Set(came)
        return came.compactMap { f in
            let (parent, name) = Self.treeDirPlace(f)
            return seenDir(parent, came: cameSet) ? Replay(at: replayPlace(parent, name), op: .create(.directory)) : nil
        }
    }

    /// Where folder `f` of the tree shows: its parent folder and its last name.
    static func treeDirPlace(_ f: String) -> (Node, String) {
        guard let slash = f.lastIndex(of: "/") else { return (.treeDir(""), f) }
        return (.treeDir(String(f[..<slash])), String(f[f.index(after: slash)...]))
    }

    /// Whether folder `f` is in the tree a tag tree gives (`Catalog.tagChildren`).
    static func folderExists(_ tree: [String: Set<String>], _ f: String) -> Bool {
        let tag = VaultText.folderPrefix + f
        guard let slash = tag.lastIndex(of: "/") else { return tree[""]?.contains(tag) ?? false }
        return tree[String(tag[..<slash])]?.contains(String(tag[tag.index(after: slash)...])) ?? false
    }

    // MARK: edge entries (links/, backlinks/)

    /// An edge's entries in `links/<its source>/<type>/` and `backlinks/<its target>/<type>/` came
    /// (after the catalog took the edge) or are going (before it drops it): while the store's
    /// changes are followed (`edgeReplays` is collecting), their creation or removal is replayed
    /// for watchers of those directories (FS-30: a link added on another device shows in the
    /// target's backlinks). Edge-type directories the kernel has not seen are left out.
    func noteEdge(_ rec: EdgeRecord, added: Bool) {
        guard edgeReplays != nil, let s = catalog.byID[rec.edge.sourceID], let t = catalog.byID[rec.edge.targetID] else { return }
        let et = rec.edge.edgeType
        for (dir, item) in [(LinkDirection.links, s), (.backlinks, t)] {
            let d = Node.linkEdgeDir(dir, item, et)
            guard knownIno(d) != nil, let type = catalog.items[item]?.type, let itemName = catalog.name(of: item),
                  let name = catalog.edgeTable(dir, item: item, edgeType: et).nameOf[rec.rowid] else { continue }
            let root = dir == .links ? "links" : "backlinks"
            let at = Replay.Place(parent: ino(d), name: name, path: "\(root)/\(type)/\(itemName)/\(et)/\(name)")
            if added {
                edgeReplays!.append(Replay(at: at, op: .create(.symlink)))
            } else if var ghost = try? attr(.linkEntry(dir, rec.rowid)) {
                ghost.timeout = 0; ghost.entryTimeout = 0
                edgeReplays!.append(Replay(at: at, op: .remove(ghost: ghost)))
            }
        }
    }

    // MARK: the replay thread's requests

    /// Whether a request comes from the replay thread.
    func isReplay(_ reader: Int32) -> Bool { reader != 0 && reader == replayThread }

    /// The notifier says which change it replays now (nil: none).
    public func replaying(_ r: Replay?) { replaying.withLock { $0 = r } }

    /// The replay thread's lookup of a name the change being replayed concerns: a name to create
    /// is not there yet (ENOENT), a name to remove or move still shows what it showed. Nil: any
    /// other name, answered as usual.
    func replayedLookup(parent: UInt64, name: String) -> Result<FileAttr, FSError>? {
        guard let r = replaying.withLock({ $0 }) else { return nil }
        if let g = r.gone.first(where: { $0.at.names(parent, name) }) { return .success(g.attr) }
        let here = r.at.names(parent, name)
        switch r.op {
        case .touch: return nil
        case .create: return here ? .failure(FSError(.notFound, name)) : nil
        case .remove(let ghost): return here ? .success(ghost) : nil
        case .rename(let to, let ghost):
            if here { return .success(ghost) }
            return to.names(parent, name) ? .failure(FSError(.notFound, name)) : nil
        }
    }

    /// The replay thread's lookup of a directory on the way that the tree no longer has
    /// (`Replay.walk`): what it showed when the change was applied. Nil: not one of them.
    func replayedWalk(parent: UInt64, name: String) -> FileAttr? {
        replaying.withLock { $0 }?.walk.first(where: { $0.at.names(parent, name) })?.attr
    }

    /// The directories on `r`'s way (`Replay.walk`) that the tree no longer shows there: the
    /// notifier drops their names before trying a failed replay again. A program may have looked
    /// one up since it went (a watcher's rescan), leaving a negative entry the kernel answers from
    /// for a second; a folder gone from the tree keeps its number while a deeper removal is
    /// replayed through it, so the test is the name, not the number. Never those still there,
    /// which a process may have for its working directory (FS-31).
    public func goneOnTheWay(_ r: Replay) -> [Replay.Place] {
        locked {
            r.walk.filter { g in
                guard inodes.node(g.attr.ino) != nil, let parent = inodes.node(g.at.parent),
                      let child = try? childNode(parent, g.at.name) else { return true }
                return knownIno(child) != g.attr.ino
            }.map(\.at)
        }
    }

    /// What inode `ino` showed to the replay being made, if it is one of the directories on its
    /// way that are gone (`Replay.gone`, `Replay.walk`).
    func replayedGhost(_ ino: UInt64) -> FileAttr? {
        guard let r = replaying.withLock({ $0 }) else { return nil }
        return (r.gone + r.walk).first(where: { $0.attr.ino == ino })?.attr
    }

    /// The replay thread's create, mkdir or symlink: the name exists already; the kernel is given
    /// what it shows. Anything else from that thread is refused: it changes nothing.
    func replayedCreate(parent: UInt64, name: String) throws -> FileAttr {
        guard let r = replaying.withLock({ $0 }), case .create = r.op, r.at.names(parent, name) else {
            throw FSError(.notPermitted, "the replay thread changes nothing")
        }
        return try locked {
            guard let child = try childNode(try node(parent), name) else { throw FSError(.notFound, name) }
            return try attr(child)
        }
    }

    /// The replay thread's unlink or rmdir: the name is gone already.
    func replayedRemove(parent: UInt64, name: String) throws {
        guard let r = replaying.withLock({ $0 }), case .remove = r.op, r.at.names(parent, name) else {
            throw FSError(.notPermitted, "the replay thread changes nothing")
        }
    }

    /// The replay thread's rename: the name has moved already.
    func replayedRename(parent: UInt64, name: String, newParent: UInt64, newName: String) throws {
        guard let r = replaying.withLock({ $0 }), case .rename(let to, _) = r.op, r.at.names(parent, name), to.names(newParent, newName) else {
            throw FSError(.notPermitted, "the replay thread changes nothing")
        }
    }
}
