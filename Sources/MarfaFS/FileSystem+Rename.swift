import Foundation
import MarfaLayout
import MarfaModel
import MarfaStore

/// `rename(2)` in every directory of the mount: moves between views, tags and folders, renamed
/// tags, editors' saves over an item (FS-13) and their scratch and backup names (FS-14).
extension FileSystem {
    public func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, noReplace: Bool = false, exchange: Bool = false,
                       reader: Int32 = 0) throws {
        if isReplay(reader) { return try replayedRename(parent: parent, name: name, newParent: newParent, newName: newName) }
        if try renameLocalOnly(parent: parent, name: name, newParent: newParent, newName: newName, noReplace: noReplace, exchange: exchange) { return }
        // A folder of the tree takes its local-only entries along (FS-32).
        let folderMove = folderBeingMoved(parent: parent, name: name, newParent: newParent, newName: newName)
        defer { if let folderMove { moveLocalFolder(folderMove, parent: parent, name: name) } }
        let w = writers.writer(reader)
        var inTree = false
        let inv: [Invalidation] = try locked {
            currentWriter = w
            defer { currentWriter = .unknown }
            let p = try node(parent), np = try node(newParent)
            guard let src = try childNode(p, name) else { throw FSError(.notFound, name) }
            if case .treeDir = p, case .treeDir = np, src.kind != .directory { inTree = true }
            try checkName(newName)
            if exchange { throw FSError(.invalid, "RENAME_EXCHANGE is not supported") }
            let dst = try childNode(np, newName)
            if dst != nil && noReplace { throw FSError(.exists, newName) }
            // A save over an item stays lean (the target settles later); any other rename queues
            // a mutation, which must follow the create or update of the file it moves (of every
            // file in a folder it moves).
            let savedOver = Self.isItemFile(dst) && (Self.isItemFile(src) || stagedKey(src) != nil)
            if p != np { try keepFolder(p) }
            if dst == nil, let moved = try moveStaged(p, name, src, np, newName) { return moved }
            // A folder's rename changes the folder of every file in it, those being written too. A
            // staged scratch file given a free item name becomes the item from the journal.
            if !savedOver && !promotesStagedScratch(src, dst, newName) {
                if src.kind == .directory { try settleNow(spools: .all) } else { try settleOnly([src, dst]) }
            }
            if let local = try renameLocal(p, name, src, np, newName, dst) { return local }
            if src == dst { return [] }
            switch (p, src, np) {
            case (.typeDir(_, let t1), .item(let r), .typeDir(let v2, let t2)):
                if t1 != t2 { throw FSError(.crossView, "changing an item's type is a copy and a delete") }
                return try moveItem(r, to: v2, newName: newName, over: dst)
            case (.tagDir, .tagEntry(_, let r), .tagDir(let tag2)):
                if case .tagEntry(_, let t)? = dst { return try saveOver(t, from: .item(r)) }
                guard case .tagDir(let tag1) = p else { return [] }
                if tag1 != tag2 { try wrap { try store.changeTags(rowid: r, adding: [tag2], removing: [tag1]) } }
                if newName != name { _ = try wrap { try store.rename(rowid: r, to: newName) } }
                return try refreshItemAfterTags(r)
            case (.tagDir, .tagEntry(_, let r), .typeDir(.types, _)):
                if case .item(let t)? = dst { return try saveOver(t, from: .item(r)) }
                throw FSError(.notPermitted, "moving a tag entry into types/ is not an operation")
            case (.typeDir(.types, _), .item(let r), .tagDir):
                if case .tagEntry(_, let t)? = dst { return try saveOver(t, from: .item(r)) }
                throw FSError(.notPermitted, "use ln -s to tag an item")
            case (.tagsRoot, .tagDir(let from), .tagsRoot), (.tagDir, .tagDir(let from), .tagsRoot),
                 (.tagsRoot, .tagDir(let from), .tagDir), (.tagDir, .tagDir(let from), .tagDir):
                var to = Self.tag(fromName: newName)
                if case .tagDir(let parent) = np { to = Self.tagPath(parent, newName) }
                return try renameTags(from, to: to, over: dst) + invalidations((p, [name]), (np, [newName]))
            case (.treeDir, .treeDir(let from), .treeDir(let f2)):
                // A folder that holds local-only entries (`.git`, a FIFO) is not empty (FS-32).
                if case .treeDir(let d)? = dst, local.hasEntries(d) { throw FSError(.notEmpty, newName) }
                let prefix = VaultText.folderPrefix
                return try renameTags(prefix + from, to: prefix + VaultIndex.join(f2, newName), over: dst.map { n in
                    if case .treeDir(let d) = n { return .tagDir(prefix + d) }
                    return n
                }) + invalidations((p, [name]), (np, [newName]))
            case (.treeDir, .item(let r), .treeDir(let f2)), (.typeDir(.types, _), .item(let r), .treeDir(let f2)):
                return try moveInTree(r, to: f2, newName: newName, over: dst)
            case (.treeDir, .item(let r), .typeDir(.types, _)), (.treeDir, .item(let r), .tagDir):
                if case .item(let t)? = dst { return try saveOver(t, from: .item(r)) }
                if case .tagEntry(_, let t)? = dst { return try saveOver(t, from: .item(r)) }
                throw FSError(.notPermitted, "an item leaves the vault's tree by a move to another folder of it")
            default:
                throw readOnlyOrNotPermitted(p == np ? p : np)
            }
        }
        touchNames(parent, newParent, moved: (newParent, newName))
        // A file renamed within the tree has its name as given, where the kernel has just moved
        // its entry: only other directories need telling.
        notify(inTree ? Self.leavingOutKernelsOwn(inv, dirs: [parent, newParent], names: [(parent, name), (newParent, newName)]) : inv)
    }

    /// Renames a tag and every tag nested under it (`a` → `b` also takes `a/x` to `b/x`) on
    /// every item that has them (a note's text follows, FS-26).
    func renameTags(_ from: String, to: String, over dst: Node?) throws -> [Invalidation] {
        if to == from { return [] }
        if to.hasPrefix(from + "/") { throw FSError(.invalid, "a tag cannot move under itself") }
        if case .tagDir(let existing)? = dst, (catalog.tagActive[existing] ?? 0) > 0 || !catalog.tagChildren(existing).isEmpty {
            throw FSError(.notEmpty, "tag \(to) is in use")
        }
        // The directories keep their numbers (FS-31) before anything is told to forget them.
        moveDirs(tag: from, to: to)
        var inv: [Invalidation] = []
        for t in catalog.allTags().filter({ $0 == from || $0.hasPrefix(from + "/") }).sorted() {
            let nt = to + t.dropFirst(from.count)
            try Self.checkTag(nt)
            let rows = try wrap { try store.renameTag(t, to: nt) }
            for r in rows { inv += try refreshItemAfterTags(r) }
            if catalog.localTags.remove(t) != nil || rows.isEmpty { catalog.localTags.insert(nt) }
            catalog.tagTables.removeValue(forKey: t)
            catalog.tagTables.removeValue(forKey: nt)
            for (d, n) in Self.tagDirPlaces(t) + Self.tagDirPlaces(nt) { inv += invalidations((d, [n])) }
        }
        return inv
    }

    /// An item moved into a folder of the vault's tree (FS-27): its `folder:` tag names the new
    /// folder, its name the new name. Onto another item: an editor's save (FS-13).
    func moveInTree(_ r: Int64, to folder: String, newName: String, over dst: Node?) throws -> [Invalidation] {
        if case .item(let t)? = dst, itemKind(t) != itemKind(r) { return try replaceKind(t) + moveInTree(r, to: folder, newName: newName, over: nil) }
        if case .item(let t)? = dst { return try saveOver(t, from: .item(r)) }
        guard catalog.items[r] != nil else { throw FSError(.notFound, "item \(r)") }
        let folders = (catalog.tagsOf[r] ?? []).filter { $0.hasPrefix(VaultText.folderPrefix) }
        let adding: Set<String> = folder.isEmpty ? [] : [VaultText.folderPrefix + folder]
        let moves = adding != folders
        let shown = try treeTable(catalog.folder(of: r))?.nameOf[r] ?? catalog.name(of: r)
        if !moves && newName == shown { return try refreshItem(r) }
        // One transaction, which hands the catalog the item as it leaves it. The folder's tag is
        // changed against the tags the store has (the catalog may not have seen the note's own yet).
        let facts = try wrap {
            try store.move(rowid: r, tags: moves ? (adding, folders.subtracting(adding)) : nil, fileName: newName == shown ? nil : newName)
        }
        return try refreshItem(r, written: facts)
    }

    /// A new file that has no row yet, renamed or moved to a free name in the same kind of
    /// directory (`rsync`'s temporary file renamed to its name, a file made and moved at once,
    /// FS-32): the journal records the move; nothing settles and nothing is queued, so the file
    /// settles once, under its final name, folder and type. nil for any other rename.
    func moveStaged(_ p: Node, _ name: String, _ src: Node, _ np: Node, _ newName: String) throws -> [Invalidation]? {
        guard case .item(let r) = src, catalog.createdHere.contains(r), !ScratchNames.matches(newName) else { return nil }
        let staged = store.isNewlyStaged(StagedKey(.item, r))
        // Committed, it moves only while not settled: with no file written since everything last
        // settled, it is settled (no write transaction to find that out).
        if !staged && !settler.mayHaveWrittenFiles { return nil }
        if let sk = dirKey(p), catalog.parked[sk]?[name] != nil { return nil }
        var tags = catalog.tagsOf[r] ?? []
        let type: String
        switch (p, np) {
        case (.treeDir, .treeDir(let f2)):
            tags = tags.filter { !$0.hasPrefix(VaultText.folderPrefix) }
            if !f2.isEmpty { tags.insert(VaultText.folderPrefix + f2) }
            // Nothing was sent yet: the file is what its final name says (FS-27).
            type = Self.treeType(newName)
        case (.typeDir(.types, let t1), .typeDir(.types, let t2)) where t1 == t2:
            type = t1
        default:
            return nil
        }
        // Still staged: the journal records the move. Committed meanwhile but not settled: its row
        // moves, if nothing of it is queued (a blob being spooled is not moved so).
        let moved = try wrap {
            staged ? try store.moveStaged(rowid: r, type: type, fileName: newName, tags: tags.sorted())
                : try store.moveUnsent(rowid: r, type: type, fileName: newName, tags: tags.sorted())
        }
        guard let s = moved else { return nil }
        return try refreshItem(r, .made(s, tags))
    }

    /// A symlink renamed over a file, or a file over a symlink: not an editor's save but a
    /// replacement (FS-31): the item the name held goes to the trash.
    func replaceKind(_ t: Int64) throws -> [Invalidation] {
        try settleNow(spools: .none)
        let facts = try wrap { try store.setStateReadingFacts(rowid: t, .trashed) }
        return try refreshItem(t, written: facts)
    }

    /// Whether a rename gives a scratch file that is still staged a free item name: it becomes the
    /// item from the journal (`Store.promoteStagedScratch`), with nothing settled first.
    func promotesStagedScratch(_ src: Node, _ dst: Node?, _ newName: String) -> Bool {
        guard case .scratch = src, dst == nil, !ScratchNames.matches(newName) else { return false }
        return stagedKey(src) != nil
    }

    /// Renames that involve scratch files and backup names (FS-13, FS-14); nil for the others.
    func renameLocal(_ p: Node, _ name: String, _ src: Node, _ np: Node, _ newName: String, _ dst: Node?) throws -> [Invalidation]? {
        let sk = dirKey(p), dk = dirKey(np)
        // A backup name moved: back to the original name (an editor undoing a failed save), or to
        // another backup name. Anything else renames the item itself, below.
        if let sk, let pk = catalog.parked[sk]?[name] {
            catalog.parked[sk]?[name] = nil
            if np == p && newName == pk.originalName { return invalidations((p, [name, newName])) }
            if let dk, ScratchNames.matches(newName) {
                catalog.parked[dk, default: [:]][newName] = pk
                return invalidations((p, [name]), (np, [newName]))
            }
            return nil
        }
        if case .scratch(let sid) = src {
            guard let dk else { throw readOnlyOrNotPermitted(np) }
            if ScratchNames.matches(newName) {
                if case .item = dst { throw FSError(.notPermitted, "a scratch name cannot replace an item") }
                let moved = try wrap { try store.renameScratch(sid, dir: dk, name: newName) }
                if let old = catalog.scratchByDir[dk]?[newName], old != sid { catalog.removeScratch(old) }
                catalog.addScratch(moved)
                return invalidations((p, [name]), (np, [newName]))
            }
            let target: Int64
            var inv: [Invalidation]
            if case .item(let t)? = dst ?? nil {
                // An editor's save through a scratch name: the item takes the bytes (FS-13).
                inv = try saveOver(t, from: .scratch(sid))
                target = t
            } else {
                let new = try newItem(in: np, named: newName)
                let stored = try wrap { try store.promoteStagedScratch(sid, as: new) ?? store.promoteScratch(sid, as: new) }
                target = stored.rowid
                // A file made through this mount (a copy in progress, if given an item's id).
                catalog.createdHere.insert(stored.rowid)
                // Made settled: its tags are those its text holds as well as its folder's, read
                // back with its links (`.made` with `new.tags` lost the text's).
                inv = try refreshItem(stored.rowid)
                if let bits = catalog.scratchModes[sid] { try keepMode(stored.rowid, bits) }
                inv += applyScratchXattrs(sid, to: stored.rowid)
            }
            catalog.removeScratch(sid)
            catalog.scratchAliases[sid] = target
            return inv + invalidations((p, [name]), (np, [newName]))
        }
        // An item renamed to a backup name in its directory: the name is parked, the item stays.
        if case .item(let r) = src, let dk, np == p, ScratchNames.matches(newName) {
            if case .scratch(let old)? = dst { try forgetScratch(old) }
            catalog.parked[dk, default: [:]][newName] = Catalog.Parked(item: r, originalName: name)
            return invalidations((p, [name, newName]))
        }
        return nil
    }

    func moveItem(_ r: Int64, to v2: StateView, newName: String, over dst: Node?) throws -> [Invalidation] {
        if case .item(let t)? = dst, itemKind(t) != itemKind(r) { return try replaceKind(t) + moveItem(r, to: v2, newName: newName, over: nil) }
        if case .item(let t)? = dst { return try saveOver(t, from: .item(r)) }
        guard let s = catalog.items[r] else { throw FSError(.notFound, "item \(r)") }
        if StateView.of(s.state) != v2 { _ = try wrap { try store.setState(rowid: r, v2.state) } }
        if newName != catalog.name(of: r) { _ = try wrap { try store.rename(rowid: r, to: newName) } }
        return try refreshItem(r)
    }

    /// Removes a scratch file: from the journal if it never left it (an editor's swap file), else
    /// from the store.
    func forgetScratch(_ s: Int64) throws {
        if let k = stagedKey(.scratch(s)) { try wrap { try store.dropStaged(k) } } else { try wrap { try store.deleteScratch(s) } }
        catalog.removeScratch(s)
    }

    static func isItemFile(_ n: Node?) -> Bool {
        switch n {
        case .item?, .tagEntry?: return true
        default: return false
        }
    }

    /// An editor's save (FS-13): item `t` takes the bytes of `source` and keeps its identity
    /// (where the bytes go is the store's business: `Store.saveOver`); returns what the kernel
    /// must forget.
    func saveOver(_ t: Int64, from source: Store.SaveSource) throws -> [Invalidation] {
        var inv: [Invalidation] = []
        // What a descriptor open on the target's file keeps (FS-31), before its bytes change; the
        // mode the new file has, which the name has from now on, as on a disk.
        let held = heldFile(t)
        var newMode: UInt16?, newOwner = Store.Owner()
        if case .item(let r) = source {
            newMode = catalog.stagedModes.removeValue(forKey: r) ?? catalog.items[r].map { Store.permissions($0.mode, default: Store.defaultFileMode) }
            newOwner = catalog.owners[r] ?? Store.Owner()
        }
        // Its base is what the renaming program saw of the item (FS-29).
        if let f = try wrap({ try store.saveOver(t, from: source, by: currentWriter) }) {
            // A new file saved over the item never gets a row of its own, and the item's names,
            // tags and state stay as they are until it settles.
            if case .item(let r) = source { inv += try refreshItem(r, .removed) }
            wroteUnsettled(t, size: f.size, mtimeNs: f.mtimeNs)
            inv += knownIno(.item(t)).map { [.inode($0)] } ?? []
        } else if case .item(let r) = source {
            settler.noteWrite()
            inv += try refreshItem(r) + refreshItem(t, .content)
        } else {
            inv += try refreshItem(t, .content) + followStore(store.takeAnnouncements())
        }
        // The name now holds the renamed file: the item takes its inode (a new file's, which is
        // no item of its own now; else a new number), and the old inode keeps the old bytes.
        guard case .item(let r) = source else {
            try renumber(t, number: nil, held: held)
            return inv
        }
        if let newMode { try keepMode(t, newMode) }
        // And the owner.
        try keepOwner(t, newOwner)
        if catalog.items[r] == nil {
            // The source is no item of its own any more: its inode (its rowid's, or the number it
            // took when it was made again) is the target's now.
            catalog.aliases[r] = t
            try renumber(t, number: catalog.itemNumber.removeValue(forKey: r) ?? r, held: held)
        } else {
            try renumber(t, number: nil, held: held)
        }
        // The kernel moved the source's dentry onto the target's name: make it look the name up again.
        if let (dir, name) = parentAndName(.item(t)), let p = knownIno(dir) { inv.append(.entry(parent: p, name: name)) }
        for tag in catalog.tagsOf[t] ?? [] {
            if let p = knownIno(.tagDir(tag)), let n = catalog.tagTables[tag]?.nameOf[t] { inv.append(.entry(parent: p, name: n)) }
        }
        return inv
    }
}
