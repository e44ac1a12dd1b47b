import Foundation

/// A directory of its own for one test, removed when the value goes away.
public final class TempDirectory: @unchecked Sendable {
    public let path: String

    public init(_ prefix: String = "marfafs") throws {
        path = NSTemporaryDirectory() + prefix + "-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}
