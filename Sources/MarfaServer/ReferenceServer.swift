import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle

/// `marfafs serve`: the reference server of wire.md on Hummingbird 2.
public enum ReferenceServer {
    public struct Options: Sendable {
        public var db: String
        public var host = "127.0.0.1"
        public var port = 8600
        public var maxBody = 16 << 20
        /// The largest blob accepted by `POST /blobs`.
        public var maxBlob = 256 << 20
        /// Requests per minute per credential (W-4); nil: no limit.
        public var rateLimit: Int?
        /// How long the event log keeps events (W-17: older `Last-Event-ID`s get `catchup_too_old`).
        public var eventRetention: Duration = .seconds(72 * 3600)
        /// The `: ping` interval of an idle event stream (W-14).
        public var heartbeat: Duration = .seconds(30)
        /// Seconds a connection may go without reading or writing, outside a response being
        /// written: an idle keep-alive connection, headers or a body sent too slowly. An event
        /// stream is never idle (its pings).
        public var idleTimeout: Int64 = 60
        public init(db: String) { self.db = db }
    }

    /// Serves until SIGTERM or SIGINT (graceful shutdown); `onListening` gets the bound address.
    public static func run(_ o: Options, logger: Logger, onListening: @escaping @Sendable (String) -> Void) async throws {
        let store = try ServerStore(db: o.db, log: logger)
        let router = Router()
        let routes = RouteTable()
        if store.waitingRequests > 0 {
            router.add(middleware: DatabaseThreads<BasicRequestContext>(threads: store.waitingRequests))
        }
        router.add(middleware: EnvelopeMiddleware<BasicRequestContext>(log: logger, routes: routes))
        if let limit = o.rateLimit { router.add(middleware: RateLimitMiddleware<BasicRequestContext>(limit: limit, log: logger)) }
        API(store: store, maxBody: o.maxBody, maxBlob: o.maxBlob, eventRetention: o.eventRetention, heartbeat: o.heartbeat).register(router, table: routes)
        raiseFileLimit(logger)
        let app = Application(
            router: router,
            server: .http1(configuration: .init(idleTimeout: .seconds(o.idleTimeout))),
            configuration: .init(address: .hostname(o.host, port: o.port), serverName: "marfafs"),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? o.port
                onListening("http://\(o.host):\(port)")
            },
            logger: logger
        )
        // Services stop in reverse order: the event log's keeper first, which ends the open event
        // streams, so the HTTP server's graceful shutdown does not wait on them.
        let group = ServiceGroup(configuration: .init(
            services: [app, EventLogKeeper(store: store, retention: o.eventRetention, log: logger)],
            gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }

    /// `marfafs serve --init`: the first admin key, written to a 0600 file; nil if keys exist.
    public static func initialize(db: String, keyFile: String) throws -> String? {
        let store = try ServerStore(db: db)
        defer { store.close() }
        guard let (_, key) = try store.bootstrap() else { return nil }
        let fd = open(keyFile, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw APIError(500, "internal_error", "cannot write \(keyFile): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        fchmod(fd, 0o600)
        let line = key + "\n"
        _ = line.withCString { write(fd, $0, strlen($0)) }
        return keyFile
    }

    /// Open connections each take a file descriptor: the soft limit goes up to the hard one, so
    /// a thousand idle clients do not stop new connections from being accepted.
    static func raiseFileLimit(_ log: Logger) {
        var lim = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &lim) == 0, lim.rlim_cur < lim.rlim_max else { return }
        lim.rlim_cur = min(lim.rlim_max, 1 << 20)
        if setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &lim) != 0 { log.warning("could not raise the open-file limit", metadata: ["errno": "\(errno)"]) }
}

/// Prunes the event log past its retention, now and then; at shutdown, ends the event streams.
struct EventLogKeeper: Service {
    let store: ServerStore
    let retention: Duration
    let log: Logger

    func run() async throws {
        let every = min(retention / 2, .seconds(60))
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do { try store.pruneEvents(retention: retention) } catch { log.error("pruning the event log failed", metadata: ["error": "\(error)"]) }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: every) }
        }
        store.close()
    }

    }
}
