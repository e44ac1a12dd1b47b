import Foundation
import Hummingbird
import Logging
import NIOCore

/// `marfafs serve`: the reference server of wire.md on Hummingbird 2.
public enum ReferenceServer {
    public struct Options: Sendable {
        public var db: String
        public var host = "127.0.0.1"
        public var port = 8600
        public var maxBody = 16 << 20
        /// Requests per minute per credential (W-4); nil: no limit.
        public var rateLimit: Int?
        public init(db: String) { self.db = db }
    }

    /// Serves until SIGTERM or SIGINT (graceful shutdown); `onListening` gets the bound address.
    public static func run(_ o: Options, logger: Logger, onListening: @escaping @Sendable (String) -> Void) async throws {
        let store = try ServerStore(path: o.db)
        let router = Router()
        router.add(middleware: EnvelopeMiddleware<BasicRequestContext>(log: logger))
        if let limit = o.rateLimit { router.add(middleware: RateLimitMiddleware<BasicRequestContext>(limit: limit, log: logger)) }
        API(store: store, maxBody: o.maxBody).register(router)
        let app = Application(
            router: router,
            configuration: .init(address: .hostname(o.host, port: o.port), serverName: "marfafs"),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? o.port
                onListening("http://\(o.host):\(port)")
            },
            logger: logger
        )
        try await app.runService()
    }

    /// `marfafs serve --init`: the first admin key, written to a 0600 file; nil if keys exist.
    public static func initialize(db: String, keyFile: String) throws -> String? {
        let store = try ServerStore(path: db)
        guard let (_, key) = try store.bootstrap() else { return nil }
        let fd = open(keyFile, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw APIError(500, "internal_error", "cannot write \(keyFile): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        fchmod(fd, 0o600)
        let line = key + "\n"
        _ = line.withCString { write(fd, $0, strlen($0)) }
        return keyFile
    }
}
