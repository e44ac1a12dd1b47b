import Foundation
import GRDB
import MarfaLayout
import MarfaModel

/// Every change of a file's bytes through the mount goes through two entry points: `changeFile`
/// (a `write(2)` or a truncate) and `saveOver` (an editor's save by rename, FS-13). They decide
/// where the bytes go (staged in memory and the journal, the item's row, its spool file, a scratch
/// row) and, for a text item, which base the save will be merged against when it settles (FS-29):
///
/// **The base of a save is what its writer saw.** A save begins with the first change to an item
/// whose bytes are settled. Its base is the bytes that writer (the process behind the request)
/// last read or last wrote of that item. A writer with no record of its own (its reads were served
/// from the kernel's page cache, which never reach the mount, or it never read) gets what the mount
/// showed before the last remote change no local save has followed (`items.shown_base`: the page
/// cache can have held nothing newer until then), else what the mount last showed anyone (a read by
/// any process, or a settled save), else the item as it is. A change that builds on the file's bytes (a
/// write without a truncate to 0, an append) has the item as it is for base, and so has a file
/// removed and made again at once under its name (`untrashEmptied`: `git checkout`, `tar -x`). More changes before
/// the save settles keep the base it began with. When it settles (`applyContent`), the save is
/// merged three-way (`TextMerge`) with that base as ancestor, the saved bytes as ours and the item
/// as it was when the save began as theirs (remote changes wait while an item has unsettled
/// bytes). A clean merge is what the item becomes; overlapping edits leave the item as it was and
/// keep the save in a conflicted copy (FS-20), and the writer's later overlapping saves go on in
/// that same copy. The writer's base is then its own saved bytes, never the merge result it has
/// not read; a merge that changed the bytes gives the file a new mtime and is announced, so the
/// writer's mount raises IN_MODIFY and IN_CLOSE_WRITE (editors reload on them).
///
/// Bases are kept in memory (`SaveBases`) for the mount's life, bounded to the 4,096 most recent
/// records and 64 MiB.
extension Store {
    /// A file the mount changes: an item (with its type, when known: a blob's writes may go to its
    /// spool file) or a scratch file.
    public enum FileRef: Sendable, Hashable {
        case item(Int64, type: String?)
        case scratch(Int64)

        var key: StagedKey {
            switch self {
            case .item(let r, _): return StagedKey(.item, r)
            case .scratch(let s): return StagedKey(.scratch, s)
            }
        }
    }

    /// What a file looks like after a change: its size and time; a scratch file whole; whether it
    /// is staged (in memory and the journal, not yet in the store).
    public struct ChangedFile: Sendable {
        public var size: Int64
        public var mtimeNs: Int64
        public var scratch: ScratchFile?
        public var staged: Bool
    }

    /// Writes or truncates a file made or shown by the mount. Guarantees: when it returns, the
    /// change is durable as a `write(2)` is (appended to the journal, or committed); a text item
    /// that was settled has begun a save, with its base (FS-29); nothing is parsed and nothing is
    /// queued (the file settles later, FS-14).
    public func changeFile(_ f: FileRef, _ change: StagedChange, by writer: Writer = .unknown) throws -> ChangedFile {
        if staging.contains(f.key), let sf = try changeStaged(f.key, change) {
            if case .item(let r, _) = f, !change.isTime { saveBases.wroteStaged(r, by: writer) }
            return ChangedFile(size: sf.size, mtimeNs: sf.mtimeNs, scratch: scratchFile(ofStaged: sf), staged: true)
        }
        switch (f, change) {
        case (.item(let r, let t), .write(let offset, let data)):
            let (size, mtime) = try writeUnsettled(rowid: r, offset: offset, data: data, type: t, by: writer)
            return ChangedFile(size: size, mtimeNs: mtime, scratch: nil, staged: false)
        case (.item(let r, let t), .truncate(let size)):
            let (n, mtime) = try truncateUnsettled(rowid: r, size: size, type: t, by: writer)
            return ChangedFile(size: n, mtimeNs: mtime, scratch: nil, staged: false)
        case (.item(let r, _), .mtime(let ns)):
            let (size, mtime) = try setMtime(rowid: r, ns: ns)
            return ChangedFile(size: size, mtimeNs: mtime, scratch: nil, staged: false)
        case (.scratch(let s), .write(let offset, let data)):
            let sf = try modifyScratch(s) { $0.put(data, at: Int(offset)) }
            return ChangedFile(size: sf.size, mtimeNs: sf.mtimeNs, scratch: sf, staged: false)
        case (.scratch(let s), .truncate(let size)):
            let sf = try modifyScratch(s) { $0.resize(to: Int(size)) }
            return ChangedFile(size: sf.size, mtimeNs: sf.mtimeNs, scratch: sf, staged: false)
        case (.scratch(let s), .mtime(let ns)):
            let sf = try setScratchMtime(s, ns: ns)
            return ChangedFile(size: sf.size, mtimeNs: sf.mtimeNs, scratch: sf, staged: false)
        }
    }

