import Foundation
import Logging
import MarfaModel
import MarfaStore

/// Sends an item to a MyLifeDB server (FS-34). A queued mutation only says the item changed: the
/// item's file as it is now (`Store.fileState`) is compared with what the server was last known to
/// hold (`Store.knownFile`), and the calls that make the server hold it are made, in this order:
/// a delete (the item left the tree), a move and a rename (its path changed), then its bytes.
///
/// Concurrent edits: the server keeps no versions and has no conditional write, so before writing
/// bytes over a file the writer asks for the file's hash; a hash other than the one last known
/// means someone else wrote it meanwhile. A text is then merged three ways (base: the bytes both
/// sides last agreed on) and the merge is written; overlapping edits, or any other file, keep both:
/// the item takes the server's bytes and a sibling conflicted copy holds the local ones (FS-20).
/// What remains is the window between that question and the write (one round trip), written in
/// man 7.
struct MyLifeDBWriter: RemoteWriter {
    let store: Store
    let status: SyncStatus
    let api: @Sendable () -> MyLifeDBAPI
    let device: String
    let log: Logger

    func probe(_ client: WireClient) async throws {
        try await client.call(MyLifeDBAPI.root(api().routes))
    }

    func push(_ m: Mutation, acknowledgedVersion: Int64?, client: WireClient) async -> PushResult {
        // Links are read from the texts on every mount: nothing to send.
        if m.kind == .createEdge || m.kind == .deleteEdge { return .acked(Acknowledgement(seq: m.seq, itemID: m.itemID, serverVersion: nil, answer: nil)) }
        do {
            return try await sync(m, client: client)
        } catch WireFailure.conflict(let r) {
            // A name taken there (a folder of that name, a rename onto a file): refused, kept here.
            return .unsendable("\(r.status) \(r.errorCode ?? "conflict"): \(r.errorMessage ?? r.json["error"]?.stringValue ?? "")")
        } catch let f as WireFailure {
            return .failed(f)
        } catch {
            return .unsendable("\(error)")
        }
    }

    func sync(_ m: Mutation, client: WireClient) async throws -> PushResult {
        let api = api()
        let ack = PushResult.acked(Acknowledgement(seq: m.seq, itemID: m.itemID, serverVersion: 1, answer: nil))
        let state = try store.fileState(itemID: m.itemID)
        let upTo = max(m.seq, state?.queuedUpTo ?? 0)
        var known = try store.knownFile(itemID: m.itemID)
        // Gone from the tree here: gone there, unless it was written there since (an edit wins
        // over a delete: the server's file stays, and comes back here as a new file).
        guard let state, let path = state.path else {
            if let known {
                let there = try await currentHash(known.path, client: client, api: api)
                if there == known.hash {
                    try await client.call(api.delete(known.path))
                } else if there != nil {
                    status.record("mylifedb.kept", ["path": .string(known.path), "reason": "written on the server since; not deleted"])
                }
            }
            try store.filePushed(itemID: m.itemID, upTo: upTo, file: nil, base: nil)
            return ack
        }
        if state.isSymlink { return .unsendable("a MyLifeDB server keeps no symbolic links; it stays on this mount only") }
        // Moved or renamed here.
        if var k = known, k.path != path {
            k.path = try await move(k.path, to: path, client: client, api: api)
            known = k
        }
        let remote = RemoteFile(path: path, size: state.size, modifiedMs: state.mtimeNs / 1_000_000, hash: state.hash)
        if let known, known.hash == state.hash {
            try store.filePushed(itemID: m.itemID, upTo: upTo, file: remote, base: known.base)
            return ack
        }
        let ours = try store.fileBytes(itemID: m.itemID)
        // Written there meanwhile (or made there under the same name)?
        let there = try await currentHash(path, client: client, api: api)
        if let there, there != state.hash, there != known?.hash {
            return try await concurrent(m, state: state, known: known, ours: ours, upTo: upTo, client: client, api: api)
        }
        if there != state.hash {
            try await ensureFolder(Self.parent(path), client: client, api: api)
            try await client.call(api.put(path, ours))
        }
        try store.filePushed(itemID: m.itemID, upTo: upTo, file: remote, base: state.isText ? ours : nil)
        status.record("mylifedb.written", ["path": .string(path), "size": .int(Int64(ours.count))])
        return ack
    }

