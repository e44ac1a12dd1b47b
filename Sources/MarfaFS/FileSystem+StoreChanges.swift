import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

/// Changes the store made without a request of the mount's (the sync engine's, a merged save's)
/// reach the catalog, the kernel and the watchers (FS-19, FS-25).
extension FileSystem {
    /// What something other than the mount (the sync engine) changed in the store: items are read
    /// again (names, attributes, tags, state), edges added or removed, and the kernel is told, so
    /// a `cat` shows the new bytes and listings the new names (FS-19).
    public func storeChanged(_ c: StoreChanges) {
        if c.isEmpty { return }
        notify(locked { absorbStoreChanges(c) })
    }

    /// Brings the catalog up to date with changes the store made, and returns what the kernel
    /// must forget, then the replays that make watchers see the changes. Call with the lock held.
    func absorbStoreChanges(_ c: StoreChanges) -> [Invalidation] {
        if c.isEmpty { return [] }
        for (copy, original) in c.staleSaveCopies {
            log.warning("a save from a buffer that missed a remote change overlapped it: the item keeps the remote text, the save is kept as a conflicted copy",
                        metadata: ["item": "\(original)", "copy": "\(copy)"])
            onStaleSave?(original, copy)
        }
        for id in c.staleSaveMerges { onStaleSave?(id, nil) }
        var out: [Invalidation] = []
        var replays: [Replay] = []
        for id in c.items.union(c.content).sorted() {
            do {
                var r = catalog.byID[id]
                let before = r.flatMap(placement)
                if r == nil { r = try store.summary(id: id)?.rowid }
                guard let r else { continue }
                let tagsBefore = catalog.tagsOf[r] ?? []
                out += try refreshItem(r, contentChanged: c.content.contains(id))
                replays += self.replays(r, before: before, after: placement(r), tagsBefore: tagsBefore, modified: c.content.contains(id))
            } catch { log.error("refreshing an item failed", metadata: ["item": "\(id)", "error": "\(error)"]) }
        }
        for rec in c.edgesRemoved {
            // Found among its source's edges, not by a walk over every edge.
            guard let s = catalog.byID[rec.edge.sourceID],
                  let e = catalog.outEdges[s]?.lazy.compactMap({ self.catalog.edges[$0] }).first(where: { $0.edge.id == rec.edge.id }) else { continue }
            out += edgeInvalidations(e)
            catalog.removeEdge(e.rowid)
        }
        for id in c.edgesAdded {
            do {
                guard let rec = try store.edge(id: id) else { continue }
                catalog.addEdge(rec)
                out += edgeInvalidations(rec)
            } catch { log.error("reading an edge failed", metadata: ["edge": "\(id)", "error": "\(error)"]) }
        }
        // After the invalidations: a watcher that reads on the event reads the new bytes, and a
        // name to create or remove is no longer cached.
        return out + replays.map { .replay($0) }
    }

    /// Every directory entry an edge shows in: `links/` under its source, `backlinks/` under its target.
    func edgeInvalidations(_ rec: EdgeRecord) -> [Invalidation] {
        guard let s = catalog.byID[rec.edge.sourceID], let t = catalog.byID[rec.edge.targetID],
              let ss = catalog.items[s], let ts = catalog.items[t] else { return [] }
        let et = rec.edge.edgeType
        return invalidations((.linkEdgeDir(false, s, et), []), (.linkEdgeDir(true, t, et), []),
                             (.linkItemDir(false, s), [et]), (.linkItemDir(true, t), [et]),
                             (.linkTypeDir(false, ss.type), [catalog.name(of: s) ?? ""]), (.linkTypeDir(true, ts.type), [catalog.name(of: t) ?? ""]),
                             (.linksRoot, [ss.type]), (.backlinksRoot, [ts.type]))
    }
}

// MARK: replays for watchers (FS-25)

/// Where an item shows, as far as watchers are concerned: its file in `types/` (or `archive/`,
/// `trash/`) and its entries in the tag directories the kernel has seen.
struct Placement {
    var dir: Node
    var name: String
    var attr: FileAttr
    var path: String { "\(Self.dirPath(dir))/\(name)" }
    /// tag → the entry's name and attributes in `tags/<tag>/`.
    var tags: [String: (name: String, attr: FileAttr)]

