import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

/// The catalog kept true to the store, and what the kernel must forget when it changes: after a
/// request of the mount's, and when the store changed on its own (the sync engine's changes, a
/// merged save: FS-19), which also replays the change for watchers (FS-25, FileSystem+Replay).
extension FileSystem {
    // MARK: catalog upkeep

    /// What became of an item, for `refreshItem`.
    enum ItemChange {
        /// Its names, tags or state may have changed: read again from the store.
        case metadata
        /// Its bytes too: the kernel also forgets the file's cached pages.
        case content
        /// Just made by the mount, as it is now (summary and tags): no store read.
        case made(ItemSummary, Set<String>)
        /// Just moved to the trash by the mount, as it is now (summary and tags; its bytes, so its
        /// links, as they were): no store read.
        case trashed(ItemSummary, Set<String>)
        /// It is gone.
        case removed

        /// Its bytes, so its links, are as they were.
        var keepsLinks: Bool { if case .trashed = self { return true }; return false }
    }

    /// `refreshItem` with what the store holds of `r` as the request's own write transaction left
    /// it (`Store.setStateReadingFacts`, `Store.move`): no read of the store after the commit.
    func refreshItem(_ r: Int64, written facts: Store.ItemFacts?) throws -> [Invalidation] {
        try refreshItem(r, facts: facts.map { [r: $0] } ?? [:])
    }

    /// Brings item `r` in the catalog up to date (`change`: what became of it) and returns what the
    /// kernel must forget: names that appeared, vanished or moved, and the directories listing them.
    /// `facts`: what the store holds of a batch of items, read together (an item missing from it
    /// has no row); nil: read here.
    func refreshItem(_ r: Int64, _ change: ItemChange = .metadata, facts: [Int64: Store.ItemFacts]? = nil) throws -> [Invalidation] {
        var known: (ItemSummary, Set<String>)?, removed = false
        switch change {
        case .made(let s, let tags), .trashed(let s, let tags): known = (s, tags)
        case .removed: removed = true
        case .metadata, .content: break
        }
        let old = catalog.items[r]
        // What the store has of it: as given, or read in one go (its row, tags and links).
        let read = try facts.map { $0[r] } ?? (removed || known != nil ? nil : wrap { try store.facts(rowid: r) })
        let new = removed ? nil : (known.map(\.0) ?? read?.summary).map(withUnsettledBytes)
        var dirs: [Node: Set<String>] = [:]
        // Edge directories that name this item, before the change.
        let touching = Array(catalog.outEdges[r] ?? []) + Array(catalog.inEdges[r] ?? [])
        let edgeDirsBefore = edgeDirNames(of: r, edges: touching)
        let oldTags = catalog.tagsOf[r] ?? []
        let types = Set([old?.type, new?.type].compactMap { $0 }), typesListedBefore = types.filter(typeListed)
        let newTags = known.map(\.1) ?? read?.tags ?? []
        let vaultBefore = catalog.vault == nil ? nil : (folder: catalog.vault?.folderOf[r], key: catalog.items[r].map { VaultIndex.nameKey(Substring(Catalog.claim($0).baseName)) })
        let pathBefore = old == nil ? nil : try? canonicalPath(r)

        if let old {
            let v = StateView.of(old.state)
            if new == nil || StateView.of(new!.state) != v || new!.type != old.type {
                let changed = catalog.typeTables[v]?[old.type]?.remove(r) ?? []
                if !changed.isEmpty { dirs[.typeDir(v, old.type), default: []].formUnion(changed) }
            }
        }
        if let new {
            catalog.setItem(new)
            let v = StateView.of(new.state)
            let table = catalog.typeTables[v]?[new.type] ?? { let t = NameTable(); catalog.typeTables[v, default: [:]][new.type] = t; return t }()
            let changed = table.upsert(Catalog.claim(new))
            if !changed.isEmpty { dirs[.typeDir(v, new.type), default: []].formUnion(changed) }
        } else if let old {
            catalog.items.removeValue(forKey: r)
            catalog.byID.removeValue(forKey: old.id)
            for e in touching { catalog.removeEdge(e) }
            catalog.edgeDirs.removeValue(forKey: r)
        }
        let moved = movedItems(r, from: pathBefore, gone: new == nil, names: dirs)
        // Tags.
        for tag in oldTags.union(newTags) {
            let member = newTags.contains(tag)
            let inUseBefore = tagInUse(tag)
            if member { catalog.tagMembers[tag, default: []].insert(r) } else { catalog.tagMembers[tag]?.remove(r) }
            let delta = (member && new?.state == .active ? 1 : 0) - (oldTags.contains(tag) && old?.state == .active ? 1 : 0)
            if delta != 0 { catalog.tagActive[tag, default: 0] += delta }
            let inUseAfter = tagInUse(tag)
            // `tags/<tag>` itself changes only when the tag comes into use or goes out of it.
            if inUseBefore != inUseAfter {
                catalog.tagCameOrWent(tag)
                for (d, n) in Self.tagDirPlaces(tag) + shadowPlaces(tag) { dirs[d, default: []].insert(n) }
            }
            guard let table = catalog.tagTables[tag] else { continue }
            let changed = (member && new?.state == .active) ? table.upsert(Catalog.claim(new!)) : table.remove(r)
            if !changed.isEmpty { dirs[.tagDir(tag), default: []].formUnion(changed) }
        }
        catalog.tagsOf[r] = newTags.isEmpty ? nil : newTags
        // links/ and backlinks/ show the same names as types/.
        if let names = dirs.first(where: { if case .typeDir(.types, _) = $0.key { return true }; return false }) {
            if case .typeDir(_, let t) = names.key {
                dirs[.linkTypeDir(.links, t), default: []].formUnion(names.value)
                dirs[.linkTypeDir(.backlinks, t), default: []].formUnion(names.value)
            }
        }
        for (d, n) in edgeDirsBefore + edgeDirNames(of: r, edges: touching) { dirs[d, default: []].insert(n) }
        // A type directory that appeared or vanished (every view lists every known type): only
        // the item's own types, before and after, can have.
        for t in types where typesListedBefore.contains(t) != typeListed(t) {
            for v in StateView.allCases { dirs[.viewRoot(v), default: []].insert(t) }
            dirs[.linksRoot, default: []].insert(t)
            dirs[.backlinksRoot, default: []].insert(t)
        }
        var inv = invalidations(dirs)
        if let vaultBefore { inv += try refreshVault(r, folder: vaultBefore.folder, key: vaultBefore.key, removed: new == nil, facts: read, linksKept: change.keepsLinks) }
        if case .content = change, let ino = knownIno(.item(r)) { inv.append(.inode(ino)) }
        for a in moved { inv += targetChanges(of: a, tags: a == r ? oldTags.union(newTags) : nil, edges: a == r ? touching : nil) }
        return inv
    }

