import Foundation
import MarfaModel
import Synchronization

/// What the sync engine shows in `.marfafs/status`: the server, the state of the connection and
/// the last error. Read synchronously by the file system, written by the engine.
public final class SyncStatus: Sendable {
    private let state: Mutex<EngineState>
    /// The latest sync events (`.marfafs/events`), oldest first.
    private let events = Mutex<[String]>([])
    public init(server: String) { state = Mutex(EngineState(server: server)) }
    public var snapshot: EngineState { state.withLock { $0 } }
    func update(_ f: (inout EngineState) -> Void) { state.withLock { f(&$0) } }

    /// Adds a line to `.marfafs/events`: `{"at", "event", …fields}`; the latest 500 are kept.
    public func record(_ event: String, _ fields: [String: JSONValue] = [:]) {
        var o = fields
        o["at"] = .string(Timestamp.now()); o["event"] = .string(event)
        let line = JSONCoding.encode(o)
        events.withLock { e in
            e.append(line)
            if e.count > 500 { e.removeFirst(e.count - 500) }
        }
    }

    /// Where an item is in the mount (the mount sets it), for transfer events.
    public let pathOf = Mutex<(@Sendable (String) -> String?)?>(nil)
    /// When each transfer last raised a progress event.
    private let lastProgress = Mutex<[String: Double]>([:])

    /// A blob transfer begins: `blob.upload.started` (or `blob.download.started`), with whether
    /// it starts again from the first byte after an earlier attempt.
    func transferStarted(_ direction: String, hash: String, item: String?, total: Int64, restarted: Bool) {
        let path = item.flatMap { id in pathOf.withLock { $0 }?(id) }
        let now = Date().timeIntervalSince1970
        update { $0.blobTransfers[hash] = EngineState.BlobTransfer(direction: direction, hash: hash, path: path, total: total, restarted: restarted, at: now) }
        lastProgress.withLock { $0[hash] = now }
        record("blob.\(direction).started", ["hash": .string(hash), "path": path.map(JSONValue.string) ?? .null,
                                              "total": .int(total), "restarted": .bool(restarted)])
    }

    /// Bytes moved so far: `blob.<direction>.progress`, at most four times a second.
    func transferProgress(hash: String, done: Int64) {
        var t: EngineState.BlobTransfer?
        update { s in s.blobTransfers[hash]?.done = done; t = s.blobTransfers[hash] }
        guard let t else { return }
        let now = Date().timeIntervalSince1970
        let due = lastProgress.withLock { last -> Bool in
            guard now - (last[hash] ?? 0) >= 0.25 else { return false }
            last[hash] = now
            return true
        }
        if due { record("blob.\(t.direction).progress", ["hash": .string(hash), "path": t.path.map(JSONValue.string) ?? .null, "done": .int(done), "total": .int(t.total)]) }
    }

    /// The transfer ended: `completed`, or `failed` with the reason (it is tried again with the
    /// mutation, from the first byte).
    func transferEnded(hash: String, error: String?) {
        var t: EngineState.BlobTransfer?
        update { s in t = s.blobTransfers.removeValue(forKey: hash) }
        lastProgress.withLock { _ = $0.removeValue(forKey: hash) }
        guard let t else { return }
        var fields: [String: JSONValue] = ["hash": .string(hash), "path": t.path.map(JSONValue.string) ?? .null,
                                           "done": .int(error == nil ? t.total : t.done), "total": .int(t.total)]
        if let error { fields["error"] = .string(error) }
        record("blob.\(t.direction).\(error == nil ? "completed" : "failed")", fields)
    }

    /// `.marfafs/events`: one JSON object per line.
    public var eventLines: String { events.withLock { $0.map { $0 + "\n" }.joined() } }
}
