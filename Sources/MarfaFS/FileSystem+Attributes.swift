import Foundation
import MarfaModel
import MarfaStore

/// What `stat` shows besides names and sizes, and `setattr` (FS-31): permission bits (a file's are
/// kept with its item and synced, a folder's are kept locally), the owner and group (the mount's
/// user's until a `chown` or another user's create: kept locally, `Store+Owners`), and the three
/// times — mtime kept with the file (FS-28), atime and ctime kept by the mount while it runs
/// (after a remount: the mtime).
extension FileSystem {
    /// A change of attributes (`setattr`): what is nil stays.
    public struct AttrChange: Sendable {
        public var size: Int64?
        public var mtimeNs: Int64?
        public var atimeNs: Int64?
        public var mode: UInt16?
        public var uid: UInt32?
        public var gid: UInt32?
        public init(size: Int64? = nil, mtimeNs: Int64? = nil, atimeNs: Int64? = nil, mode: UInt16? = nil, uid: UInt32? = nil, gid: UInt32? = nil) {
            self.size = size; self.mtimeNs = mtimeNs; self.atimeNs = atimeNs; self.mode = mode; self.uid = uid; self.gid = gid
        }
    }

    func attr(_ n: Node) throws -> FileAttr {
        let i = ino(n)
        var a = try baseAttr(n, i)
        switch n {
        case .item(let r):
            a.mode = a.kind == .symlink ? 0 : catalog.stagedModes[r].map { Store.storedMode($0, default: Store.defaultFileMode) ?? 0 } ?? catalog.items[r]?.mode ?? 0
            if let o = catalog.owners[r] { a.uid = o.uid; a.gid = o.gid }
        case .treeDir(let f):
            a.mode = catalog.dirModes[f] ?? 0
            if let o = catalog.dirOwners[f] { a.uid = o.uid; a.gid = o.gid }
        case .detached(let d): a.mode = catalog.detached[d]?.mode ?? 0
        case .scratch(let id): a.mode = catalog.scratchModes[id].map { Store.storedMode($0, default: Store.defaultFileMode) ?? 0 } ?? 0
        default: break
        }
        a.atimeNs = catalog.atimes[i]
        a.ctimeNs = catalog.ctimes[i].map { max($0, a.mtimeNs) }
        return a
    }

    static var nowNs: Int64 { Int64(Date().timeIntervalSince1970 * 1e9) }

    /// Node `n` changed (its bytes, mode, times, names): its ctime is now.
    func changed(_ n: Node) {
        catalog.ctimes[ino(n)] = Self.nowNs
    }

    /// A name in directory `p` came, went or moved: the directory's mtime and ctime are now (kept
    /// while mounted; a time set on it with `touch`, `rsync -a` stays across mounts).
    func namesChanged(in p: Node) {
        guard let key = dirKey(p) else { return }
        let now = Self.nowNs
        catalog.dirTimes[key] = now
        catalog.dirtyDirTimes.insert(key)
        if let i = knownIno(p) { catalog.ctimes[i] = now }
    }

    /// Writes the directory times that moved with their names (as settling does: when the mount
    /// is quiet, and at unmount), so `rsync -a` finds them after a remount.
    func saveDirTimes() {
        if catalog.dirtyDirTimes.isEmpty { return }
        let times = catalog.dirtyDirTimes.reduce(into: [String: Int64]()) { $0[$1] = catalog.dirTimes[$1] }
        catalog.dirtyDirTimes = []
        do { try store.setDirTimes(times) } catch { log.warning("directory times not saved", metadata: ["error": "\(error)"]) }
    }

    /// After a namespace operation: the directories whose names changed, and the node that moved
    /// or gained a name (its ctime).
    func touchNames(_ parents: UInt64..., moved: (UInt64, String)? = nil) {
        locked {
            for p in parents { if let n = try? node(p) { namesChanged(in: n) } }
            if let (p, name) = moved, let dir = try? node(p), let n = try? childNode(dir, name) { changed(n) }
        }
    }

    /// Changes a file's size (truncate), times (`touch -d`, `rsync -a`: FS-28), permission bits and
    /// owner (FS-31). An item's `updated_at` stays what it was.
    public func setattr(_ ino: UInt64, size: Int64? = nil, mtimeNs: Int64? = nil, reader: Int32 = 0) throws -> FileAttr {
        try setattr(ino, AttrChange(size: size, mtimeNs: mtimeNs), reader: reader)
    }

