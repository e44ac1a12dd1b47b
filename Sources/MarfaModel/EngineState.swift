import Foundation

/// What the sync engine is doing, as `.marfafs/status` and the filesystem see it (typed; the
/// JSON of the status file is made from it in one place).
public struct EngineState: Sendable {
    /// The queue's link to the server.
    public enum Connection: String, Sendable {
        case connecting, online
        /// Retrying with backoff.
        case offline
        /// Paused until a working key is configured.
        case unauthorized
    }

    /// The event stream.
    public enum Stream: String, Sendable {
        case connecting, live, sweeping, offline, unauthorized
    }

    /// The first sync (or a sweep) under way: items and edges fetched so far; `done`: how far the
    /// item listing is, 0...1, estimated from time (pages come oldest change first, so the newest
    /// `updated_at` seen, between the first one and the sweep's start, says how much is behind).
    public struct Transfer: Sendable {
        public var phase: String
        public var items: Int
        public var edges: Int
        public var done: Double
        public init(phase: String, items: Int = 0, edges: Int = 0, done: Double = 0) {
            self.phase = phase; self.items = items; self.edges = edges; self.done = done
        }
    }

    public var server: String
    public var connection = Connection.connecting
    public var lastError: String?
    /// Mutations the server took since the mount.
    public var sent = 0
    public var stream = Stream.connecting
    /// Times the event stream has opened since the mount (the server answered the side that
    /// brings its changes): the queue, waiting out a backoff after a network failure, sends at
    /// once when this grows (the server is back).
    public var feedAnswers = 0
    public var lastEventID: String?
    /// Remote changes applied since the mount.
    public var applied = 0
    public var transfer: Transfer?
    public var firstSyncDone = false
    /// The queue's mutations (by `seq`) whose request is out, waiting for the server's answer.
    public var inFlight: Set<Int64> = []
    /// Blob transfers under way, by content hash (`.marfafs/transfers`, FS-33).
    public var blobTransfers: [String: BlobTransfer] = [:]

    /// A blob on its way to or from the server.
    public struct BlobTransfer: Sendable {
        public var direction: String
        public var hash: String
        /// Where the item is in the mount, when known.
        public var path: String?
        public var done: Int64
        public var total: Int64
        public var startedAt: Double
        /// The same blob was being sent before and starts again from its first byte.
        public var restarted: Bool
        public init(direction: String, hash: String, path: String?, total: Int64, restarted: Bool, at: Double) {
            self.direction = direction; self.hash = hash; self.path = path; self.done = 0; self.total = total
            self.startedAt = at; self.restarted = restarted
        }
        public var json: JSONValue {
            .object(["direction": .string(direction), "hash": .string(hash), "path": path.map(JSONValue.string) ?? .null,
                     "done": .int(done), "total": .int(total), "started_at": .double((startedAt * 1000).rounded() / 1000),
                     "restarted": .bool(restarted)])
        }
    }

    public init(server: String) { self.server = server }

    /// The fields `.marfafs/status` takes from the engine.
    public var json: [String: JSONValue] {
        [
            "mode": "synced", "server": .string(server), "connection": .string(connection.rawValue),
            "last_error": lastError.map(JSONValue.string) ?? .null, "sent": .int(Int64(sent)),
            "stream": .string(stream.rawValue), "last_event_id": lastEventID.map(JSONValue.string) ?? .null,
            "applied": .int(Int64(applied)), "first_sync_done": .bool(firstSyncDone),
            "transfers": .array(blobTransfers.values.sorted { $0.startedAt < $1.startedAt }.map(\.json)),
            "transfer": transfer.map { t in
                .object(["phase": .string(t.phase), "items": .int(Int64(t.items)), "edges": .int(Int64(t.edges)),
                         "done": .double((t.done * 1000).rounded() / 1000)])
            } ?? .null,
        ]
    }
}