    static func dirPath(_ d: Node) -> String {
        switch d {
        case .typeDir(let v, let t): return "\(v.rawValue)/\(t)"
        case .tagDir(let tag): return "tags/" + FileSystem.tagName(tag)
        case .tagsRoot: return "tags"
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
        return Placement(dir: .typeDir(StateView.of(s.state), s.type), name: name, attr: a, tags: tags)
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
    /// out: nothing can watch them. Call with the lock held, after `refreshItem`.
    func replays(_ r: Int64, before: Placement?, after: Placement?, tagsBefore: Set<String>, modified: Bool) -> [Replay] {
        var out: [Replay] = []
        func place(_ d: Node, _ name: String) -> Replay.Place {
            Replay.Place(parent: ino(d), name: name, path: "\(Placement.dirPath(d))/\(name)")
        }
        func seen(_ d: Node) -> Bool { knownIno(d) != nil }
        // Tag directories that came into use or went out of use with this change.
        let tagsAfter = catalog.tagsOf[r] ?? []
        var tagDirsMade: [String] = [], tagDirsGone: [String] = []
        if seen(.tagsRoot) {
            for tag in tagsBefore.symmetricDifference(tagsAfter) {
                let others = !(catalog.tagMembers[tag] ?? []).subtracting([r]).isEmpty || catalog.localTags.contains(tag)
                if others { continue }
                if tagsAfter.contains(tag) { tagDirsMade.append(tag) } else { tagDirsGone.append(tag) }
            }
        }
        for tag in tagDirsMade.sorted() { out.append(Replay(at: place(.tagsRoot, Self.tagName(tag)), op: .create(.directory))) }

        // The file itself.
        switch (before, after) {
        case (nil, let a?):
            if seen(a.dir) { out.append(Replay(at: place(a.dir, a.name), op: .create(.file))) }
        case (let b?, nil):
            if seen(b.dir) { out.append(Replay(at: place(b.dir, b.name), op: .remove(ghost: b.attr))) }
        case (let b?, let a?):
            if b.dir != a.dir || b.name != a.name {
                if seen(b.dir) || seen(a.dir) {
                    out.append(Replay(at: place(b.dir, b.name), op: .rename(to: place(a.dir, a.name), ghost: b.attr)))
                }
                if modified, seen(a.dir) { out.append(Replay(at: place(a.dir, a.name), op: .touch(modified: true))) }
            } else if seen(a.dir), !Self.isTrash(a.dir) {
                out.append(Replay(at: place(a.dir, a.name), op: .touch(modified: modified)))
            }
        case (nil, nil):
            break
        }

        // Its entries in tag directories (a new tag directory is seen once it is made).
        var entriesAfter = after?.tags ?? [:]
        if after != nil, catalog.items[r]?.state == .active {
            for tag in tagDirsMade { entriesAfter[tag] = tagEntry(tag, r) }
        }
        let beforeTags = before?.tags ?? [:]
        var goneDirs: [String: Replay.Ghost] = [:]
        for tag in tagDirsGone {
            let ghost = FileAttr(ino: ino(.tagDir(tag)), kind: .directory, size: 0, mtimeNs: Int64(Date().timeIntervalSince1970 * 1e9), nlink: 2, timeout: 0)
            goneDirs[tag] = Replay.Ghost(at: place(.tagsRoot, Self.tagName(tag)), attr: ghost)
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
        return out
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
        if let g = r.gone.first(where: { $0.at.parent == parent && $0.at.name == name }) { return .success(g.attr) }
        let here = r.at.parent == parent && r.at.name == name
        switch r.op {
        case .touch: return nil
        case .create: return here ? .failure(FSError(.notFound, name)) : nil
        case .remove(let ghost): return here ? .success(ghost) : nil
        case .rename(let to, let ghost):
            if here { return .success(ghost) }
            return to.parent == parent && to.name == name ? .failure(FSError(.notFound, name)) : nil
        }
    }

    /// The replay thread's create, mkdir or symlink: the name exists already; the kernel is given
    /// what it shows. Anything else from that thread is refused: it changes nothing.
    func replayedCreate(parent: UInt64, name: String) throws -> FileAttr {
        guard let r = replaying.withLock({ $0 }), case .create = r.op, r.at.parent == parent, r.at.name == name else {
            throw FSError(.notPermitted, "the replay thread changes nothing")
        }
        return try locked {
            guard let child = try childNode(try node(parent), name) else { throw FSError(.notFound, name) }
            return try attr(child)
        }
    }

    /// The replay thread's unlink or rmdir: the name is gone already.
    func replayedRemove(parent: UInt64, name: String) throws {
        guard let r = replaying.withLock({ $0 }), case .remove = r.op, r.at.parent == parent, r.at.name == name else {
            throw FSError(.notPermitted, "the replay thread changes nothing")
        }
    }

    /// The replay thread's rename: the name has moved already.
    func replayedRename(parent: UInt64, name: String, newParent: UInt64, newName: String) throws {
        guard let r = replaying.withLock({ $0 }), case .rename(let to, _) = r.op, r.at.parent == parent, r.at.name == name,
              to.parent == newParent, to.name == newName else {
            throw FSError(.notPermitted, "the replay thread changes nothing")
        }
    }
}