    /// What an editor saves over an item with: a file made through the mount or a scratch file.
    public enum SaveSource: Sendable, Hashable {
        case item(Int64)
        case scratch(Int64)

        var key: StagedKey {
            switch self {
            case .item(let r): return StagedKey(.item, r)
            case .scratch(let s): return StagedKey(.scratch, s)
            }
        }
    }

    /// An editor's save (FS-13): item `target` takes the bytes of `source` and keeps its identity
    /// (id, names, tags); `source` is gone. The save's base is what `writer` (the program that
    /// renames) saw of the target (FS-29). Where the bytes go:
    /// - `source` is a new staged file (never committed): it never gets a row; the bytes are staged
    ///   as the item's until the next commit. Returns the item's staged file.
    /// - `source` is an item in the store: the bytes are the target's unsettled file (parsed and
    ///   queued when it settles); the source is forgotten if the server never saw it, else trashed.
    /// - `source` is a stored scratch file: the bytes are applied now, and the scratch file deleted,
    ///   in one transaction.
    /// Otherwise, if either has staged bytes, everything staged is committed first.
    @discardableResult
    public func saveOver(_ target: Int64, from source: SaveSource, by writer: Writer = .unknown) throws -> StagedFile? {
        if staging.isNew(source.key) {
            if !staging.contains(StagedKey(.item, target)) { try readStatement { db in try beginSave(db, target, by: writer, patch: false) } }
            let f = try staging.saveOver(target, from: source.key)
            // A save over a new file still staged begins no save: it is its bytes from now on.
            if !saveBases.isSaving(target) { saveBases.wroteStaged(target, by: writer) }
            return f
        }
        try commitStaged(ifAnyOf: source.key, StagedKey(.item, target))
        switch source {
        case .item(let r): try saveUnsettled(target, from: r, by: writer)
        case .scratch(let s): try saveScratch(target, from: s, by: writer)
        }
        return nil
    }

    // MARK: what each writer saw (FS-29)

    /// A text item's bytes, as a read by `writer` gets them; the store notes that it saw them.
    public func readText(rowid: Int64, by writer: Writer) throws -> [UInt8] {
        let since = saveBases.readBegins(rowid)
        let b = try textContent(rowid: rowid)
        saveBases.noteRead(rowid, by: writer, b, since: since)
        return b
    }

    /// `writer` read `bytes`, the whole of item `rowid`'s file (a staged file read from memory).
    public func noteRead(_ rowid: Int64, by writer: Writer, _ bytes: [UInt8]) {
        saveBases.noteRead(rowid, by: writer, bytes)
    }

