import Foundation
import MarfaStore

/// What went wrong in a filesystem operation; `errno` is the one table that maps it (architecture.md).
public struct FSError: Error, CustomStringConvertible {
    public enum Code: Sendable, CaseIterable {
        case notFound, exists, notEmpty, badName, nameTooLong, readOnly, notPermitted, crossView, stale
        case noSpace, noData, invalid, tooLarge, notDirectory, isDirectory, io, noAttributeSpace, rangeError, notSupported, interrupted
    }
    public var code: Code
    public var message: String
    /// The errno a system call gave, passed on as it is (local-only files, FS-32).
    public var systemErrno: Int32?
    public init(_ code: Code, _ message: String) { self.code = code; self.message = message }

    /// A failed system call's errno, kept exact; `code` is the nearest condition.
    public static func system(_ err: Int32, _ message: String) -> FSError {
        let code: Code = switch err {
        case ENOENT: .notFound
        case EEXIST: .exists
        case ENOTEMPTY: .notEmpty
        case ENAMETOOLONG: .nameTooLong
        case EPERM, EACCES: .notPermitted
        case EXDEV: .crossView
        case ENOSPC, EDQUOT: .noSpace
        case ENODATA: .noData
        case EFBIG: .tooLarge
        case ENOTDIR: .notDirectory
        case EISDIR: .isDirectory
        case ERANGE: .rangeError
        case E2BIG: .noAttributeSpace
        case EOPNOTSUPP: .notSupported
        default: .invalid
        }
        var e = FSError(code, message + ": " + String(cString: strerror(err)))
        e.systemErrno = err
        return e
    }
    public var description: String { "\(code): \(message)" }

    /// The errno for a condition. Exhaustive on purpose: no `default`.
    public static func errno(_ code: Code) -> Int32 {
        switch code {
        case .notFound: return ENOENT
        case .exists: return EEXIST
        case .notEmpty: return ENOTEMPTY
        case .badName: return EINVAL
        case .nameTooLong: return ENAMETOOLONG
        case .readOnly: return EROFS
        case .notPermitted: return EPERM
        case .crossView: return EXDEV
        case .stale: return ESTALE
        case .noSpace: return ENOSPC
        case .noData: return ENODATA
        case .invalid: return EINVAL
        case .tooLarge: return EFBIG
        case .notDirectory: return ENOTDIR
        case .isDirectory: return EISDIR
        case .io: return EIO
        case .noAttributeSpace: return E2BIG
        case .rangeError: return ERANGE
        case .notSupported: return EOPNOTSUPP
        case .interrupted: return EINTR
        }
    }

    public var errno: Int32 { systemErrno ?? Self.errno(code) }

    /// Store errors in filesystem terms; anything unexpected is EIO (logged once at the boundary).
    static func from(_ error: Error) -> FSError {
        if let e = error as? FSError { return e }
        if let e = error as? StoreError {
            switch e {
            case .notFound(let m): return FSError(.notFound, m)
            case .exists(let m): return FSError(.exists, m)
            case .tooLarge(let m): return FSError(.tooLarge, m)
            case .notEmpty(let m): return FSError(.notEmpty, m)
            case .io(let m): return FSError(.io, m)
            case .noSpace(let m): return FSError(.noSpace, m)
            }
        }
        let text = String(describing: error)
        if let e = Store.storeError(error) as? StoreError, case .noSpace(let m) = e { return FSError(.noSpace, m) }
        return FSError(.io, text)
    }
}
