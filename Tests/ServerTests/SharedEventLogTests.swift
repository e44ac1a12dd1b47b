import Foundation
@testable import MarfaServer
import Testing

/// The memory a process keeps of each tenant's newest events on a shared database: every
/// stream gets exactly the log's events, and the log is read once per wake-up, not per stream.
@Suite struct SharedEventLogTests {
    typealias Event = ServerStore.LoggedEvent

    /// A tenant's log, as the database would answer `id > after ORDER BY id LIMIT n`.
    final class Log: @unchecked Sendable {
        let lock = NSLock()
        var events: [Event] = []
        var reads = 0
        func append(_ n: Int) -> Int64 {
            lock.withLock {
                let start = events.last?.id ?? 0
                for i in 1...n { events.append(Event(id: start + Int64(i), tenantID: "t", name: "item.created", data: "\(start + Int64(i))")) }
                return events.last!.id
            }
        }
        func prune(through id: Int64) { lock.withLock { events.removeAll { $0.id <= id } } }
        func read(after: Int64, limit: Int) -> [Event] {
            lock.withLock { reads += 1; return Array(events.filter { $0.id > after }.prefix(limit)) }
        }
    }

    @Test func W17_manyStreamsOfATenantReadTheLogOncePerWakeUpAndGetEveryEvent() throws {
        let shared = SharedEventLog(), log = Log()
        @Sendable func take(_ after: Int64) throws -> [Int64]? {
            try shared.events(tenant: "t", after: after, limit: 500, read: { log.read(after: $0, limit: $1) })?.map(\.id)
        }
        #expect(try take(0) == [], "nothing yet")
        shared.announce(tenant: "t", upTo: log.append(3))
        let before = log.reads
        // 50 streams at the same place, at once: one read between them.
        let got = Locked([[Int64]?]())
        let group = DispatchGroup()
        for _ in 0..<50 {
            group.enter()
            Thread { let r = try? take(0); got.withLock { $0.append(r) }; group.leave() }.start()
        }
        group.wait()
        #expect(got.withLock { $0 }.allSatisfy { $0 == [1, 2, 3] })
        #expect(log.reads - before == 1, "one read for 50 streams: \(log.reads - before)")
        // A wake-up with no new id (a ping) reads nothing.
        #expect(try take(3) == [] && log.reads - before == 1)
        // More than a page behind: read in pages, every event once and in order.
        shared.announce(tenant: "t", upTo: log.append(1_200))
        #expect(try take(3) == Array(4...503))
        #expect(try take(503) == Array(504...1003))
        #expect(try take(1003) == Array(1004...1203))
        // A wake-up without an id (a lost connection) reads the log again.
        _ = log.append(2)
        shared.refreshAll()
        #expect(try take(1203) == [1204, 1205])
        // Announced, then pruned before it was read: no endless reading, the rest still comes.
        shared.announce(tenant: "t", upTo: log.append(5))
        log.prune(through: 1208)
        #expect(try take(1205) == [1209, 1210])
        shared.announce(tenant: "t", upTo: log.append(1))
        #expect(try take(1210) == [1211])
        // A stream from before what memory holds reads the log itself.
        #expect(try take(-1) == nil)
    }
}