    /// Whether every view lists type `t` (`Catalog.typesIn`), asked of the catalog's tables in
    /// place (`Catalog.listed`).
    func typeListed(_ t: String) -> Bool { Catalog.listed(t, registered: catalog.registeredTypes, tables: catalog.typeTables) }

    /// Whether `tag` is in use (`Catalog.tagInUse`), asked of the catalog's tables in place.
    func tagInUse(_ tag: String) -> Bool { Catalog.inUse(tag, localTags: catalog.localTags, active: catalog.tagActive[tag] ?? 0) }

    /// The items whose path in `types/`, `archive/` or `trash/` changed with item `r`'s change
    /// (`names`: the names that changed in each directory): `r` if its own did, and any whose name
    /// moved aside for it (FS-7). The symlinks that name them by it hold a target the kernel keeps.
    /// An item just made (no path before) has no symlink the kernel could know.
    func movedItems(_ r: Int64, from pathBefore: String?, gone: Bool, names: [Node: Set<String>]) -> Set<Int64> {
        var moved = Set<Int64>()
        if let pathBefore, pathBefore != (gone ? nil : try? canonicalPath(r)) { moved.insert(r) }
        for (d, changed) in names {
            guard case .typeDir(let v, let t) = d, let table = catalog.typeTables[v]?[t] else { continue }
            for n in changed { if let a = table.keyOf[n], a != r { moved.insert(a) } }
        }
        return moved
    }

