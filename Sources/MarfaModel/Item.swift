import Foundation

public enum ItemState: String, Codable, Sendable, CaseIterable { case active, archived, trashed }
public enum Tier: String, Codable, Sendable, CaseIterable { case library, feed }

/// Where an item stands with the server, as `user.marfa.sync` shows it (FS-10, §5).
public enum SyncState: String, Codable, Sendable, CaseIterable {
    case synced, pending, conflicted, invalid, rejected
}

/// One item as the wire describes it (wire.md §2). Value type; owns no storage.
public struct Item: Codable, Hashable, Sendable {
    public var id: String
    public var type: String
    public var properties: [String: JSONValue]
    public var version: Int
    public var schemaVersion: Int
    public var source: String
    public var sourceID: String?
    public var timestamp: String
    public var createdAt: String
    public var updatedAt: String
    public var state: ItemState
    public var tier: Tier

    public init(id: String, type: String, properties: [String: JSONValue], version: Int = 1,
                schemaVersion: Int = 1, source: String = "marfafs", sourceID: String? = nil,
                timestamp: String, createdAt: String, updatedAt: String,
                state: ItemState = .active, tier: Tier = .library) {
        self.id = id; self.type = type; self.properties = properties; self.version = version
        self.schemaVersion = schemaVersion; self.source = source; self.sourceID = sourceID
        self.timestamp = timestamp; self.createdAt = createdAt; self.updatedAt = updatedAt
        self.state = state; self.tier = tier
    }

    enum CodingKeys: String, CodingKey {
        case id, type, properties, version, source, timestamp, state, tier
        case schemaVersion = "schema_version", sourceID = "source_id"
        case createdAt = "created_at", updatedAt = "updated_at"
    }
}

/// An edge between two items (wire.md W-11).
public struct Edge: Codable, Hashable, Sendable {
    public var id: String
    public var sourceID: String
    public var targetID: String
    public var edgeType: String
    public var properties: [String: JSONValue]
    public var createdAt: String
    public var updatedAt: String

    public init(id: String, sourceID: String, targetID: String, edgeType: String,
                properties: [String: JSONValue] = [:], createdAt: String, updatedAt: String) {
        self.id = id; self.sourceID = sourceID; self.targetID = targetID; self.edgeType = edgeType
        self.properties = properties; self.createdAt = createdAt; self.updatedAt = updatedAt
    }

    enum CodingKeys: String, CodingKey {
        case id, properties
        case sourceID = "source_id", targetID = "target_id", edgeType = "edge_type"
        case createdAt = "created_at", updatedAt = "updated_at"
    }
}

/// RFC 3339 UTC timestamps with milliseconds, as the wire carries them (W-1).
public enum Timestamp {
    public static func now() -> String { format(Date()) }

    public static func format(_ d: Date) -> String {
        var t = time_t(d.timeIntervalSince1970.rounded(.down))
        var tmv = tm()
        gmtime_r(&t, &tmv)
        let ms = Int((d.timeIntervalSince1970 - Double(t)) * 1000) % 1000
        var out = [UInt8](); out.reserveCapacity(24)
        func digits(_ v: Int, _ n: Int, then sep: UInt8?) {
            var d = [UInt8](repeating: 48, count: n), x = max(0, v)
            for i in stride(from: n - 1, through: 0, by: -1) { d[i] = UInt8(48 + x % 10); x /= 10 }
            out += d
            if let sep { out.append(sep) }
        }
        digits(Int(tmv.tm_year) + 1900, 4, then: UInt8(ascii: "-")); digits(Int(tmv.tm_mon) + 1, 2, then: UInt8(ascii: "-"))
        digits(Int(tmv.tm_mday), 2, then: UInt8(ascii: "T")); digits(Int(tmv.tm_hour), 2, then: UInt8(ascii: ":"))
        digits(Int(tmv.tm_min), 2, then: UInt8(ascii: ":")); digits(Int(tmv.tm_sec), 2, then: UInt8(ascii: "."))
        digits(ms, 3, then: UInt8(ascii: "Z"))
        return String(decoding: out, as: UTF8.self)
    }

    /// Seconds since the epoch for an RFC 3339 timestamp; nil when it does not parse.
    public static func parse(_ s: String) -> Double? {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let d = f.date(from: s) { return d.timeIntervalSince1970 }
        f.formatOptions = [.withInternetDateTime]
        return f.date(from: s)?.timeIntervalSince1970
    }
}