    /// A save of text item `rowid` by `writer` begins, unless one is under way: its base and the
    /// item's bytes now. `patch`: the change builds on the bytes (its base is the item as it is).
    /// `inPlace`: a truncate to nothing begins it (`SaveBases.Save.inPlace`). Call before the
    /// item's bytes change.
    func beginSave(_ db: Database, _ rowid: Int64, by writer: Writer, patch: Bool, inPlace: Bool = false) throws {
        if saveBases.isSaving(rowid) { return }
        // Bytes not settled yet with no save under way are a file still being made (a new file
        // committed from the staging before it settled): what follows continues it, with no base
        // of its own, as more writes to a staged file do.
        // Only the columns the bytes come from: a whole item's properties are not parsed for it.
        guard let row = try db.row("SELECT type, unsettled, raw, raw_head, size, properties, shown_base FROM items WHERE rowid = ?", [rowid]),
              (row["unsettled"] as Int64? ?? 0) == 0, !TypeSchema.isBlobType(row["type"]) else { return }
        let before = textBytes(row)
        let shownBase = (row["shown_base"] as Data?).map { [UInt8]($0) }
        // A read served from the kernel's page cache never reaches the mount, so a writer may hold
        // what the cache held before the last remote change without any record of it: with no
        // record of its own, its base is what the mount showed before that change.
        let base = patch ? before : (saveBases.seen(rowid, by: writer) ?? shownBase ?? saveBases.shown(rowid) ?? before)
        saveBases.begin(rowid, SaveBases.Save(writer: writer, base: base, before: before, inPlace: inPlace, beganNs: Self.ns(Date())))
    }

    /// The bytes a local save of `cur` leaves the item with: `bytes` itself, or its merge with what
    /// the writer had not seen, or (overlapping edits) the item's text as it was, the save kept in
    /// a conflicted copy. A save with no recorded beginning (settled after a remount) has the
    /// stored ancestor for base and the item's rendering for theirs.
    func mergeStaleSave(_ db: Database, _ cur: StoredItem, _ bytes: [UInt8], type t: TypeSchema, now: Date) throws -> [UInt8] {
        // The writer has seen its own bytes, whatever the item becomes.
        let (save, mark) = saveBases.settles(cur.rowid, wrote: bytes)
        if cur.shownBase != nil { try db.run("UPDATE items SET shown_base = NULL WHERE rowid = ?", [cur.rowid]) }
        let writer = save?.writer ?? .unknown
        guard let base = save?.base ?? cur.shownBase else { return bytes }
        let theirsBytes = save?.before ?? Array(render(type: t, properties: cur.item.properties).utf8)
        // Text that is not UTF-8 is taken as written (it is kept byte for byte and marked invalid).
        guard bytes != theirsBytes, base != theirsBytes, let ancestor = String(validating: base, as: UTF8.self),
              let ours = String(validating: bytes, as: UTF8.self), let theirs = String(validating: theirsBytes, as: UTF8.self) else { return bytes }
        if let merged = TextMerge.threeWay(base: ancestor, local: ours, remote: theirs) {
            var c = StoreChanges()
            c.staleSaveMerges.insert(cur.item.id)
            // The file now holds more than was written: the kernel's copy of it is stale.
            if merged != ours { c.content.insert(cur.item.id) }
            announce(c)
            return Array(merged.utf8)
        }
        // The same lines changed on both sides: the item keeps its text; the save is kept whole in
        // a conflicted copy, queued for the server like a 409's: the writer's copy if it has one.
        let props = (try? Self.parseText(bytes, type: t, fileName: cur.fileName, previous: cur.item.properties)) ?? [t.bodyField: .string(ours)]
        var c = StoreChanges()
        c.content.insert(cur.item.id)
        if let id = saveBases.copy(of: cur.rowid, by: writer), let copyRow = try Int64.fetchOne(db, sql: "SELECT rowid FROM items WHERE id = ? AND state = 'active'", arguments: [id]),
           let copy = try Self.fetchItem(db, rowid: copyRow) {
            _ = try applyContent(db, copy, bytes: bytes, now: now, origin: .currentText)
            c.items.insert(id); c.content.insert(id)
        } else {
            let (copyID, edgeID) = try insertConflictedCopy(db, cur, properties: props, device: device.withLock { $0 }, now: now)
            saveBases.setCopy(copyID, of: cur.rowid, by: writer)
            c.items.formUnion([copyID, cur.item.id])
            c.edgesAdded.insert(edgeID)
            c.staleSaveCopies.append((copy: copyID, original: cur.item.id))
        }
        announce(c)
        saveBases.settled(cur.rowid, shows: theirsBytes, mark: mark)
        return theirsBytes
    }
}
