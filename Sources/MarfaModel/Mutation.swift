import Foundation

/// What a queued mutation asks the server to do (wire.md §2, §4).
public enum MutationKind: String, Codable, Sendable, CaseIterable {
    case create            // POST /items
    case update            // PATCH /items/{id}
    case transition        // POST /items/{id}/transition
    case setTags = "set_tags"   // PUT /items/{id}/metadata
    case createEdge = "create_edge"  // POST /edges
    case deleteEdge = "delete_edge"  // DELETE /edges/{id}
    case uploadBlob = "upload_blob"  // POST /blobs
}

/// Where a queued mutation stands (the `state` column of `mutations`).
public enum MutationState: String, Codable, Sendable, CaseIterable {
    /// Waiting to be sent.
    case pending
    /// Sent at least once with no answer yet: it is sent again under the same key (W-5).
    case sending
    /// Held: the server refused it with a version conflict the policy leaves to the user (FS-20).
    case conflict
    /// Refused by the server for good (a 4xx other than a conflict); kept for the user.
    case rejected
}

/// One queued local change, with the idempotency key it keeps on every retry (W-5).
public struct Mutation: Hashable, Sendable {
    public var seq: Int64
    public var id: String
    public var idempotencyKey: String
    public var kind: MutationKind
    public var itemID: String
    public var payload: [String: JSONValue]
    public var createdAt: String
    public var state: MutationState
    public var attempts: Int
    public var lastError: String?

    public init(seq: Int64, id: String, idempotencyKey: String, kind: MutationKind, itemID: String,
                payload: [String: JSONValue], createdAt: String, state: MutationState = .pending, attempts: Int = 0,
                lastError: String? = nil) {
        self.seq = seq; self.id = id; self.idempotencyKey = idempotencyKey; self.kind = kind; self.itemID = itemID
        self.payload = payload; self.createdAt = createdAt; self.state = state; self.attempts = attempts
        self.lastError = lastError
    }
}
