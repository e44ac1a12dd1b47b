/// Three-way merge of text by lines (FS-20): both sides' edits against their common ancestor are
/// applied together when they touch different lines; edits that overlap (or insert at the same
/// place) are a conflict, unless both sides made the same edit.
public enum TextMerge {
    /// One side's edit: base lines `start..<end` replaced by `lines`.
    struct Hunk: Equatable {
        var start: Int
        var end: Int
        var lines: [Substring]
    }

    /// The merged text, or nil when the edits overlap.
    public static func threeWay(base: String, local: String, remote: String) -> String? {
        if local == remote || remote == base { return local }
        if local == base { return remote }
        let b = lines(base), l = lines(local), r = lines(remote)
        // A quadratic worst case is not worth it for a note's merge: very long texts that differ
        // in many places keep both copies instead.
        guard let hl = hunks(b, l), let hr = hunks(b, r) else { return nil }
        var out: [Substring] = []
        var pos = 0
        var i = 0, j = 0
        while i < hl.count || j < hr.count {
            // The next group: hunks of either side that overlap each other, transitively.
            var group: [(Hunk, Bool)] = []
            var start = Int.max, end = Int.min
            func take(_ h: Hunk, _ isLocal: Bool) { group.append((h, isLocal)); start = min(start, h.start); end = max(end, h.end) }
            if j >= hr.count || (i < hl.count && comesFirst(hl[i], hr[j])) { take(hl[i], true); i += 1 } else { take(hr[j], false); j += 1 }
            var grew = true
            while grew {
                grew = false
                if i < hl.count, overlaps(hl[i], start, end) { take(hl[i], true); i += 1; grew = true }
                if j < hr.count, overlaps(hr[j], start, end) { take(hr[j], false); j += 1; grew = true }
            }
            out += b[pos..<start]
            let sides = Set(group.map(\.1))
            if sides.count == 1 {
                // One side only: its hunks, in order, with the base between them.
                var p = start
                for (h, _) in group { out += b[p..<h.start]; out += h.lines; p = h.end }
                out += b[p..<end]
            } else {
                // Both sides: the same result, or a conflict.
                func result(_ isLocal: Bool) -> [Substring] {
                    var res: [Substring] = [], p = start
                    for (h, side) in group where side == isLocal { res += b[p..<h.start]; res += h.lines; p = h.end }
                    return res + b[p..<end]
                }
                let a = result(true), c = result(false)
                guard a == c else { return nil }
                out += a
            }
            pos = end
        }
        out += b[pos...]
        return out.joined()
    }

    /// Whether `h` touches the base range `start..<end` of a group: shares a line with it, inserts
    /// inside it (or at the same place as an insertion), or has an insertion inside it.
    static func overlaps(_ h: Hunk, _ start: Int, _ end: Int) -> Bool {
        if h.start < end && start < h.end { return true }
        let hEmpty = h.start == h.end, gEmpty = start == end
        if hEmpty && gEmpty { return h.start == start }
        if hEmpty { return h.start > start && h.start < end }
        if gEmpty { return start > h.start && start < h.end }
        return false
    }

    /// Base order; at one place an insertion comes before a replacement.
    static func comesFirst(_ a: Hunk, _ b: Hunk) -> Bool {
        if a.start != b.start { return a.start < b.start }
        return a.start == a.end || b.start != b.end
    }

    /// Lines with their line ends, so a missing final newline survives.
    static func lines(_ s: String) -> [Substring] {
        var out: [Substring] = []
        var from = s.startIndex
        var i = s.startIndex
        while i < s.endIndex {
            let next = s.index(after: i)
            if s[i] == "\n" { out.append(s[from..<next]); from = next }
            i = next
        }
        if from < s.endIndex { out.append(s[from...]) }
        return out
    }

    /// The edits that turn `base` into `other`, in base order (nil: too costly to compute).
    static func hunks(_ base: [Substring], _ other: [Substring]) -> [Hunk]? {
        guard base.count < 200_000, other.count < 200_000 else { return nil }
        let diff = other.difference(from: base)
        var removed = Set<Int>(), inserted = Set<Int>()
        for change in diff {
            switch change {
            case .remove(let offset, _, _): removed.insert(offset)
            case .insert(let offset, _, _): inserted.insert(offset)
            }
        }
        var out: [Hunk] = []
        var i = 0, j = 0
        while i < base.count || j < other.count {
            if i < base.count && j < other.count && !removed.contains(i) && !inserted.contains(j) { i += 1; j += 1; continue }
            let s = i
            var add: [Substring] = []
            while i < base.count && removed.contains(i) { i += 1 }
            while j < other.count && inserted.contains(j) { add.append(other[j]); j += 1 }
            if i == s && add.isEmpty { break }
            out.append(Hunk(start: s, end: i, lines: add))
        }
        return out
    }
}