    /// The symlinks the kernel knows that name item `a` by its path (its entries in `tags/`, its
    /// `by-id/` entry, the `links/` and `backlinks/` entries of `edges`), after its path changed:
    /// their targets changed.
    /// `tags`, `edges`: nil for its own now.
    func targetChanges(of a: Int64, tags: Set<String>?, edges: [Int64]?) -> [Invalidation] {
        var nodes: [Node] = [.byIDEntry(a)] + (tags ?? catalog.tagsOf[a] ?? []).map { .tagEntry($0, a) }
        for e in edges ?? Array(catalog.outEdges[a] ?? []) + Array(catalog.inEdges[a] ?? []) {
            nodes += [.linkEntry(.links, e), .linkEntry(.backlinks, e)]
        }
        return nodes.compactMap { knownIno($0).map(Invalidation.target) }
    }

    /// An item as its file is now: staged new bytes (a save over it) are its file until they are
    /// committed; so are a blob file's bytes being written (its spool file), kept through a move to
    /// the trash, so a descriptor open on a removed file reads and writes all of them (FS-31).
    func withUnsettledBytes(_ s: ItemSummary) -> ItemSummary {
        var s = s
        if let f = store.stagedOverlay(s.rowid) {
            s.size = f.size; s.mtimeNs = f.mtimeNs; s.blobRef = nil
        } else if store.spool.has(s.rowid), let (size, mtime) = try? store.spool.attributes(s.rowid) {
            s.size = size; s.mtimeNs = mtime; s.blobRef = nil
        }
        return s
    }

    /// `refreshItem` after a change of an item's tags: a note's text holds its tags (FS-26), so its
    /// bytes may have changed too.
    func refreshItemAfterTags(_ r: Int64) throws -> [Invalidation] {
        try refreshItem(r, catalog.items[r].map { Store.tagsFollowText($0.type) } == true ? .content : .metadata)
    }

    /// The names item `r` has in the `links/` and `backlinks/` edge directories of the items at the
    /// other end of `edges`.
    func edgeDirNames(of r: Int64, edges: [Int64]) -> [(Node, String)] {
        var out: [(Node, String)] = []
        for e in edges {
            guard let rec = catalog.edges[e], let s = catalog.byID[rec.edge.sourceID], let t = catalog.byID[rec.edge.targetID] else { continue }
            if t == r, let n = catalog.edgeTable(.links, item: s, edgeType: rec.edge.edgeType).nameOf[e] {
                out.append((.linkEdgeDir(.links, s, rec.edge.edgeType), n))
            }
            if s == r, let n = catalog.edgeTable(.backlinks, item: t, edgeType: rec.edge.edgeType).nameOf[e] {
                out.append((.linkEdgeDir(.backlinks, t, rec.edge.edgeType), n))
            }
        }
        return out
    }

    /// Invalidations for (directory, names) pairs; two pairs may name the same directory.
    func invalidations(_ pairs: (Node, [String])...) -> [Invalidation] {
        var dirs: [Node: Set<String>] = [:]
        for (d, names) in pairs { dirs[d, default: []].formUnion(names) }
        return invalidations(dirs)
    }

    /// `inv` less what the kernel did itself in a request's own directories (`create`, a rename
    /// within the tree): their attributes and kept listings, which it drops on its own, and the
    /// entries it made or moved there (`names`; a nil name: every name in that directory).
    static func leavingOutKernelsOwn(_ inv: [Invalidation], dirs: [UInt64], names: [(UInt64, String?)]) -> [Invalidation] {
        inv.filter {
            switch $0 {
            case .inode(let d): return !dirs.contains(d)
            case .entry(let d, let n): return !names.contains { $0.0 == d && ($0.1 == nil || $0.1 == n) }
            case .replay, .target: return true
            }
        }
    }

    func invalidations(_ dirs: [Node: Set<String>]) -> [Invalidation] {
        var out: [Invalidation] = []
        for (d, names) in dirs {
            guard let p = knownIno(d) else { continue }
            out.append(.inode(p))
            for n in names where !n.isEmpty && mustForget(n, in: d) { out.append(.entry(parent: p, name: n)) }
        }
        return out
    }

    // MARK: changes the store made on its own

