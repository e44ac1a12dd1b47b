import Foundation
import Logging
import MarfaModel
import MarfaStore

/// This mount's empty folders on a Marfa server (FS-32; the design is `FolderMarker`'s): after the
/// first sync, and again after any write to the store, the markers the tree needs are worked out
/// (`Store.folderMarkerWork`) and sent (`POST /items` with the marker's id, so a repeated send is
/// acknowledged) or removed (`DELETE /items/{id}`; a 404 is done). The type is registered once
/// (`POST /types`, which needs an admin key: a key that may not leaves empty folders on this
/// device, and the status says so). Outside the queue: a marker is no item and has no bytes.
final class FolderMarkers: Sendable {
    let store: Store
    let client: KeyedClient
    let status: SyncStatus
    let log: Logger
    let isLocalOnly: @Sendable (String) -> Bool

    /// How long an empty folder stays empty before it is given a marker.
    static let ripeAfter: Duration = .seconds(1)

    init(store: Store, client: KeyedClient, status: SyncStatus, log: Logger, isLocalOnly: @escaping @Sendable (String) -> Bool) {
        self.store = store; self.client = client; self.status = status; self.log = log; self.isLocalOnly = isLocalOnly
    }

    func run() async {
        var seen = -1, owed = false, registered = false
        // Empty folders with no marker, and since when they were seen empty: a folder gets its
        // marker once it has stayed empty for `ripeAfter` with no file being written (`cp -r` and
        // `rsync -a` fill each folder they make later: `rsync` makes a list's folders first).
        var emptySince: [String: ContinuousClock.Instant] = [:]
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(500))
            let count = store.commitCount
            guard count != seen || owed || store.hasPendingFolders, store.firstSyncDone else { continue }
            do {
                // While files are being written through the mount (a copy in progress), an empty
                // folder is likely one the tool has not filled yet: its wait starts again.
                let now = ContinuousClock.now, writing = !store.stagingIsEmpty
                let ripe = writing ? [] : Set(emptySince.filter { now - $0.value >= Self.ripeAfter }.keys)
                let work = try store.folderMarkerWork(isLocalOnly: isLocalOnly, ripe: ripe)
                seen = count
                emptySince = Dictionary(uniqueKeysWithValues: work.waiting.map { ($0, writing ? now : emptySince[$0] ?? now) })
                // Sends owed, or folders to look at again once they have waited.
                owed = !work.isEmpty || !work.waiting.isEmpty
                if work.isEmpty { continue }
                let client = client.client
                if !work.send.isEmpty && !registered {
                    try await register(client)
                    registered = true
                }
                for m in work.send {
                    try await client.call(WireRequest(method: "POST", path: "/items", body: .json([
                        "id": .string(m.id), "type": .string(FolderMarker.type), "properties": .object(["path": .string(m.path)]),
                    ])))
                    try store.folderMarkerSent(m.id)
                    status.record("folder.sent", ["path": .string(m.path), "marker": .string(m.id)])
                }
                for m in work.remove {
                    var r = WireRequest(method: "DELETE", path: "/items/\(WireRequest.segment(m.id))")
                    r.goneIsDone = true
                    try await client.call(r)
                    try store.folderMarkerRemoved(m.id)
                    status.record("folder.removed", ["path": .string(m.path), "marker": .string(m.id)])
                }
                owed = !work.waiting.isEmpty
            } catch {
                log.debug("sending empty folders failed; tried again", metadata: ["error": "\(error)"])
                // A refusal that waiting a moment does not mend (a key that may not register the
                // type or write its items, a type defined otherwise) is said, and tried now and then.
                let lasting = (error as? WireFailure).map { !$0.isRetryable } ?? false
                if lasting { status.record("folder.refused", ["error": .string("\(error)")]) }
                try? await Task.sleep(for: .seconds(lasting ? 60 : 2))
            }
        }
    }

    /// The marker's type on the server: there already (another device registered it), or
    /// registered now (`POST /types`: created, or there with the same definition).
    func register(_ client: WireClient) async throws {
        if try await client.send(WireRequest(method: "GET", path: "/types/\(FolderMarker.type)")).status == 200 { return }
        let r = try await client.send(WireRequest(method: "POST", path: "/types", body: .json(FolderMarker.definition)))
        guard (200..<300).contains(r.status) else { throw WireFailure.of(r) }
    }
}
