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

    /// `.marfafs/events`: one JSON object per line.
    public var eventLines: String { events.withLock { $0.map { $0 + "\n" }.joined() } }
}
