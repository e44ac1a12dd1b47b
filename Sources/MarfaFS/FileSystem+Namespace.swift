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
        if name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw FSError(.badName, "control characters in a name")
        }
    }

    static func checkTag(_ tag: String) throws {
        // A folder's tag may hold a comma (a vault's folder `Notes, misc`); other tags are listed
        // comma-separated in `user.marfa.tags`.
        let commaOK = tag.hasPrefix(VaultText.folderPrefix)
        if tag.isEmpty || tag.count > 1024 || (tag.contains(",") && !commaOK) || tag.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw FSError(.invalid, "not a valid tag: \(tag)")
        }
    }

    func readOnlyOrNotPermitted(_ n: Node) -> FSError {
        switch n {
        case .backlinksRoot, .byIDRoot, .linkTypeDir(true, _), .linkItemDir(true, _), .linkEdgeDir(true, _, _), .linkEntry(true, _), .byIDEntry:
            return FSError(.readOnly, "backlinks/ and by-id/ are read-only")
        default:
            return FSError(.notPermitted, "not an operation this directory supports")
        }
    }

    // MARK: create

    public func create(parent: UInt64, name: String, reader: Int32 = 0) throws -> FileAttr {
        if isReplay(reader) { return try replayedCreate(parent: parent, name: name) }
        let (a, inv): (FileAttr, [Invalidation]) = try locked {
            let p = try node(parent)
            try checkName(name)
            if try childNode(p, name) != nil { throw FSError(.exists, name) }
            if let local = try createLocal(p, name) { return local }
            let new = try newItem(in: p, named: name)
            // Staged: in memory and the journal until it settles or something needs its row.
            let summary = try wrap { try store.stageItem(new) }
            catalog.createdHere.insert(summary.rowid)
            settler.noteWrite()
            let inv = try refreshItem(summary.rowid, known: (summary, Set(new.tags)))
            var a = try attr(.item(summary.rowid))
            if case .tagDir = p {
                // The kernel now holds a regular file under this name; the entry is a symlink from
                // the next lookup on, so the kernel must not keep the name (the inode's attributes hold).
                a.entryTimeout = 0
                return (a, inv)
            }
            // The kernel knows what it just created in `parent`: only other directories need telling.
            return (a, inv.filter {
                switch $0 {
                case .entry(let pp, _), .inode(let pp): return pp != parent
                case .replay: return true
                }
            })
        }
        notify(inv)
        return a
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
            try commitIfStaged(.item(pk.item))
            catalog.parked[key]?[backup] = nil
            // The backup name becomes a scratch file with the bytes as they were (vim's `:set backup`
            // keeps it); the new file starts empty, and the item keeps its id, inode, tags, edges
            // and attributes.
            let copy = try wrap { try store.backupItem(pk.item, dir: key, name: backup) }
            catalog.addScratch(copy)
            let (size, mtime) = try wrap { try store.truncateUnsettled(rowid: pk.item, size: 0) }
            wroteUnsettled(pk.item, size: size, mtimeNs: mtime)
            return (try attr(.item(pk.item)), invalidations((p, [backup])))
        }
        if let (r, at) = catalog.unlinked[key]?.removeValue(forKey: name), Date().timeIntervalSince(at) < Self.reattachWindow,
           catalog.items[r]?.state == .trashed, catalog.name(of: r) == name {
            // Removed and made again at once under the same name (`tar -x` over a file, a tool
            // that deletes before it writes): the item comes back from the trash, empty, with its
            // id, inode, tags, edges and attributes (FS-28).
            try wrap { try store.untrash(rowid: r) }
            let (size, mtime) = try wrap { try store.truncateUnsettled(rowid: r, size: 0) }
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
        let (a, inv): (FileAttr, [Invalidation]) = try locked {
            try settleNow()
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
                try wrap { try store.addLocalTag(tag) }
                catalog.localTags.insert(tag)
                let inv = Self.tagDirPlaces(tag).flatMap { invalidations(($0.0, [$0.1])) }
                if case .treeDir(let f) = p { return (try attr(.treeDir(VaultIndex.join(f, name))), inv) }
                return (try attr(.tagDir(tag)), inv)
            case .linkItemDir(false, let r):
                guard let s = catalog.items[r] else { throw FSError(.notFound, name) }
                try wrap { try store.addEdgeDir(itemID: s.id, edgeType: name) }
                catalog.edgeDirs[r, default: []].insert(name)
                let inv = invalidations((.linkTypeDir(false, s.type), [catalog.name(of: r) ?? ""]), (.linksRoot, [s.type]))
                return (try attr(.linkEdgeDir(false, r, name)), inv)
            default:
                throw readOnlyOrNotPermitted(p)
            }
        }
        notify(inv)
        return a
    }

    // MARK: remove

    public func unlink(parent: UInt64, name: String, reader: Int32 = 0) throws {
        if isReplay(reader) { return try replayedRemove(parent: parent, name: name) }
        let inv: [Invalidation] = try freeing { try locked {
            let p = try node(parent)
            // A scratch file is local: removing it queues nothing, so nothing settles first.
            if let key = dirKey(p), catalog.parked[key]?[name] == nil, let s = catalog.scratchByDir[key]?[name] {
                try forgetScratch(s)
                return []
            }
            try settleNow(spools: false)
            if let key = dirKey(p), let pk = catalog.parked[key]?[name] {
                catalog.parked[key]?[name] = nil
                // An item renamed to a backup name and removed: it goes to the trash.
                _ = try wrap { try store.setState(rowid: pk.item, .trashed) }
                return try refreshItem(pk.item) + invalidations((p, [name, pk.originalName]))
            }
            guard let child = try childNode(p, name) else { throw FSError(.notFound, name) }
            switch (p, child) {
            case (.typeDir(.trash, _), .item(let r)):
                // Removed from the trash: purged, its space given back (FS-28).
                try wrap { _ = try store.purge(rowid: r) }
                return try refreshItem(r, removed: true)
            case (.typeDir, .item(let r)), (.treeDir, .item(let r)):
                _ = try wrap { try store.setState(rowid: r, .trashed) }   // FS §4: unlink moves to trash
                if let key = dirKey(p) { catalog.unlinked[key, default: [:]][name] = (r, Date()) }
                return try refreshItem(r)
            case (.tagDir(let tag), .tagEntry(_, let r)):
                var tags = catalog.tagsOf[r] ?? []
                tags.remove(tag)
                try wrap { try store.setTags(rowid: r, tags) }
                return try refreshItemAfterTags(r)
            case (.linkEdgeDir(false, let r, let edgeType), .linkEntry(false, let e)):
                if Catalog.isDerived(e) { throw FSError(.notPermitted, "this link is written in the note's text: edit the text to remove it") }
                try wrap { try store.deleteEdge(rowid: e) }
                let far = catalog.edges[e].flatMap { catalog.byID[$0.edge.targetID] }
                catalog.removeEdge(e)
                var inv = invalidations((.linkEdgeDir(false, r, edgeType), [name])) + reresolve(r)
                if let far, let s = catalog.items[far] {
                    inv += invalidations((.linkTypeDir(true, s.type), [catalog.name(of: far) ?? ""]), (.backlinksRoot, [s.type]),
                                         (.linkEdgeDir(true, far, edgeType), []), (.linkItemDir(true, far), [edgeType]))
                }
                return inv
            default:
                if case .controlFile = child { throw FSError(.notPermitted, "control files cannot be removed") }
                throw readOnlyOrNotPermitted(p)
            }
        } }
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

    public func rmdir(parent: UInt64, name: String, reader: Int32 = 0) throws {
        if isReplay(reader) { return try replayedRemove(parent: parent, name: name) }
        try freeing { try locked {
            try settleNow(spools: false)
            let p = try node(parent)
            guard let child = try childNode(p, name) else { throw FSError(.notFound, name) }
            switch child {
            case .tagDir(let tag):
                if !(catalog.tagMembers[tag] ?? []).isEmpty || !catalog.tagChildren(tag).isEmpty { throw FSError(.notEmpty, "tag \(tag) is in use") }
                try wrap { try store.removeLocalTag(tag) }
                catalog.localTags.remove(tag)
            case .treeDir(let f):
                let tag = VaultText.folderPrefix + f
                let files = try treeTable(f)?.count ?? 0
                if !catalog.subfolders(f).isEmpty || files > 0 || !(catalog.tagMembers[tag] ?? []).isEmpty {
                    throw FSError(.notEmpty, "folder \(f) is not empty")
                }
                try wrap { try store.removeLocalTag(tag) }
                catalog.localTags.remove(tag)
            case .linkEdgeDir(false, let r, let et):
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
        } }
    }

    // MARK: rename

    public func rename(parent: UInt64, name: String, newParent: UInt64, newName: String, noReplace: Bool = false, exchange: Bool = false,
                       reader: Int32 = 0) throws {
        if isReplay(reader) { return try replayedRename(parent: parent, name: name, newParent: newParent, newName: newName) }
        let inv: [Invalidation] = try locked {
            let p = try node(parent), np = try node(newParent)
            guard let src = try childNode(p, name) else { throw FSError(.notFound, name) }
            try checkName(newName)
            if exchange { throw FSError(.invalid, "RENAME_EXCHANGE is not supported") }
            let dst = try childNode(np, newName)
            if dst != nil && noReplace { throw FSError(.exists, newName) }
            // A save over an item stays lean (the target settles later); any other rename queues
            // a mutation, which must follow the creates and updates of written files.
            let savedOver = Self.isItemFile(dst) && (Self.isItemFile(src) || stagedKey(src) != nil)
            if !savedOver { try settleNow() }
            if let local = try renameLocal(p, name, src, np, newName, dst) { return local }
            if src == dst { return [] }
            switch (p, src, np) {
            case (.typeDir(_, let t1), .item(let r), .typeDir(let v2, let t2)):
                if t1 != t2 { throw FSError(.crossView, "changing an item's type is a copy and a delete") }
                return try moveItem(r, to: v2, newName: newName, over: dst)
            case (.tagDir, .tagEntry(_, let r), .tagDir(let tag2)):
                if case .tagEntry(_, let t)? = dst { return try saveOver(t, from: .item(r)) }
                guard case .tagDir(let tag1) = p else { return [] }
                var tags = catalog.tagsOf[r] ?? []
                if tag1 != tag2 { tags.remove(tag1); tags.insert(tag2); try wrap { try store.setTags(rowid: r, tags) } }
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
        notify(inv)
    }

    /// Renames a tag and every tag nested under it (`a` → `b` also takes `a/x` to `b/x`) on
    /// every item that has them (a note's text follows, FS-26).
    func renameTags(_ from: String, to: String, over dst: Node?) throws -> [Invalidation] {
        if to == from { return [] }
        if to.hasPrefix(from + "/") { throw FSError(.invalid, "a tag cannot move under itself") }
        if case .tagDir(let existing)? = dst, !(catalog.tagMembers[existing] ?? []).isEmpty || !catalog.tagChildren(existing).isEmpty {
            throw FSError(.notEmpty, "tag \(to) is in use")
        }
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
        if case .item(let t)? = dst { return try saveOver(t, from: .item(r)) }
        guard catalog.items[r] != nil else { throw FSError(.notFound, "item \(r)") }
        let tags = catalog.tagsOf[r] ?? []
        var next = tags.filter { !$0.hasPrefix(VaultText.folderPrefix) }
        if !folder.isEmpty { next.insert(VaultText.folderPrefix + folder) }
        if next != tags { try wrap { try store.setTags(rowid: r, next) } }
        let shown = try treeTable(catalog.folder(of: r))?.nameOf[r] ?? catalog.name(of: r)
        if newName != shown { _ = try wrap { try store.rename(rowid: r, to: newName) } }
        return try refreshItem(r)
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
                let stored = try wrap { try store.promoteScratch(sid, as: new) }
                target = stored.rowid
                inv = try refreshItem(stored.rowid, known: (stored.summary, Set(new.tags)))
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

    /// Writes the staged files to the store if one of `nodes` is among them (its row is needed now).
    func commitIfStaged(_ nodes: Node...) throws {
        if nodes.contains(where: { stagedKey($0) != nil }) { try wrap { try store.commitStaged() } }
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
        if let f = try wrap({ try store.saveOver(t, from: source) }) {
            // A new file saved over the item never gets a row of its own, and the item's names,
            // tags and state stay as they are until it settles.
            if case .item(let r) = source { inv += try refreshItem(r, removed: true) }
            wroteUnsettled(t, size: f.size, mtimeNs: f.mtimeNs)
            inv += knownIno(.item(t)).map { [.inode($0)] } ?? []
        } else if case .item(let r) = source {
            settler.noteWrite()
            inv += try refreshItem(r) + refreshItem(t, contentChanged: true)
        } else {
            inv += try refreshItem(t, contentChanged: true) + followStore(store.takeAnnouncements())
        }
        guard case .item(let r) = source else { return inv }
        if catalog.items[r] == nil { catalog.aliases[r] = t }
        // The kernel moved the source's dentry onto the target's name: make it look the name up again.
        if let (dir, name) = parentAndName(.item(t)), let p = knownIno(dir) { inv.append(.entry(parent: p, name: name)) }
        for tag in catalog.tagsOf[t] ?? [] {
            if let p = knownIno(.tagDir(tag)), let n = catalog.tagTables[tag]?.nameOf[t] { inv.append(.entry(parent: p, name: n)) }
        }
        return inv
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
            try settleNow()
            let r = try resolveTarget(target)
            return try addLink(p, item: r)
        }
        notify(inv)
        return a
    }

    public func link(ino: UInt64, newParent: UInt64, newName: String) throws -> FileAttr {
        let (a, inv): (FileAttr, [Invalidation]) = try locked {
            try settleNow()
            let p = try node(newParent)
            guard case .item(let r) = try node(ino) else { throw FSError(.notPermitted, "only item files can be linked") }
            guard case .tagDir = p else {
                if case .linkEdgeDir(false, _, _) = p { return try addLink(p, item: r) }
                throw FSError(.notPermitted, "hard links are only for tagging (tags/<tag>/)")
            }
            let (_, inv) = try addLink(p, item: r)
            // The kernel believes in a hard link to the item; it shows as a symlink from the next lookup on.
            var a = try attr(.item(r))
            a.timeout = 0
            return (a, inv + (knownIno(p).map { [.entry(parent: $0, name: newName)] } ?? []))
        }
        notify(inv)
        return a
    }

    func addLink(_ p: Node, item r: Int64) throws -> (FileAttr, [Invalidation]) {
        switch p {
        case .tagDir(let tag):
            var tags = catalog.tagsOf[r] ?? []
            if tags.contains(tag) { throw FSError(.exists, "already tagged \(tag)") }
            tags.insert(tag)
            try wrap { try store.setTags(rowid: r, tags) }
            let inv = try refreshItemAfterTags(r)
            return (try attr(.tagEntry(tag, r)), inv)
        case .linkEdgeDir(false, let src, let et):
            guard let s = catalog.items[src], let t = catalog.items[r] else { throw FSError(.notFound, "item") }
            let rec = try wrap { try store.createEdge(sourceID: s.id, targetID: t.id, edgeType: et) }
            catalog.addEdge(rec)
            let inv = invalidations((.linkEdgeDir(false, src, et), []), (.linkTypeDir(true, t.type), [catalog.name(of: r) ?? ""]),
                                    (.backlinksRoot, [t.type]), (.linkItemDir(true, r), [et])) + reresolve(src)
            return (try attr(.linkEntry(false, rec.rowid)), inv)
        default:
            throw readOnlyOrNotPermitted(p)
        }
    }
}
