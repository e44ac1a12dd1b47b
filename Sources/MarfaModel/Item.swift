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

    /// Seconds since the epoch for an RFC 3339 timestamp (`2026-04-14T10:00:00Z`, optional
    /// fractional seconds, `Z` or a `±HH:MM` offset); nil when it does not parse.
    public static func parse(_ s: String) -> Double? {
        let b = Array(s.utf8)
        var i = 0
        func number(_ n: Int) -> Int? {
            guard i + n <= b.count else { return nil }
            var v = 0
            for k in i..<(i + n) { guard (48...57).contains(b[k]) else { return nil }; v = v * 10 + Int(b[k] - 48) }
            i += n
            return v
        }
        func expect(_ c: UInt8...) -> Bool {
            guard i < b.count, c.contains(b[i]) else { return false }
            i += 1
            return true
        }
        guard let year = number(4), expect(45), let month = number(2), expect(45), let day = number(2),
              expect(84, 116, 32), let hour = number(2), expect(58), let minute = number(2), expect(58), let second = number(2),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second <= 60 else { return nil }
        var fraction = 0.0
        if i < b.count, b[i] == 46 {
            i += 1
            var scale = 0.1, digits = 0
            while i < b.count, (48...57).contains(b[i]) { fraction += Double(b[i] - 48) * scale; scale /= 10; i += 1; digits += 1 }
            guard digits > 0 else { return nil }
        }
        var offset = 0
        if expect(90, 122) {
        } else if i < b.count, b[i] == 43 || b[i] == 45 {
            let sign = b[i] == 45 ? -1 : 1
            i += 1
            guard let oh = number(2), expect(58), let om = number(2), oh < 24, om < 60 else { return nil }
            offset = sign * (oh * 3600 + om * 60)
        } else { return nil }
        guard i == b.count else { return nil }
        var t = tm()
        t.tm_year = Int32(year - 1900); t.tm_mon = Int32(month - 1); t.tm_mday = Int32(day)
        t.tm_hour = Int32(hour); t.tm_min = Int32(minute); t.tm_sec = Int32(second)
        let epoch = timegm(&t)
        // timegm normalises impossible dates (Feb 30); such a date is not a timestamp.
        guard t.tm_mday == Int32(day), t.tm_mon == Int32(month - 1) else { return nil }
        return Double(epoch - offset) + fraction
    }
}
