import MarfaLayout

/// The names of one directory, kept up to date one claim at a time (FS-7).
/// Not thread-safe: the filesystem's lock guards it.
final class NameTable {
    private(set) var claims: [Int64: NameClaim] = [:]
    private var groups: [String: Set<Int64>] = [:]
    private(set) var nameOf: [Int64: String] = [:]
    private(set) var keyOf: [String: Int64] = [:]
    private var sortedNames: [String]?

    init(_ list: [NameClaim] = []) {
        for c in list { claims[c.key] = c; groups[c.baseName, default: []].insert(c.key) }
        for (_, keys) in groups { assign(keys) }
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
        var affected = Set<String>()
        if let old { affected.insert(old.baseName); groups[old.baseName]?.remove(c.key) }
        claims[c.key] = c
        groups[c.baseName, default: []].insert(c.key)
        affected.insert(c.baseName)
        return reassign(bases: affected)
    }

    @discardableResult
    func remove(_ key: Int64) -> [String] {
        guard let old = claims.removeValue(forKey: key) else { return [] }
        groups[old.baseName]?.remove(key)
        var changed: [String] = []
        if let n = nameOf.removeValue(forKey: key) { keyOf.removeValue(forKey: n); changed.append(n) }
        sortedNames = nil
        return changed + reassign(bases: [old.baseName])
    }

    private func reassign(bases: Set<String>) -> [String] {
        var changed: [String] = []
        for b in bases {
            let keys = groups[b] ?? []
            if keys.isEmpty { groups.removeValue(forKey: b) }
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
