import Foundation
import MarfaModel
import PropertyBased
import Testing

/// W-1 timestamps: RFC 3339 UTC out, RFC 3339 (any offset, optional fraction) in.
@Suite struct TimestampTests {
    @Test func W1_parsesRFC3339WithFractionsAndOffsets() {
        #expect(Timestamp.parse("2026-04-14T10:00:00Z") == 1_776_160_800)
        #expect(Timestamp.parse("2026-04-14T10:00:00.250Z") == 1_776_160_800.25)
        #expect(Timestamp.parse("2026-04-14T12:00:00+02:00") == 1_776_160_800)
        #expect(Timestamp.parse("2026-04-14t09:30:00-00:30") == 1_776_160_800)
        #expect(Timestamp.parse("1970-01-01T00:00:00Z") == 0)
    }

    @Test func W1_refusesWhatIsNotATimestamp() {
        for bad in ["", "2026-04-14", "2026-04-14T10:00:00", "2026-04-14T10:00Z", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z",
                    "2026-04-14T24:00:00Z", "2026-04-14T10:00:00.Z", "2026-04-14T10:00:00Zjunk", "2026-04-14T10:00:00+2:00", "yesterday"] {
            #expect(Timestamp.parse(bad) == nil, "\(bad)")
        }
    }

    @Test func W1_formatThenParseGivesTheSameMillisecond() async {
        await propertyCheck(input: Gen<Int>.int(in: 0...4_102_444_800_000)) { ms in
            let d = Date(timeIntervalSince1970: Double(ms) / 1000)
            let back = Timestamp.parse(Timestamp.format(d))
            #expect(back.map { abs($0 - Double(ms) / 1000) < 0.0015 } == true, "\(Timestamp.format(d))")
        }
    }
}