    /// What something other than the mount (the sync engine) changed in the store: items are read
    /// again (names, attributes, tags, state), edges added or removed, and the kernel is told, so
    /// a `cat` shows the new bytes and listings the new names (FS-19).
    public func storeChanged(_ c: StoreChanges) {
        if c.isEmpty { return }
        notify(locked { followStore(c) })
    }

    /// Brings the catalog up to date with changes the store made, and returns what the kernel
    /// must forget, then the replays that make watchers see the changes. Call with the lock held.
    func followStore(_ c: StoreChanges) -> [Invalidation] {
        if c.isEmpty { return [] }
        for (copy, original) in c.staleSaveCopies {
            log.warning("a save from a buffer that missed a remote change overlapped it: the item keeps the remote text, the save is kept as a conflicted copy",
                        metadata: ["item": "\(original)", "copy": "\(copy)"])
            onStaleSave?(original, copy)
        }
        for id in c.staleSaveMerges { onStaleSave?(id, nil) }
        var out: [Invalidation] = []
        var replays: [Replay] = []
        edgeReplays = []
        defer { edgeReplays = nil }
        for id in c.items.union(c.content).sorted() {
            do {
                var r = catalog.byID[id]
                let before = r.flatMap(placement)
                if r == nil { r = try store.summary(id: id)?.rowid }
                guard let r else { continue }
                let tagsBefore = catalog.tagsOf[r] ?? []
                // The folders of the vault's tree before the change, if anything can watch them (FS-30).
                let folders = catalog.vault != nil && knownIno(.treeDir("")) != nil ? catalog.currentTagTree() : nil
                out += try refreshItem(r, c.content.contains(id) ? .content : .metadata)
                replays += self.replays(r, before: before, after: placement(r), tagsBefore: tagsBefore,
                                        modified: c.content.contains(id), attributes: c.attributes.contains(id), foldersBefore: folders)
            } catch { log.error("refreshing an item failed", metadata: ["item": "\(id)", "error": "\(error)"]) }
        }
        let folders = followRemoteFolders(c)
        out += folders.invalidations
        for rec in c.edgesRemoved {
            // Found among its source's edges, not by a walk over every edge.
            guard let s = catalog.byID[rec.edge.sourceID],
                  let e = catalog.outEdges[s]?.lazy.compactMap({ self.catalog.edges[$0] }).first(where: { $0.edge.id == rec.edge.id }) else { continue }
            out += edgeInvalidations(e)
            noteEdge(e, added: false)
            catalog.removeEdge(e.rowid)
            out += reresolve(s)
        }
        for id in c.edgesAdded {
            do {
                guard let rec = try store.edge(id: id) else { continue }
                catalog.addEdge(rec)
                noteEdge(rec, added: true)
                out += edgeInvalidations(rec) + reresolve(catalog.byID[rec.edge.sourceID])
            } catch { log.error("reading an edge failed", metadata: ["edge": "\(id)", "error": "\(error)"]) }
        }
        // The links naming names that came or went, while their edges' changes are replayed.
        out += resolvePendingLinks()
        // After the invalidations: a watcher that reads on the event reads the new bytes, and a
        // name to create or remove is no longer cached.
        // The folders that came before the files that arrive in them, those that went after the
        // files that left them (the batch's earlier replays walk them as ghosts).
        return out + (Self.throughFoldersRemovedLater(folders.made + replays + folders.removed) + (edgeReplays ?? [])).map { .replay($0) }
    }

    /// Every directory entry an edge shows in: `links/` under its source, `backlinks/` under its target.
    func edgeInvalidations(_ rec: EdgeRecord) -> [Invalidation] {
        guard let s = catalog.byID[rec.edge.sourceID], let t = catalog.byID[rec.edge.targetID],
              let ss = catalog.items[s], let ts = catalog.items[t] else { return [] }
        let et = rec.edge.edgeType
        return invalidations((.linkEdgeDir(.links, s, et), []), (.linkEdgeDir(.backlinks, t, et), []),
                             (.linkItemDir(.links, s), [et]), (.linkItemDir(.backlinks, t), [et]),
                             (.linkTypeDir(.links, ss.type), [catalog.name(of: s) ?? ""]), (.linkTypeDir(.backlinks, ts.type), [catalog.name(of: t) ?? ""]),
                             (.linksRoot, [ss.type]), (.backlinksRoot, [ts.type]))
    }
}

