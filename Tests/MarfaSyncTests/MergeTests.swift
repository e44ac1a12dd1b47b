import MarfaModel
import MarfaStore
import MarfaSync
import Testing

/// The three-way text merge and the field-by-field settlement of a 409 (FS-20).
struct MergeTests {
    @Test func FS20_editsOfDifferentLinesMerge() {
        let base = "a\nb\nc\nd\ne\n"
        #expect(TextMerge.threeWay(base: base, local: "A\nb\nc\nd\ne\n", remote: "a\nb\nc\nd\nE\n") == "A\nb\nc\nd\nE\n")
        // An insertion on one side, a deletion elsewhere on the other.
        #expect(TextMerge.threeWay(base: base, local: "a\nnew\nb\nc\nd\ne\n", remote: "a\nb\nc\ne\n") == "a\nnew\nb\nc\ne\n")
        // Adjacent lines are different lines.
        #expect(TextMerge.threeWay(base: base, local: "a\nB\nc\nd\ne\n", remote: "a\nb\nC\nd\ne\n") == "a\nB\nC\nd\ne\n")
        // Appends at the end of one side and at the start of the other.
        #expect(TextMerge.threeWay(base: base, local: base + "tail\n", remote: "head\n" + base) == "head\n" + base + "tail\n")
    }

    @Test func FS20_overlappingEditsDoNotMerge() {
        let base = "a\nb\nc\n"
        #expect(TextMerge.threeWay(base: base, local: "a\nX\nc\n", remote: "a\nY\nc\n") == nil)
        #expect(TextMerge.threeWay(base: base, local: base + "one\n", remote: base + "two\n") == nil, "two insertions at one place")
        #expect(TextMerge.threeWay(base: base, local: "a\nc\n", remote: "a\nB\nc\n") == nil, "a deletion against an edit")
        // An insertion inside a range the other side replaced.
        #expect(TextMerge.threeWay(base: "a\nb\nc\nd\n", local: "a\nb\nnew\nc\nd\n", remote: "a\nX\nY\nd\n") == nil)
    }

    @Test func FS20_theSameEditOnBothSidesAndTrivialCases() {
        let base = "a\nb\nc\n"
        #expect(TextMerge.threeWay(base: base, local: "a\nX\nc\n", remote: "a\nX\nc\n") == "a\nX\nc\n")
        #expect(TextMerge.threeWay(base: base, local: "a\nX\nc\nd\n", remote: "a\nX\nc\n") == "a\nX\nc\nd\n", "one shared edit, one more on one side")
        #expect(TextMerge.threeWay(base: base, local: base, remote: "z\n") == "z\n")
        #expect(TextMerge.threeWay(base: base, local: "z\n", remote: base) == "z\n")
        // No final newline is kept as it is.
        #expect(TextMerge.threeWay(base: "a\nb", local: "A\nb", remote: "a\nB") == "A\nB")
        #expect(TextMerge.threeWay(base: "", local: "x\n", remote: "y\n") == nil)
    }

    /// Random notes; each side rewrites lines in its own half, never next to the other's: the
    /// merge is always both edits.
    @Test func FS20_randomEditsOfSeparateRegionsAlwaysMerge() {
        var rng = SplitMix(seed: 42)
        for _ in 0..<300 {
            let n = Int.random(in: 4...40, using: &rng)
            let base = (0..<n).map { "line \($0) \(Int.random(in: 0...9, using: &rng))\n" }
            var local = base, remote = base, expected = base
            let mid = n / 2
            for i in 0..<(mid - 1) where Bool.random(using: &rng) { local[i] = "local \(i)\n"; expected[i] = local[i] }
            for i in (mid + 1)..<n where Bool.random(using: &rng) { remote[i] = "remote \(i)\n"; expected[i] = remote[i] }
            if Bool.random(using: &rng) { remote.append("appended\n"); expected.append("appended\n") }
            #expect(TextMerge.threeWay(base: base.joined(), local: local.joined(), remote: remote.joined()) == expected.joined())
        }
    }

