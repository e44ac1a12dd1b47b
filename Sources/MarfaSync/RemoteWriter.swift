import Foundation
import MarfaModel
import MarfaStore

/// What one queued mutation became at the remote.
public enum PushResult: Sendable {
    /// The remote took it: the acknowledgement to record (with the answer, if any).
    case acked(Acknowledgement)
    /// It left the line another way, with what that changed in the store (a concurrent edit
    /// merged, a conflicted copy kept, nothing left to send).
    case settled(StoreChanges)
    /// It cannot be sent as it is: refused here, the item keeps its bytes.
    case unsendable(String)
    /// The remote did not take it: the queue retries, pauses or refuses as the failure says.
    case failed(WireFailure)
}

/// The one place a kind of remote differs in sending (FS-34): the queue's order, batching, backoff,
/// pause on a refused credential and its status are `QueueDrainer`'s, shared by every kind.
/// `MarfaWriter` sends a mutation as its wire call (W-5); `MyLifeDBWriter` sends the item's file as
/// it is now. Guarantees asked of a writer: `push` never throws, never touches the mount, and is
/// safe to call again for the same mutation after a failure (the remote may have taken it).
public protocol RemoteWriter: Sendable {
    /// Whether the remote is there and takes the credential; throws the failure if not.
    func probe(_ client: WireClient) async throws
    /// Sends `m`. `acknowledgedVersion`: the item's version the remote acknowledged earlier in this
    /// run, if any.
    func push(_ m: Mutation, acknowledgedVersion: Int64?, client: WireClient) async -> PushResult
}

/// A Marfa server's writer: each mutation is its wire call under its idempotency key.
struct MarfaWriter: RemoteWriter {
    let store: Store
    let status: SyncStatus

    func probe(_ client: WireClient) async throws {
        try await client.call(WireRequest(method: "GET", path: "/tenants/current"))
    }

    func push(_ m: Mutation, acknowledgedVersion: Int64?, client: WireClient) async -> PushResult {
        let request: WireRequest
        do {
            var base: Int64?
            if m.kind == .update {
                let known = max(try store.serverVersion(itemID: m.itemID), acknowledgedVersion ?? 0)
                if case .int(let b)? = m.payload["base_version"], b > known { base = b } else if known > 0 { base = known }
            }
            request = try WireRequest.sending(m, baseVersion: base, blob: { try store.blobBytes(hash: $0) })
        } catch {
            return .unsendable("cannot send: \(error)")
        }
        // A blob's upload reports its progress (`blob.upload.*`, `.marfafs/transfers`).
        var progress: (@Sendable (Int64) -> Void)?
        var blobHash: String?
        if m.kind == .uploadBlob, let hash = m.payload["hash"]?.stringValue, case .bytes(let b, _) = request.body {
            blobHash = hash
            status.transferStarted("upload", hash: hash, item: m.itemID, total: Int64(b.count), restarted: m.attempts > 0)
            let status = status
            progress = { status.transferProgress(hash: hash, done: $0) }
        }
        do {
            let resp: WireResponse
            do { resp = try await client.call(request, progress: progress) } catch {
                if let blobHash { status.transferEnded(hash: blobHash, error: "\(error)") }
                throw error
            }
            if let blobHash { status.transferEnded(hash: blobHash, error: nil) }
            let json = resp.json
            let version: Int64? = { if case .int(let v)? = json["item"]?.objectValue?["version"] { return v }; return nil }()
            return .acked(Acknowledgement(seq: m.seq, itemID: m.itemID, serverVersion: version, answer: RemoteWire.envelope(json)))
        } catch let f as WireFailure {
            return .failed(f)
        } catch {
            return .unsendable("\(error)")
        }
    }
}