extension FileSystem {
    /// Folders a remote made or removed (FS-34, and a Marfa server's folder markers: FS-32): shown
    /// (even while empty) or gone, with the IN_CREATE|IN_ISDIR or IN_DELETE|IN_ISDIR a watcher of
    /// their parent needs, for every level that came or went (`a/b` made where there was no `a`:
    /// `a` in the tree's top, then `b` in `a`; a recursive watcher adds a watch on a new folder
    /// from it, and so hears what arrives in it next).
    /// Returns the invalidations, and the replays of the folders made and of those removed, apart:
    /// the caller replays a batch's files between the two.
    func followRemoteFolders(_ c: StoreChanges) -> (invalidations: [Invalidation], made: [Replay], removed: [Replay]) {
        let made = c.folders.filter { !catalog.localTags.contains($0) }.sorted()
        // Deepest first: a folder whose only sub-folders go with it is empty too.
        var removed: [String] = [], leaving = Set<String>()
        for tag in c.foldersRemoved.sorted(by: { $0.count > $1.count }) where catalog.localTags.contains(tag) {
            let f = String(tag.dropFirst(VaultText.folderPrefix.count))
            // A folder holding local-only entries here (`.git`, FS-32) is not empty: it stays.
            guard catalog.subfolders(f).allSatisfy({ leaving.contains(VaultIndex.join(f, $0)) }), ((try? treeTable(f)?.count) ?? 0) == 0,
                  (catalog.tagActive[tag] ?? 0) == 0, !local.hasEntries(f) else { continue }
            removed.append(tag); leaving.insert(f)
        }
        guard !made.isEmpty || !removed.isEmpty else { return ([], [], []) }
        let watched = catalog.vault != nil && knownIno(.treeDir("")) != nil
        let before = watched ? catalog.currentTagTree() : [:]
        // Every level of the folders that came or went, and how those going show until they are gone.
        let levels = VaultText.folderLevels(made + removed)
        var ghosts: [String: Replay.Ghost] = [:]
        if watched {
            for f in levels where Self.folderExists(before, f) && knownIno(.treeDir(f)) != nil {
                let (parent, name) = Self.treeDirPlace(f)
                ghosts[f] = Replay.Ghost(at: replayPlace(parent, name), attr: dirGhost(.treeDir(f)))
            }
        }
        var out: [Invalidation] = []
        for tag in made {
            catalog.localTags.insert(tag)
            out += (Self.tagDirPlaces(tag) + shadowPlaces(tag)).flatMap { invalidations(($0.0, [$0.1])) }
        }
        for tag in removed {
            catalog.localTags.remove(tag)
            out += (Self.tagDirPlaces(tag) + shadowPlaces(tag)).flatMap { invalidations(($0.0, [$0.1])) }
        }
        var creations: [Replay] = [], removals: [Replay] = [], walked = Set<String>()
        if watched {
            let (came, went) = Self.folderChanges(levels, before: before, after: catalog.currentTagTree())
            creations = folderCreations(came).map(withWalk)
            for f in went {
                let (parent, _) = Self.treeDirPlace(f)
                guard knownIno(parent) != nil || ghosts[String(parent.treeFolder ?? "")] != nil, let g = ghosts[f] else { continue }
                // Its parents that go with it still show while it is removed (deepest first).
                let above = ghosts.filter { k, _ in f.hasPrefix(k + "/") }
                walked.formUnion(above.keys)
                removals.append(withWalk(Replay(at: g.at, op: .remove(ghost: g.attr), gone: above.sorted { $0.key < $1.key }.map(\.value))))
            }
        }
        // A removed folder's number goes with it, except where a deeper folder's removal is replayed
        // through it (the kernel looks it up again then: it stays numbered, as a folder that goes
        // with its last note does).
        for tag in removed {
            let f = String(tag.dropFirst(VaultText.folderPrefix.count))
            guard !walked.contains(f) else { continue }
            retireDir(.treeDir(f))
            retireDir(.tagDir(tag))
        }
        return (out, creations, removals)
    }
}
