import Foundation
import Synchronization

/// On a database other processes write too (PostgreSQL), this process's memory of each
/// tenant's newest events: the log is read once per wake-up for all of the tenant's streams here,
/// not once per stream, and a stream woken by its ping reads nothing.
///
/// Per tenant it holds every event of the log with an id in (floor, head], in id order (ids are
/// one sequence per tenant, visible in id order). A wake-up says up to which id the tenant's log
/// is known to reach (`announce`), or that it may have grown unseen (`refreshAll`, after a lost
/// connection); memory behind that is brought up to date by one reader while the others wait.
final class SharedEventLog: Sendable {
    typealias Event = ServerStore.LoggedEvent

    private struct Tenant {
        var floor: Int64?
        var head: Int64 = 0
        var events: [Event] = []
        /// The newest id announced for the tenant.
        var known: Int64 = 0
        /// The log may have grown past `known` (a wake-up without an id).
        var refresh = true
        var current: Bool { floor != nil && !refresh && head >= known }
    }

    private let tenants = Mutex<[String: Tenant]>([:])
    /// One reader of the log per tenant at a time.
    private let readers = Mutex<[String: NSLock]>([:])
    static let keep = 4096
    static let page = 500

    /// The tenant's log reaches `id`.
    func announce(tenant: String, upTo id: Int64) {
        tenants.withLock { t in t[tenant, default: Tenant()].known = max(t[tenant]?.known ?? 0, id) }
    }

    /// Every tenant's log may have grown without an announcement.
    func refreshAll() {
        tenants.withLock { t in for k in t.keys { t[k]!.refresh = true } }
    }

    /// The tenant's events after `id` (at most `limit`), from memory, brought up to date first by
    /// `read(after, limit)` (a read of the log) if it is behind; nil when `id` is older than what
    /// memory holds (the caller reads the log itself).
    func events(tenant: String, after id: Int64, limit: Int, read: (Int64, Int) throws -> [Event]) throws -> [Event]? {
        if let hit = slice(tenant, after: id, limit: limit) { return hit }
        let reader = readers.withLock { r in
            if let l = r[tenant] { return l }
            let l = NSLock()
            r[tenant] = l
            return l
        }
        try reader.withLock {
            // Another stream may have brought it up to date meanwhile. Under a steady stream of
            // writes it may never be quite current: a few reads, then what it holds (the streams
            // are woken again by the announcements that came meanwhile).
            for _ in 0..<4 where !tenants.withLock({ $0[tenant]?.current ?? false }) { try catchUp(tenant, from: id, read: read) }
        }
        return slice(tenant, after: id, limit: limit, current: false)
    }

    /// One read of the log after what memory holds (after `id` if it holds nothing yet).
    private func catchUp(_ tenant: String, from id: Int64, read: (Int64, Int) throws -> [Event]) throws {
        let (after, announced) = tenants.withLock { t -> (Int64, Int64) in
            var s = t[tenant, default: Tenant()]
            if s.floor == nil { s.floor = id; s.head = id }
            s.refresh = false
            t[tenant] = s
            return (s.head, s.known)
        }
        let fresh = try read(after, Self.page)
        tenants.withLock { t in
            var s = t[tenant]!
            s.events += fresh
            s.head = fresh.last?.id ?? s.head
            if fresh.count == Self.page {
                s.refresh = true
            } else if s.known == announced {
                // The log's end as this read saw it; an id announced but not there was pruned.
                s.known = s.head
            }
            if s.events.count > Self.keep {
                let drop = s.events.count - Self.keep
                s.floor = s.events[drop - 1].id
                s.events.removeFirst(drop)
            }
            t[tenant] = s
        }
    }

    /// The events after `id` from memory if it holds them (and is current, unless `current` is false).
    private func slice(_ tenant: String, after id: Int64, limit: Int, current: Bool = true) -> [Event]? {
        tenants.withLock { t -> [Event]? in
            guard let s = t[tenant], s.current || !current, let floor = s.floor, id >= floor else { return nil }
            var lo = 0, hi = s.events.count
            while lo < hi { let mid = (lo + hi) / 2; if s.events[mid].id <= id { lo = mid + 1 } else { hi = mid } }
            return Array(s.events[lo..<min(s.events.count, lo + limit)])
        }
    }
}
