import Foundation

/// Mints UUIDv7 ids (RFC 9562): 48-bit Unix milliseconds, version 7, variant 10, random rest.
/// Ids minted in one process are strictly increasing (a counter in the random bits breaks ties).
public enum ItemID {
    private static let state = LockedCounter()

    public static func make(now: Date = Date()) -> String {
        let ms = UInt64(max(0, now.timeIntervalSince1970 * 1000))
        let (stamp, seq) = state.next(ms: ms)
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in 0..<6 { bytes[i] = UInt8((stamp >> (40 - 8 * UInt64(i))) & 0xff) }
        // 12 bits of sequence in rand_a keep ids minted in the same millisecond ordered.
        bytes[6] = 0x70 | UInt8((seq >> 8) & 0x0f)
        bytes[7] = UInt8(seq & 0xff)
        var random = UInt64.random(in: 0...UInt64.max)
        for i in 8..<16 { bytes[i] = UInt8(truncatingIfNeeded: random); random >>= 8 }
        bytes[8] = 0x80 | (bytes[8] & 0x3f)
        return hyphenatedHex(bytes)
    }

    /// `8-4-4-4-12` lowercase hex of 16 bytes.
    static func hyphenatedHex(_ bytes: [UInt8]) -> String {
        var out = [UInt8](); out.reserveCapacity(36)
        for (i, b) in bytes.enumerated() {
            if i == 4 || i == 6 || i == 8 || i == 10 { out.append(UInt8(ascii: "-")) }
            out.append(ItemIDHex.digits[Int(b >> 4)]); out.append(ItemIDHex.digits[Int(b & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// True for a canonical lowercase UUID string of version 7.
    public static func isUUIDv7(_ s: String) -> Bool {
        let u = Array(s.utf8)
        guard u.count == 36 else { return false }
        for (i, c) in u.enumerated() {
            if [8, 13, 18, 23].contains(i) { if c != UInt8(ascii: "-") { return false }; continue }
            let isHex = (c >= 48 && c <= 57) || (c >= 97 && c <= 102)
            if !isHex { return false }
        }
        return u[14] == UInt8(ascii: "7") && [UInt8(ascii: "8"), UInt8(ascii: "9"), UInt8(ascii: "a"), UInt8(ascii: "b")].contains(u[19])
    }
}

final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var lastMs: UInt64 = 0
    private var seq: UInt64 = 0

    func next(ms: UInt64) -> (UInt64, UInt64) {
        lock.lock(); defer { lock.unlock() }
        if ms > lastMs { lastMs = ms; seq = UInt64.random(in: 0..<512) }
        else {
            seq += 1
            if seq > 0xfff { lastMs += 1; seq = 0 }
        }
        return (lastMs, seq)
    }
}