    public func setattr(_ ino: UInt64, _ c: AttrChange, reader: Int32 = 0) throws -> FileAttr {
        if LocalFiles.owns(ino) { return try local.setattr(ino, c) }
        // A replayed change (FS-25): already applied; the request only makes the kernel tell watchers.
        if isReplay(reader) { return try getattr(ino) }
        if try locked({ Self.isHistory(try node(ino)) }) { throw FSError(.readOnly, "history/ is read-only") }
        // The kernel has checked that the caller may (`default_permissions`), before anything changes.
        if c.uid != nil || c.gid != nil { try setOwner(ino, uid: c.uid, gid: c.gid) }
        if let size = c.size {
            guard size >= 0 else { throw FSError(.invalid, "negative size") }
            try changeFile(ino, reaching: size, .truncate(size: size), by: reader)
        }
        if let m = c.mode { try setMode(ino, m) }
        if let ns = c.mtimeNs { try setMtime(ino, ns) }
        try locked {
            let n = try node(ino)
            if let ns = c.atimeNs { catalog.atimes[self.ino(n)] = ns }
            changed(n)
        }
        return try getattr(ino)
    }

    /// A `chown` (FS-31): an item's or folder's owner and group are kept (the mount's own as nil);
    /// the views' directories and symlinks belong to the mount's user (another is EPERM).
    func setOwner(_ ino: UInt64, uid u: UInt32?, gid g: UInt32?) throws {
        try locked {
            let n = try node(ino)
            func merged(_ o: Store.Owner?) -> Store.Owner {
                let nu = u.map { $0 == uid ? nil : $0 } ?? o?.uid, ng = g.map { $0 == gid ? nil : $0 } ?? o?.gid
                return Store.Owner(uid: nu, gid: ng)
            }
            switch n {
            case .item(let r):
                guard catalog.items[r] != nil else { throw FSError(.notFound, "item \(r)") }
                try keepOwner(r, merged(catalog.owners[r]))
            case .treeDir(let f):
                let o = merged(catalog.dirOwners[f])
                if o == (catalog.dirOwners[f] ?? Store.Owner()) { return }
                try wrap { try store.setTreeDirOwner(f, ino: self.ino(n), o) }
                catalog.dirOwners[f] = o.isDefault ? nil : o
                settler.wake()
            default:
                if let u, u != uid { throw FSError(.notPermitted, "this directory belongs to uid \(uid)") }
                if let g, g != gid { throw FSError(.notPermitted, "this directory belongs to gid \(gid)") }
            }
        }
    }

    /// Item `r`'s owner and group are `o` (with the lock held): stored unless they already are.
    func keepOwner(_ r: Int64, _ o: Store.Owner) throws {
        guard o != (catalog.owners[r] ?? Store.Owner()), let id = catalog.items[r]?.id else { return }
        try wrap { try store.setOwner(itemID: id, o) }
        catalog.owners[r] = o.isDefault ? nil : o
    }

    func setMode(_ ino: UInt64, _ mode: UInt16) throws {
        try locked {
            let n = try node(ino)
            switch n {
            case .item(let r):
                try keepMode(r, mode & 0o7777)
            case .treeDir(let f):
                try wrap { try store.setTreeDirMode(f, ino: self.ino(n), mode: mode) }
                catalog.dirModes[f] = Store.storedMode(mode, default: Store.defaultDirMode)
                settler.wake()
            case .detached(let d):
                catalog.detached[d]?.mode = Store.storedMode(mode, default: Store.defaultFileMode) ?? 0
            case .scratch(let id):
                catalog.scratchModes[id] = mode & 0o7777
            default:
                // Views, tags and links show fixed modes; a change is accepted and not kept (FS-16).
                break
            }
        }
    }

    /// Item `r`'s permission bits are `bits` (with the lock held). A file just made has no row
    /// yet: its bits wait with it and are stored when it settles (`applyStagedModes`), so a
    /// temporary file's `creat(0600)` and `chmod` cost nothing.
    func keepMode(_ r: Int64, _ bits: UInt16) throws {
        if let s = catalog.items[r], Store.isSymlinkMode(s.mode) { return }   // a symlink's mode is its kind's
        let stored: UInt16 = Store.storedMode(bits, default: Store.defaultFileMode) ?? 0
        if catalog.stagedModes[r] == nil, catalog.items[r]?.mode == stored { return }
        catalog.items[r]?.mode = stored
        if store.isNewlyStaged(StagedKey(.item, r)) { catalog.stagedModes[r] = bits; return }
        catalog.stagedModes[r] = nil
        try wrap { try store.setMode(rowid: r, mode: bits) }
    }

    /// Stores the permission bits of files that have a row now (after a commit, with the lock held).
    func applyStagedModes() {
        var modes: [(rowid: Int64, mode: UInt16)] = []
        for (r, bits) in catalog.stagedModes where !store.isNewlyStaged(StagedKey(.item, r)) {
            catalog.stagedModes[r] = nil
            guard catalog.items[r] != nil else { continue }
            modes.append((r, bits))
            catalog.items[r]?.mode = Store.storedMode(bits, default: Store.defaultFileMode) ?? 0
        }
        if modes.isEmpty { return }
        do { try store.setStagedModes(modes) } catch { log.warning("files' modes were not kept", metadata: ["items": "\(modes.map(\.rowid))", "error": "\(error)"]) }
    }