    /// The file's hash on the server now (nil: there is none).
    func currentHash(_ path: String, client: WireClient, api: MyLifeDBAPI) async throws -> String? {
        let resp = try await client.send(api.info(path))
        if resp.status == 404 { return nil }
        guard (200..<300).contains(resp.status) else { throw WireFailure.of(resp) }
        return MyLifeDBAPI.file(resp.json, path: path)?.hash
    }

    /// Both sides changed the file: merge a text, else keep both.
    func concurrent(_ m: Mutation, state: FileState, known: KnownFile?, ours: [UInt8], upTo: Int64,
                    client: WireClient, api: MyLifeDBAPI) async throws -> PushResult {
        let path = state.path!
        let resp = try await client.call(api.raw(path))
        let theirs = resp.body
        let info = RemoteFile(path: path, size: Int64(theirs.count), modifiedMs: Int64(Date().timeIntervalSince1970 * 1000),
                              hash: String(BlobHash.of(theirs).dropFirst(BlobHash.prefix.count)))
        if state.isText, let b = String(validating: known?.base ?? [], as: UTF8.self),
           let o = String(validating: ours, as: UTF8.self), let t = String(validating: theirs, as: UTF8.self),
           let merged = TextMerge.threeWay(base: b, local: o, remote: t) {
            let bytes = Array(merged.utf8)
            try await client.call(api.put(path, bytes))
            var f = info
            f.size = Int64(bytes.count); f.hash = String(BlobHash.of(bytes).dropFirst(BlobHash.prefix.count))
            let changes = try store.takeMerged(itemID: m.itemID, remote: f, merged: bytes, upTo: upTo)
            status.record("conflict.merged", ["item": .string(m.itemID), "path": .string(path), "strategy": "three-way"])
            log.info("a concurrent edit on the server merged", metadata: ["path": "\(path)"])
            return .settled(changes)
        }
        let (changes, copy) = try store.keepConflictedFile(itemID: m.itemID, remote: info, theirs: theirs, ours: ours, upTo: upTo, device: device)
        status.record("conflict.copied", ["item": .string(m.itemID), "copy": .string(copy), "path": .string(path)])
        log.info("a concurrent edit on the server overlapped; the local bytes are kept in a conflicted copy", metadata: ["path": "\(path)"])
        return .settled(changes)
    }

    /// Moves and renames the server's file at `from` to `to`; returns where it is now.
    func move(_ from: String, to: String, client: WireClient, api: MyLifeDBAPI) async throws -> String {
        var at = from
        let (fromFolder, fromName) = (Self.parent(from), Self.name(from))
        let (toFolder, toName) = (Self.parent(to), Self.name(to))
        if fromFolder != toFolder {
            try await ensureFolder(toFolder, client: client, api: api)
            let resp = try await client.send(api.move(at, toFolder: toFolder))
            if resp.status == 404 { return at }     // gone there: the bytes are written anew at `to`
            guard (200..<300).contains(resp.status) else { throw WireFailure.of(resp) }
            at = resp.json["newPath"]?.stringValue ?? (toFolder.isEmpty ? fromName : toFolder + "/" + fromName)
        }
        if fromName != toName {
            let resp = try await client.send(api.rename(at, to: toName))
            guard (200..<300).contains(resp.status) || resp.status == 404 || (resp.status == 500 && api.routes == .legacy) else { throw WireFailure.of(resp) }
            if (200..<300).contains(resp.status) { at = resp.json["newPath"]?.stringValue ?? to }
        }
        status.record("mylifedb.moved", ["from": .string(from), "to": .string(at)])
        return at
    }

    /// Makes `folder` and the folders above it on the server, where it has none.
    func ensureFolder(_ folder: String, client: WireClient, api: MyLifeDBAPI) async throws {
        guard !folder.isEmpty else { return }
        let known = try store.knownFolders()
        if known.contains(folder) { return }
        var made: [String] = []
        var at = ""
        for part in folder.split(separator: "/").map(String.init) {
            let path = at.isEmpty ? part : at + "/" + part
            if !known.contains(path) {
                let resp = try await client.send(api.makeFolder(parent: at, name: part))
                // 409: it is there already.
                guard (200..<300).contains(resp.status) || resp.status == 409 else { throw WireFailure.of(resp) }
                made.append(path)
            }
            at = path
        }
        try store.setKnownFolders(adding: made, removing: [])
    }

    static func parent(_ path: String) -> String {
        guard let i = path.lastIndex(of: "/") else { return "" }
        return String(path[..<i])
    }

    static func name(_ path: String) -> String {
        guard let i = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: i)...])
    }
}
