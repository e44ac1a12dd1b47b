import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

extension FileSystem {
    func wrap<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch {
            let e = FSError.from(error)
            if e.code == .noSpace || e.code == .io { noteError(e) }
            throw e
        }
    }

    func checkName(_ name: String) throws {
        if name.utf8.count > Names.maxNameBytes { throw FSError(.nameTooLong, name) }
        guard Names.isValidComponent(name) else { throw FSError(.badName, name) }
        // Unicode's control characters (Cc) are exactly U+0000–U+001F and U+007F–U+009F.
        if name.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) {
            throw FSError(.badName, "control characters in a name")
        }
    }

    /// A tag the server would refuse is refused here (EINVAL), before anything is queued.
    static func checkTag(_ tag: String) throws {
        // A folder's tag may be as long as a path (FS-31: it travels in a short form).
        if !Store.isLocalTag(tag) { throw FSError(.invalid, "not a valid tag (\(TagRule.description)): \(tag)") }
    }

    func readOnlyOrNotPermitted(_ n: Node) -> FSError {
        switch n {
        case .backlinksRoot, .byIDRoot, .linkTypeDir(.backlinks, _), .linkItemDir(.backlinks, _), .linkEdgeDir(.backlinks, _, _), .linkEntry(.backlinks, _), .byIDEntry:
            return FSError(.readOnly, "backlinks/ and by-id/ are read-only")
        case _ where Self.isHistory(n):
            return FSError(.readOnly, "history/ and .marfafs/previews/ are read-only")
        default:
            return FSError(.notPermitted, "not an operation this directory supports")
        }
    }

    // MARK: create

    public func create(parent: UInt64, name: String, reader: Int32 = 0) throws -> FileAttr {
        if isReplay(reader) { return try replayedCreate(parent: parent, name: name) }
        if let rel = try localTarget(parent: parent, name: name, making: true) {
            return try makeLocal(rel, parent: parent) { try local.create(rel, mode: 0o644) }
        }
        let w = writers.writer(reader)
        let (a, inv): (FileAttr, [Invalidation]) = try locked {
            currentWriter = w
            defer { currentWriter = .unknown }
            let p = try node(parent)
            let made = try createLocked(in: p, parent: parent, name: name)
            namesChanged(in: p)
            return made
        }
        notify(inv)
        return a
    }

    /// `create` of `name` in directory `p` (inode `parent`), with the lock held: the file, and
    /// what the kernel must forget.
    private func createLocked(in p: Node, parent: UInt64, name: String) throws -> (FileAttr, [Invalidation]) {
        try checkName(name)
        if try childNode(p, name) != nil { throw FSError(.exists, name) }
        if let local = try createLocal(p, name) { return local }
        let new = try newItem(in: p, named: name)
        // Staged: in memory and the journal until it settles or something needs its row.
        let summary = try wrap { try store.stageItem(new) }
        catalog.createdHere.insert(summary.rowid)
        settler.noteWrite()
        let inv = try refreshItem(summary.rowid, .made(summary, Set(new.tags)))
        var a = try attr(.item(summary.rowid))
        if case .tagDir = p {
            // The kernel now holds a regular file under this name; the entry is a symlink from
            // the next lookup on, so the kernel must not keep the name (the inode's attributes hold).
            a.entryTimeout = 0
            return (a, inv)
        }
        // The kernel knows what it just created in `parent`: only other directories need telling.
        return (a, Self.leavingOutKernelsOwn(inv, dirs: [parent], names: [(parent, nil)]))
    }

    /// The item a new file named `name` in directory `p` becomes: one of the directory's type in
    /// `types/<type>/`, a note with the tag in `tags/<tag>/`.
    func newItem(in p: Node, named name: String) throws -> NewItem {
        switch p {
        case .typeDir(.types, let t): return NewItem(type: t, fileName: name)
        case .tagDir(let tag): return NewItem(type: "core.note", fileName: name, tags: [tag])
        case .treeDir(let f): return NewItem(type: Self.treeType(name), fileName: name, tags: f.isEmpty ? [] : [VaultText.folderPrefix + f])
        default: throw readOnlyOrNotPermitted(p)
        }
    }

    /// The type of a file made in the vault's tree (FS-27): Markdown is a note, anything else a
    /// file item of its MIME type. rsync's temporary name (`.name.md.Ab12Cd`) counts as the name
    /// it will be renamed to.
    static func treeType(_ name: String) -> String {
        var n = Substring(name)
        if n.hasPrefix("."), let dot = n.lastIndex(of: "."), dot != n.startIndex, n.distance(from: dot, to: n.endIndex) == 7,
           n[n.index(after: dot)...].allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) {
            n = n[n.index(after: n.startIndex)..<dot]
        }
        let ext = Names.split(String(n)).ext.lowercased()
        return ext == ".md" ? "core.note" : Names.fileType(forMime: Names.mimeType(forExtension: ext))
    }

    /// Creates that stay local: a scratch file (FS-14), or the re-attachment of an item whose name
    /// an editor moved to a backup name (FS-13: `note.md` → `note.md~`, then a new `note.md`).
    func createLocal(_ p: Node, _ name: String) throws -> (FileAttr, [Invalidation])? {
        guard let key = dirKey(p) else { return nil }
        if let (backup, pk) = catalog.parked[key]?.first(where: { $0.value.originalName == name }) {
            try wrap { try store.commitStaged(ifAnyOf: StagedKey(.item, pk.item)) }
            catalog.parked[key]?[backup] = nil
            // The backup name becomes a scratch file with the bytes as they were (vim's `:set backup`
            // keeps it); the new file starts empty, and the item keeps its id, inode, tags, edges
            // and attributes.
            let copy = try wrap { try store.backupItem(pk.item, dir: key, name: backup) }
            // The old inode went to the backup name with the old bytes (FS-31).
            try replaceFile(of: pk.item, number: nil)
            catalog.addScratch(copy)
            // vim's save with a backup: the new file is the program's save over the item (FS-29).
            let (size, mtime) = try wrap { try store.truncateUnsettled(rowid: pk.item, size: 0, by: currentWriter) }
            wroteUnsettled(pk.item, size: size, mtimeNs: mtime)
            return (try attr(.item(pk.item)), invalidations((p, [backup])))
        }
        if let (r, at) = catalog.unlinked[key]?.removeValue(forKey: name), Date().timeIntervalSince(at) < Self.reattachWindow,
           catalog.items[r]?.state == .trashed, catalog.name(of: r) == name, itemKind(r) == .file {
            // Removed and made again at once under the same name (`tar -x` over a file, a tool
            // that deletes before it writes): the item comes back from the trash, empty, with its
            // id, inode, tags, edges and attributes (FS-28).
            // A new file: a new inode; a descriptor open on the removed one keeps its bytes (FS-31).
            try replaceFile(of: r, number: nil)
            let (size, mtime) = try wrap { try store.untrashEmptied(rowid: r, type: catalog.items[r]?.type, by: currentWriter) }
            var inv = try refreshItem(r)
            wroteUnsettled(r, size: size, mtimeNs: mtime)
            catalog.createdHere.insert(r)
            inv += knownIno(.item(r)).map { [.inode($0)] } ?? []
            return (try attr(.item(r)), inv)
        }
        guard ScratchNames.matches(name) else { return nil }
        let s = try wrap { try store.stageScratch(dir: key, name: name) }
        catalog.addScratch(s)
        settler.noteWrite()
        return (try attr(.scratch(s.rowid)), [])
    }

    public func mkdir(parent: UInt64, name: String, reader: Int32 = 0) throws -> FileAttr {
        if isReplay(reader) { return try replayedCreate(parent: parent, name: name) }
        if let rel = try localTarget(parent: parent, name: name, making: true, folder: true) {
            return try makeLocal(rel, parent: parent) { try local.mkdir(rel, mode: 0o755) }
        }
        // A new directory queues nothing (a folder, a tag or an edge directory is kept locally
        // until something is in it), so nothing written nearby needs to settle first: `cp -r`
        // makes each folder while the files of the last one are still settling.
        let (a, inv): (FileAttr, [Invalidation]) = try locked {
            let p = try node(parent)
            try checkName(name)
            if try childNode(p, name) != nil { throw FSError(.exists, name) }
            switch p {
            case .tagsRoot, .tagDir, .treeDir:
                let tag: String
                switch p {
                case .tagDir(let parent): tag = Self.tagPath(parent, name)
                case .treeDir(let f): tag = VaultText.folderPrefix + VaultIndex.join(f, name)
                default: tag = Self.tag(fromName: name)
                }
                try Self.checkTag(tag)
                try stageFolder(tag)
                // The kernel makes the new directory's entry from this answer: it is shown before the
                // names around it are listed for forgetting, so that entry is never one of them (a
                // shell that has already moved into it keeps its working directory: FS-31).
                let made: Node = if case .treeDir(let f) = p { .treeDir(VaultIndex.join(f, name)) } else { .tagDir(tag) }
                // A new folder's times are now (its names have just begun).
                namesChanged(in: made)
                let a = try attr(made)
                noteShown(made)
                let inv = Self.tagDirPlaces(tag).flatMap { invalidations(($0.0, [$0.1])) }
                return (a, inv)
            case .linkItemDir(.links, let r):
                guard let s = catalog.items[r] else { throw FSError(.notFound, name) }
                try wrap { try store.addEdgeDir(itemID: s.id, edgeType: name) }
                catalog.edgeDirs[r, default: []].insert(name)
                let inv = invalidations((.linkTypeDir(.links, s.type), [catalog.name(of: r) ?? ""]), (.linksRoot, [s.type]))
                return (try attr(.linkEdgeDir(.links, r, name)), inv)
            default:
                throw readOnlyOrNotPermitted(p)
            }
        }
        touchNames(parent)
        notify(inv)
        return a
    }

    // MARK: remove

    public func unlink(parent: UInt64, name: String, reader: Int32 = 0) throws {
        if isReplay(reader) { return try replayedRemove(parent: parent, name: name) }
        if let rel = try localTarget(parent: parent, name: name) {
            try local.unlink(rel)
            if !LocalFiles.owns(parent) { touchNames(parent) }
            return
        }
        let inv: [Invalidation] = try freeing { try locked {
            let p = try node(parent)
            // A scratch file is local: removing it queues nothing, so nothing settles first.
            if let key = dirKey(p), catalog.parked[key]?[name] == nil, let s = catalog.scratchByDir[key]?[name] {
                try forgetScratch(s)
                return []
            }
            try settleNow(spools: .none)
            if let key = dirKey(p), let pk = catalog.parked[key]?[name] {
                catalog.parked[key]?[name] = nil
                // An item renamed to a backup name and removed: it goes to the trash.
                let facts = try wrap { try store.setStateReadingFacts(rowid: pk.item, .trashed) }
                return try refreshItem(pk.item, written: facts) + invalidations((p, [name, pk.originalName]))
            }
            guard let child = try childNode(p, name) else { throw FSError(.notFound, name) }
            switch (p, child) {
            case (.typeDir(.trash, _), .item(let r)):
                // Removed from the trash: purged, its space given back (FS-28).
                try wrap { _ = try store.purge(rowid: r) }
                return try refreshItem(r, .removed)
            case (.typeDir, .item(let r)), (.treeDir, .item(let r)):
                try keepFolder(p)
                // FS §4: unlink moves to the trash; its row is written by the next write
                // (`Store.trashLater`), the settler's pass if nothing else writes first. A file
                // still staged (made a moment ago, or being committed) has no row to move yet:
                // it is committed, then moved, in the request.
                var change = ItemChange.metadata, facts: [Int64: Store.ItemFacts] = [:]
                if stagedKey(child) == nil, let s = catalog.items[r] {
                    // Everything settled above, so the catalog holds the item as the store does.
                    let ns = try wrap { try store.trashLater(rowid: r) }
                    settler.noteRemoval()
                    change = .trashed(Store.trashed(s, at: ns), catalog.tagsOf[r] ?? [])
                } else {
                    try settleOnly([child])
                    facts = try wrap { try store.setStateReadingFacts(rowid: r, .trashed) }.map { [r: $0] } ?? [:]
                }
                if let key = dirKey(p) { catalog.unlinked[key, default: [:]][name] = (r, Date()) }
                return try refreshItem(r, change, facts: facts)
            case (.tagDir(let tag), .tagEntry(_, let r)):
                try wrap { try store.changeTags(rowid: r, removing: [tag]) }
                return try refreshItemAfterTags(r)
            case (.linkEdgeDir(.links, let r, let edgeType), .linkEntry(.links, let e)):
                if Catalog.isDerived(e) { throw FSError(.notPermitted, "this link is written in the note's text: edit the text to remove it") }
                try wrap { try store.deleteEdge(rowid: e) }
                let far = catalog.edges[e].flatMap { catalog.byID[$0.edge.targetID] }
                catalog.removeEdge(e)
                var inv = invalidations((.linkEdgeDir(.links, r, edgeType), [name])) + reresolve(r)
                if let far, let s = catalog.items[far] {
                    inv += invalidations((.linkTypeDir(.backlinks, s.type), [catalog.name(of: far) ?? ""]), (.backlinksRoot, [s.type]),
                                         (.linkEdgeDir(.backlinks, far, edgeType), []), (.linkItemDir(.backlinks, far), [edgeType]))
                }
                return inv
            default:
                if case .controlFile = child { throw FSError(.notPermitted, "control files cannot be removed") }
                throw readOnlyOrNotPermitted(p)
            }
        } }
        touchNames(parent)
        notify(inv)
    }

    /// Runs a removal; on a full disk, gives the store's reserve back and tries once more, so
    /// deleting works when nothing else does (FS-28).
    func freeing<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch let e as FSError where e.code == .noSpace {
            guard store.releaseReserve() else { throw e }
            log.warning("the disk is full: the store's reserve was given back so a removal can go through")
            return try body()
        }
    }

    /// A folder of the tree that a file or folder leaves (an unlink, an rmdir, a move elsewhere)
    /// stays until it is removed, as a disk's does (FS-31): one that exists only through its
    /// files' `folder:` tags or its sub-folders (an import, a remote's files) is kept from then on
    /// as if made with `mkdir`, so `rm -r`'s last `rmdir` and a shell inside it still find it.
    /// Call with the lock held.
    func keepFolder(_ p: Node) throws {
        guard case .treeDir(let f) = p, !f.isEmpty else { return }
        let tag = VaultText.folderPrefix + f
        if catalog.localTags.contains(tag) { return }
        try stageFolder(tag)
    }

    /// Keeps a folder or tag made here (`mkdir`, or one kept while empty) without waiting for the
    /// store's writer (`Store.stageLocalTag`); the settler writes its row. Call with the lock held.
    func stageFolder(_ tag: String) throws {
        try wrap { try store.stageLocalTag(tag) }
        catalog.localTags.insert(tag)
        settler.wake()
    }

    /// A folder or tag found empty by `rmdir` goes without waiting for the store's writer
    /// (`Store.removeLocalTagLater`): its row is deleted with the removals of the files it held, by
    /// the settler's pass once the mount is quiet or the next write, not in the request (each
    /// `rmdir` of `rm -rf` wrote the removals of its folder's files, a third of its time). Call
    /// with the lock held.
    func forgetLocalTag(_ tag: String) throws {
        try wrap { try store.removeLocalTagLater(tag) }
        catalog.localTags.remove(tag)
        settler.noteRemoval()
    }

    public func rmdir(parent: UInt64, name: String, reader: Int32 = 0) throws {
        if isReplay(reader) { return try replayedRemove(parent: parent, name: name) }
        if let rel = try localTarget(parent: parent, name: name) {
            try local.rmdir(rel)
            if !LocalFiles.owns(parent) { touchNames(parent) }
            return
        }
        // A folder that holds local-only entries (`.git`) is not empty (FS-32).
        let folder: String? = locked { if case .treeDir(let f)? = try? node(parent) { return VaultIndex.join(f, name) }; return nil }
        if let folder, local.hasEntries(folder) { throw FSError(.notEmpty, name) }
        defer { if let folder { local.dropContainer(folder) } }
        let inv: [Invalidation] = try freeing { try locked {
            try settleNow(spools: .none)
            let p = try node(parent)
            guard let child = try childNode(p, name) else { throw FSError(.notFound, name) }
            // The tag a folder or tag directory stands for goes: every place that lists it (`tags/`
            // and the levels above a nested tag) must forget it, as a mkdir's places learn it.
            var gone: String?
            switch child {
            case .tagDir(let tag):
                if (catalog.tagActive[tag] ?? 0) > 0 || !catalog.tagChildren(tag).isEmpty { throw FSError(.notEmpty, "tag \(tag) is in use") }
                try forgetLocalTag(tag)
                retireDir(child)
                gone = tag
            case .treeDir(let f):
                let tag = VaultText.folderPrefix + f
                let files = try treeTable(f)?.count ?? 0
                if !catalog.subfolders(f).isEmpty || files > 0 || (catalog.tagActive[tag] ?? 0) > 0 {
                    throw FSError(.notEmpty, "folder \(f) is not empty")
                }
                try keepFolder(p)
                try forgetLocalTag(tag)
                retireDir(child)
                retireDir(.tagDir(tag))
                gone = tag
            case .linkEdgeDir(.links, let r, let et):
                guard let s = catalog.items[r] else { throw FSError(.notFound, name) }
                let out = (catalog.outEdges[r] ?? []).contains { catalog.edges[$0]?.edge.edgeType == et }
                if out { throw FSError(.notEmpty, "edges of type \(et) remain") }
                try wrap { try store.removeEdgeDir(itemID: s.id, edgeType: et) }
                catalog.edgeDirs[r]?.remove(et)
            case .item, .tagEntry, .linkEntry, .byIDEntry, .controlFile:
                throw FSError(.notDirectory, name)
            default:
                throw readOnlyOrNotPermitted(p)
            }
            return gone.map { t in Self.tagDirPlaces(t).flatMap { invalidations(($0.0, [$0.1])) } } ?? []
        } }
        touchNames(parent)
        notify(inv)
    }

    // MARK: links

    /// Finds the item a symlink target names: `…/types|archive|trash/<type>/<name>`, `…/by-id/<id>`,
    /// or `…/tags/<tag>/<name>`.
    func resolveTarget(_ target: String) throws -> Int64 {
        let comps = target.split(separator: "/").map(String.init)
        for i in stride(from: comps.count - 2, through: 0, by: -1) {
            let c = comps[i]
            if let v = StateView(rawValue: c), i + 2 < comps.count, i + 3 == comps.count,
               let r = catalog.typeTable(v, comps[i + 1])?.keyOf[comps[i + 2]] { return r }
            if c == "by-id", i + 2 == comps.count, let r = catalog.byID[comps[i + 1]] { return r }
            if c == "tags", i + 3 <= comps.count {
                let tag = comps[(i + 1)..<(comps.count - 1)].joined(separator: "/")
                if let r = catalog.tagTable(i + 3 == comps.count ? Self.tag(fromName: tag) : tag).keyOf[comps[comps.count - 1]] { return r }
            }
        }
        // A path in the vault's tree: `…/vault/<folder…>/<name>`.
        if let at = comps.lastIndex(of: Self.treeName), at + 1 < comps.count {
            let folder = comps[(at + 1)..<(comps.count - 1)].joined(separator: "/")
            if let r = try treeTable(folder)?.keyOf[comps[comps.count - 1]] { return r }
        }
        throw FSError(.notFound, "\(target) does not name an item of this mount")
    }

    public func symlink(target: String, parent: UInt64, name: String, reader: Int32 = 0) throws -> FileAttr {
        if isReplay(reader) { return try replayedCreate(parent: parent, name: name) }
        if let rel = try localTarget(parent: parent, name: name, making: true) {
            return try makeLocal(rel, parent: parent) { try local.symlink(target, rel) }
        }
        let (a, inv): (FileAttr, [Invalidation]) = try locked {
            let p = try node(parent)
            try checkName(name)
            // A scratch name takes any target, kept as it is (Emacs' lock files, FS-14).
            if ScratchNames.matches(name), let key = dirKey(p) {
                if try childNode(p, name) != nil { throw FSError(.exists, name) }
                let s = try wrap { try store.makeScratchLink(dir: key, name: name, target: target) }
                catalog.addScratch(s)
                return (try attr(.scratch(s.rowid)), [])
            }
            // In the vault's tree a symlink is what it is: a symlink item, any target (FS-31),
            // unless the remote keeps none (a MyLifeDB server, FS-34): refused, never half-done.
            if case .treeDir(let f) = p {
                if !remoteKeepsSymlinks { throw FSError(.notPermitted, "the server keeps no symbolic links") }
                try settleNow(spools: .none)
                return try makeTreeSymlink(target, in: f, named: name)
            }
            let r = try resolveTarget(target)
            try settleNow(spools: .of([.item(r)]))
            return try addLink(p, item: r)
        }
        touchNames(parent)
        notify(inv)
        return a
    }

    public func link(ino: UInt64, newParent: UInt64, newName: String) throws -> FileAttr {
        // Hard links among local-only files are the disk's own (git may make them).
        if LocalFiles.owns(ino) {
            // A FIFO, socket or device node is local-only wherever it is in the tree.
            let special = (try? local.attr(ino: ino))?.special ?? 0
            guard let rel = try localTarget(parent: newParent, name: newName, making: true)
                    ?? (special != 0 ? specialTarget(parent: newParent, name: newName) : nil) else {
                throw FSError(.crossView, "a local-only file is linked only among local-only files")
            }
            return try makeLocal(rel, parent: newParent) { try local.link(ino, to: rel) }
        }
        let (a, inv): (FileAttr, [Invalidation]) = try locked {
            try settleNow(spools: .of([try? node(ino)]))
            let p = try node(newParent)
            guard case .item(let r) = try node(ino) else { throw FSError(.notPermitted, "only item files can be linked") }
            guard case .tagDir = p else {
                if case .linkEdgeDir(.links, _, _) = p { return try addLink(p, item: r) }
                throw FSError(.notPermitted, "hard links are only for tagging (tags/<tag>/)")
            }
            let (_, inv) = try addLink(p, item: r)
            // The kernel believes in a hard link to the item; it shows as a symlink from the next lookup on.
            var a = try attr(.item(r))
            a.timeout = 0
            return (a, inv + (knownIno(p).map { [.entry(parent: $0, name: newName)] } ?? []))
        }
        touchNames(newParent, moved: (newParent, newName))
        notify(inv)
        return a
    }

    func addLink(_ p: Node, item r: Int64) throws -> (FileAttr, [Invalidation]) {
        switch p {
        case .tagDir(let tag):
            if catalog.tagsOf[r]?.contains(tag) == true { throw FSError(.exists, "already tagged \(tag)") }
            try wrap { try store.changeTags(rowid: r, adding: [tag]) }
            let inv = try refreshItemAfterTags(r)
            return (try attr(.tagEntry(tag, r)), inv)
        case .linkEdgeDir(.links, let src, let et):
            guard let s = catalog.items[src], let t = catalog.items[r] else { throw FSError(.notFound, "item") }
            let rec = try wrap { try store.createEdge(sourceID: s.id, targetID: t.id, edgeType: et) }
            catalog.addEdge(rec)
            let inv = invalidations((.linkEdgeDir(.links, src, et), []), (.linkTypeDir(.backlinks, t.type), [catalog.name(of: r) ?? ""]),
                                    (.backlinksRoot, [t.type]), (.linkItemDir(.backlinks, r), [et])) + reresolve(src)
            return (try attr(.linkEntry(.links, rec.rowid)), inv)
        default:
            throw readOnlyOrNotPermitted(p)
        }
    }
}
