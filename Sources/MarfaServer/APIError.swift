import Foundation
import MarfaModel

/// A refusal in the W-3 envelope: `{"error": {"code", "message", "details"?}}` plus, for a few
/// codes (W-7), context beside `error`.
public struct APIError: Error, Sendable, CustomStringConvertible {
    public var status: Int
    public var code: String
    public var message: String
    public var details: [String: JSONValue]?
    public var extra: [String: JSONValue] = [:]

    public init(_ status: Int, _ code: String, _ message: String, details: [String: JSONValue]? = nil, extra: [String: JSONValue] = [:]) {
        self.status = status; self.code = code; self.message = message; self.details = details; self.extra = extra
    }

    public var description: String { "\(status) \(code): \(message)" }

    public var body: [String: JSONValue] {
        var error: [String: JSONValue] = ["code": .string(code), "message": .string(message)]
        if let details { error["details"] = .object(details) }
        if code == "version_conflict" || code == "ancestor_unavailable" { error["status"] = .int(Int64(status)) }
        return extra.merging(["error": .object(error)]) { _, new in new }
    }

    static func validation(_ message: String, field: String? = nil) -> APIError {
        APIError(400, "validation_error", message, details: field.map { ["field": .string($0)] })
    }
    static func missing(_ field: String) -> APIError {
        APIError(400, "missing_required_field", "\(field) is required", details: ["field": .string(field)])
    }
    static let unauthorized = APIError(401, "unauthorized", "a valid API key is required (Authorization: Bearer marfa_k1_…)")
    static func itemNotFound(_ id: String) -> APIError { APIError(404, "item_not_found", "no item \(id)") }
}
