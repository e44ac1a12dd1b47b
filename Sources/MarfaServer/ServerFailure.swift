import Foundation
import GRDB
import PostgresNIO

/// Failures of the server's storage that are not the server's fault and pass: they are answered
/// with what the client can do about them, not as a 500. A marfafs mount retries every 5xx with
/// backoff (honouring `Retry-After`) and keeps the change queued meanwhile, so nothing is lost.
enum ServerFailure {
    struct Answer {
        let status: Int
        let code: String
        let message: String
        let retryAfter: Int?
    }

    static func answer(_ error: any Error) -> Answer? {
        if isNoSpace(error) {
            return Answer(status: 507, code: "insufficient_storage", message: "the server's disk is full; retry once it has room", retryAfter: 60)
        }
        if isUnreachable(error) {
            return Answer(status: 503, code: "service_unavailable", message: "the database cannot be reached now; retry", retryAfter: 1)
        }
        if isContention(error) {
            return Answer(status: 503, code: "write_contention", message: "the database is busy with other writes; retry", retryAfter: 1)
        }
        return nil
    }

    /// PostgreSQL cannot be reached now (down, restarting, refusing connections, or it ended the
    /// connection): the request is answered 503 with `Retry-After`, for the client to retry.
    static func isUnreachable(_ error: any Error) -> Bool {
        if error is PostgresSession.ConnectionLost || error is PostgresPool.Closed { return true }
        guard let e = error as? PSQLError else { return false }
        switch e.code {
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed:
            return true
        case .server:
            // Class 08 (connection exception), 57P01–57P04 (shut down, crashed, starting up,
            // database dropped).
            let state = e.serverInfo?[.sqlState] ?? ""
            return state.hasPrefix("08") || state.hasPrefix("57P")
        default:
            return false
        }
    }

    /// The disk (or the database's quota of it) is full: SQLite's SQLITE_FULL, PostgreSQL's
    /// 53100, or ENOSPC from a file the server writes (an upload's spool).
    static func isNoSpace(_ error: any Error) -> Bool {
        if let e = error as? DatabaseError { return e.resultCode == .SQLITE_FULL }
        if let e = error as? PSQLError { return e.serverInfo?[.sqlState] == "53100" }
        if let e = error as? CocoaError, e.code == .fileWriteOutOfSpace { return true }
        let ns = error as NSError
        if ns.domain == NSPOSIXErrorDomain { return ns.code == Int(ENOSPC) }
        if let underlying = ns.userInfo[NSUnderlyingErrorKey] as? NSError { return isNoSpace(underlying) }
        return false
    }

    /// Writers got in each other's way past what the server waits or retries for: SQLite still
    /// busy after its 10 s timeout (another process holds the file), PostgreSQL's serialization
    /// failure or deadlock after eight runs.
    static func isContention(_ error: any Error) -> Bool {
        if let e = error as? DatabaseError { return e.resultCode == .SQLITE_BUSY || e.resultCode == .SQLITE_LOCKED }
        if let e = error as? PSQLError { return ["40001", "40P01"].contains(e.serverInfo?[.sqlState] ?? "") }
        return false
    }

    /// A failure for the server's log: for PostgreSQL, its code, SQLSTATE and message, never the
    /// query or its values (an item's text, a key's lookup prefix), which postgres-nio's own
    /// description would carry.
    static func describe(_ error: any Error) -> String {
        guard let e = error as? PSQLError else { return String(describing: error) }
        if e.code == .sslUnsupported { return "PostgreSQL does not accept TLS there (sslmode=require); use sslmode=prefer or disable" }
        var out = "PostgreSQL \(e.code)"
        if let state = e.serverInfo?[.sqlState] { out += " \(state)" }
        if let message = e.serverInfo?[.message] { out += ": \(message)" }
        if let underlying = e.underlying { out += " (\(underlying))" }
        return out
    }
}
