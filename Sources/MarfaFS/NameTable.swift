import MarfaLayout

/// The names of one directory, kept up to date one claim at a time (FS-7).
/// Not thread-safe: the filesystem's lock guards it.
final class NameTable {
    private(set) var claims: [Int64: NameClaim] = [:]
    /// Claims per base name; almost every name has one, kept without a set of its own.
    private var groups: [String: Group] = [:]

    enum Group {
        case one(Int64)
        case many(Set<Int64>)
        var keys: Set<Int64> { switch self { case .one(let k): return [k]; case .many(let s): return s } }
        func allSatisfy(_ p: (Int64) -> Bool) -> Bool {
            switch self { case .one(let k): return p(k); case .many(let s): return s.allSatisfy(p) }
        }
        func inserting(_ k: Int64) -> Group {
            switch self {
            case .one(let o): return o == k ? self : .many([o, k])
            case .many(var s): s.insert(k); return .many(s)
            }
        }
        /// nil when empty.
        func removing(_ k: Int64) -> Group? {
            switch self {
            case .one(let o): return o == k ? nil : self
            case .many(var s):
                s.remove(k)
                if s.count == 1 { return .one(s.first!) }
                return s.isEmpty ? nil : .many(s)
            }
        }
    }

    private func add(_ k: Int64, to base: String) { groups[base] = groups[base].map { $0.inserting(k) } ?? .one(k) }
    private func drop(_ k: Int64, from base: String) { groups[base] = groups[base]?.removing(k) }
    private(set) var nameOf: [Int64: String] = [:]
    private(set) var keyOf: [String: Int64] = [:]
    private var sortedNames: [String]?

    init(_ list: [NameClaim] = []) {
        claims.reserveCapacity(list.count)
        groups.reserveCapacity(list.count)
        nameOf.reserveCapacity(list.count)
        keyOf.reserveCapacity(list.count)
        for c in list { claims[c.key] = c; add(c.key, to: c.baseName) }
        for (_, g) in groups { assign(g.keys) }
    }

    var count: Int { claims.count }

    func sorted() -> [String] {
        if let s = sortedNames { return s }
        let s = keyOf.keys.sorted()
        sortedNames = s
        return s
    }

    /// Adds or replaces a claim; returns every name that appeared or disappeared.
    @discardableResult
    func upsert(_ c: NameClaim) -> [String] {
        let old = claims[c.key]
        if let old, old.stem == c.stem, old.ext == c.ext, old.createdAt == c.createdAt { return [] }
        // A new claim that sorts after every claim of its name (a new file: the newest) takes the
        // collision suffix and changes no other name (FS-7).
        if old == nil, let g = groups[c.baseName], g.allSatisfy({ k in claims[k].map { ($0.createdAt, $0.id) < (c.createdAt, c.id) } ?? false }) {
            return appendLast(c, to: g)
        }
        if let only = alone(c, old: old) { return only }
        var affected = Set<String>()
        if let old { affected.insert(old.baseName); drop(c.key, from: old.baseName) }
        claims[c.key] = c
        add(c.key, to: c.baseName)
        affected.insert(c.baseName)
        return reassign(bases: affected)
    }

    /// A claim that was alone with its name, if it had one (a new file, or one renamed from a
    /// name of its own: `rsync`'s temporary file), and now asks for a name no one has or sorts
    /// after every claim of it (FS-7: it takes the collision suffix): only its own names change,
    /// as `reassign` would find, without its sets. nil for any other claim.
    private func alone(_ c: NameClaim, old: NameClaim?) -> [String]? {
        let base = c.baseName
        if let old {
            guard old.baseName != base, case .one(let k)? = groups[old.baseName], k == c.key else { return nil }
        }
        let g = groups[base]
        if let g, !g.allSatisfy({ k in claims[k].map { ($0.createdAt, $0.id) < (c.createdAt, c.id) } ?? false }) { return nil }
        var changed: [String] = []
        if let old {
            groups[old.baseName] = nil
            if let n = nameOf.removeValue(forKey: c.key) {
                if keyOf[n] == c.key { keyOf.removeValue(forKey: n) }
                changed.append(n)
            }
        }
        if let g { return changed + appendLast(c, to: g) }
        claims[c.key] = c
        groups[base] = .one(c.key)
        nameOf[c.key] = base
        keyOf[base] = c.key
        sortedNames = nil
        changed.append(base)
        return changed
    }

    private func appendLast(_ c: NameClaim, to g: Group) -> [String] {
        claims[c.key] = c
        groups[c.baseName] = g.inserting(c.key)
        let n = Names.compose(stem: c.stem, suffix: Names.collisionSuffix(id: c.id), ext: c.ext)
        nameOf[c.key] = n
        keyOf[n] = c.key
        sortedNames = nil
        return [n]
    }

    @discardableResult
    func remove(_ key: Int64) -> [String] {
        guard let old = claims.removeValue(forKey: key) else { return [] }
        drop(key, from: old.baseName)
        var changed: [String] = []
        if let n = nameOf.removeValue(forKey: key) { keyOf.removeValue(forKey: n); changed.append(n) }
        sortedNames = nil
        return changed + reassign(bases: [old.baseName])
    }

    private func reassign(bases: Set<String>) -> [String] {
        var changed: [String] = []
        for b in bases {
            let keys = groups[b]?.keys ?? []
            let before = keys.compactMap { k in nameOf[k].map { (k, $0) } }
            for (k, n) in before { if keyOf[n] == k { keyOf.removeValue(forKey: n) }; nameOf.removeValue(forKey: k) }
            assign(keys)
            for (k, n) in before where nameOf[k] != n { changed.append(n); if let m = nameOf[k] { changed.append(m) } }
            for k in keys where !before.contains(where: { $0.0 == k }) { if let m = nameOf[k] { changed.append(m) } }
        }
        sortedNames = nil
        return changed
    }

    private func assign(_ keys: Set<Int64>) {
        let group = keys.compactMap { claims[$0] }
        for (k, n) in Names.resolve(group: group) { nameOf[k] = n; keyOf[n] = k }
        sortedNames = nil
    }
}