    func setMtime(_ ino: UInt64, _ ns: Int64) throws {
        try locked {
            let n = try node(ino)
            switch n {
            case .item(let r):
                let f = try wrap { try store.changeFile(.item(r, type: catalog.items[r]?.type), .mtime(ns: ns)) }
                catalog.items[r]?.mtimeNs = f.mtimeNs
            case .scratch(let id):
                if let s = try wrap({ try store.changeFile(.scratch(id), .mtime(ns: ns)) }).scratch { catalog.addScratch(s) }
            case .detached(let d):
                try changeDetached(d, .mtime(ns: ns))
            default:
                // A type, tag or vault directory keeps the time set on it; other directories and
                // links show the mount's. It is stored as the times its names move are: when the
                // mount is quiet (`saveDirTimes`), and at unmount. A store write here would wait
                // for the settler's transaction with the core's lock held (`rsync -a` sets every
                // folder's time, twice).
                guard let key = dirKey(n) else { break }
                catalog.dirTimes[key] = ns
                catalog.dirtyDirTimes.insert(key)
                settler.noteWrite()
            }
        }
    }

    /// The blob to fetch before `change` of item `r` (FS-11), as its first read would: a change
    /// that builds on a blob's bytes (a write, a truncate to a size other than nothing) needs them,
    /// and this mount never fetched them (offline the change then fails with EIO and says why);
    /// nil for anything else. Call with the lock held.
    func uncachedBlob(_ r: Int64, _ change: Store.StagedChange) -> String? {
        guard fetchBlob != nil, let s = catalog.items[r], TypeSchema.isBlobType(s.type), let hash = s.blobRef, !store.spool.has(r) else { return nil }
        switch change {
        case .mtime, .truncate(size: 0): return nil
        case .write, .truncate: return store.blobs.size(hash: hash) == nil ? hash : nil
        }
    }

    /// What `fallocate(2)` asks for (the Linux mode bits).
    public struct AllocateMode: OptionSet, Sendable {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        public static let keepSize = AllocateMode(rawValue: 0x01)
        public static let punchHole = AllocateMode(rawValue: 0x02)
        public static let zeroRange = AllocateMode(rawValue: 0x10)
    }

    /// `fallocate(2)` (FS-31). Blocks are not reserved ahead (a file's bytes live in the store), so
    /// an allocation checks that the store's disk has the room and grows the file with zeros unless
    /// asked to keep its size; punching a hole or zeroing a range writes zeros. Collapsing and
    /// inserting ranges are EOPNOTSUPP (man 7).
    public func fallocate(_ ino: UInt64, mode: Int32, offset: Int64, length: Int64, writer: Int32 = 0) throws {
        if LocalFiles.owns(ino) { return try local.fallocate(ino, mode: mode, offset: offset, length: length) }
        let m = AllocateMode(rawValue: mode)
        guard m.subtracting([.keepSize, .punchHole, .zeroRange]).isEmpty else {
            throw FSError(.notSupported, "fallocate mode \(mode) is not supported")
        }
        guard offset >= 0, length > 0, offset <= Int64.max - length else { throw FSError(.invalid, "fallocate of \(length) bytes at \(offset)") }
        if m.contains(.punchHole) && !m.contains(.keepSize) { throw FSError(.notSupported, "a hole is punched keeping the size") }
        if m.contains(.punchHole) && m.contains(.zeroRange) { throw FSError(.invalid, "punch a hole or zero a range, not both") }
        let size = try getattr(ino).size
        let end = offset + length
        var zeroFrom = offset, zeroTo = end
        if m.contains(.punchHole) || m.contains(.zeroRange) {
            if m.contains(.keepSize) { zeroTo = min(end, size) }
        } else {
            // A plain allocation: the bytes already there stay; the file grows unless kept.
            zeroFrom = size
            if m.contains(.keepSize) { zeroTo = zeroFrom }
        }
        if end > size {
            var sv = statvfs()
            let dir = URL(fileURLWithPath: store.path).deletingLastPathComponent().path
            if statvfs(dir, &sv) == 0, Int64(sv.f_bavail) * Int64(sv.f_frsize) < end - size {
                throw FSError(.noSpace, "no room for \(end - size) more bytes")
            }
        }
        guard zeroTo > zeroFrom else { return }
        if zeroFrom >= size {
            // Past the end: a truncate grows the file with zeros in one step.
            try changeFile(ino, reaching: zeroTo, .truncate(size: zeroTo), by: writer)
            return
        }
        let chunk: Int64 = 1 << 20
        var at = zeroFrom
        while at < zeroTo {
            let n = min(chunk, zeroTo - at)
            try changeFile(ino, reaching: at + n, .write(offset: at, data: [UInt8](repeating: 0, count: Int(n))), by: writer)
            at += n
        }
    }
}