    /// Arbitrary edits on both sides (lines changed, inserted, deleted anywhere): the merge never
    /// traps, and whatever it merges contains every line either side added.
    @Test func FS20_arbitraryEditsNeverTrapAndKeepWhatTheyMerge() {
        var rng = SplitMix(seed: 99)
        func edit(_ lines: [String], _ tag: String) -> [String] {
            var out = lines
            for _ in 0..<Int.random(in: 0...4, using: &rng) {
                let i = Int.random(in: 0...out.count, using: &rng)
                switch Int.random(in: 0...2, using: &rng) {
                case 0 where i < out.count: out[i] = "\(tag) changed \(i)\n"
                case 1: out.insert("\(tag) added \(i)\n", at: i)
                default: if i < out.count { out.remove(at: i) }
                }
            }
            return out
        }
        for _ in 0..<2000 {
            let base = (0..<Int.random(in: 0...8, using: &rng)).map { "b\($0)\n" }
            let local = edit(base, "L"), remote = edit(base, "R")
            guard let merged = TextMerge.threeWay(base: base.joined(), local: local.joined(), remote: remote.joined()) else { continue }
            let lines = Set(merged.split(separator: "\n", omittingEmptySubsequences: false).map(String.init))
            for added in (local + remote) where !base.contains(added) {
                #expect(lines.contains(String(added.dropLast())), "\(base) \(local) \(remote) -> \(merged)")
            }
        }
    }

    @Test func FS20_fieldsFollowTheirPolicy() {
        let policy = MergePolicy(default: .lastWriterWins, fields: ["body": .keepBothCopies])
        let ancestor: [String: JSONValue] = ["title": "t", "body": "a\nb\nc\n", "tag": "x"]
        // Title changed on both sides (last writer wins: the server's); body merged; a field only
        // the local side changed keeps the local value; one only the server changed, the server's.
        let local: [String: JSONValue] = ["title": "local t", "body": "A\nb\nc\n", "tag": "x", "mine": "1"]
        let current: [String: JSONValue] = ["title": "server t", "body": "a\nb\nC\n", "tag": "y"]
        let r = ConflictResolver.resolve(local: local, ancestor: ancestor, current: current, policy: policy, mode: .merge)
        #expect(r.outcome.resolved == ["title": "server t", "body": "A\nb\nC\n", "tag": "y", "mine": "1"])
        #expect(r.outcome.copy == nil && r.merged == ["body"] && r.kept.isEmpty)
        // Overlapping body edits: the server's body stays, the whole local version goes to a copy.
        let clash = ConflictResolver.resolve(local: ["title": "t", "body": "X\nb\nc\n"], ancestor: ancestor, current: ["title": "t", "body": "Y\nb\nc\n", "tag": "x"],
                                             policy: policy, mode: .merge)
        #expect(clash.outcome.resolved["body"] == "Y\nb\nc\n" && clash.outcome.copy?["body"] == "X\nb\nc\n" && clash.kept == ["body"])
        // keep-both never merges; without an ancestor, anything that differs conflicts.
        let kb = ConflictResolver.resolve(local: local, ancestor: ancestor, current: current, policy: policy, mode: .keepBoth)
        #expect(kb.outcome.copy == local && kb.outcome.resolved["body"] == "a\nb\nC\n")
        let noBase = ConflictResolver.resolve(local: ["body": "l"], ancestor: nil, current: ["body": "c"], policy: policy, mode: .merge)
        #expect(noBase.outcome.copy == ["body": "l"] && noBase.outcome.resolved == ["body": "c"])
    }

    @Test func W15_eventsAreReadLiberally() {
        let wrapped = RemoteWire.change(event: "item.updated", data: #"{"item":{"id":"itm_01","type":"core.note","properties":{"body":"x"},"version":3,"space_id":"s","unknown":1}}"#)
        guard case .item(let it, _, _)? = wrapped else { Issue.record("not an item"); return }
        #expect(it.id == "itm_01" && it.version == 3 && it.properties["body"] == "x")
        if case .metadata(let id, let tags, let tier, let state, _)? = RemoteWire.change(event: "metadata.changed", data: #"{"item_id":"i","tags":["a"],"tier":"feed","state":"archived"}"#) {
            #expect(id == "i" && tags == ["a"] && tier == .feed && state == .archived)
        } else { Issue.record("metadata.changed not read") }
        if case .edgeDeleted(let id)? = RemoteWire.change(event: "edge.deleted", data: #"{"id":"e1","edge_type":"about","source_id":"a","target_id":"b"}"#) {
            #expect(id == "e1")
        } else { Issue.record("edge.deleted not read") }
        #expect(RemoteWire.change(event: "item.exploded", data: "{}") == nil, "unknown events are ignored")
        #expect(RemoteWire.change(event: "item.created", data: "not json") == nil)
        #expect(RemoteWire.change(event: "item.created", data: #"{"type":"core.note"}"#) == nil, "an item without an id is malformed")
    }
}

/// A small seeded generator, so a failing case can be replayed.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
