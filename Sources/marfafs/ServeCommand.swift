import ArgumentParser
import Foundation
import Logging
import MarfaServer

/// `marfafs serve`: the reference server (wire.md), for tests and self-hosting.
struct ServeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the Marfa-compatible reference server.",
        discussion: "Prints the bound address (`listening on http://HOST:PORT`; --port 0 picks a free port). SIGTERM or SIGINT stops it gracefully.")

    @Option(help: "The server's database: a SQLite file (the default, $XDG_DATA_HOME/marfafs/server.sqlite) or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (several serve processes may share it). Default: $MARFAFS_DB if set.")
    var db: String?

    @Flag(help: "Apply the database's schema migrations, print the ones applied, and exit.")
    var migrateOnly = false

    @Option(help: "Where --init writes the admin key. Default: the SQLite file's path + .admin-key; for PostgreSQL, $XDG_DATA_HOME/marfafs/server.admin-key.")
    var keyFile: String?

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "Port to listen on (0: any free port).")
    var port = 8600

    @Option(help: "Requests per minute per API key (W-4 headers and 429 past it). Default: no limit.")
    var rateLimit: Int?

    @Option(help: "How long the event log keeps events, e.g. 72h, 30m, 90s, 7d. A Last-Event-ID older than that gets catchup_too_old.")
    var eventRetention = "72h"

    @Option(help: ArgumentHelp("Seconds between `: ping` comments on an idle event stream.", visibility: .hidden))
    var heartbeat = 30.0

    @Option(help: "Seconds a connection may stay idle, or send its headers or body, without a byte before it is closed.")
    var idleTimeout = 60

    @Option(help: "The largest blob POST /blobs accepts, in MiB.")
    var maxBlobMib = 256

    @Flag(help: "On a server with no keys, create the first tenant and its admin key, write the key to a 0600 file beside the database, print the file's path, and exit.")
    var `init` = false

    func run() throws {
        let dataDir = (Paths.defaultStore() as NSString).deletingLastPathComponent
        let given = db ?? ProcessInfo.processInfo.environment["MARFAFS_DB"].flatMap { $0.isEmpty ? nil : $0 }
        if let given { try ServerStore.checkLocation(given) }
        let isPostgres = given.map(ServerStore.isPostgres) ?? false
        let dbPath = isPostgres ? given! : Paths.absolute(given ?? dataDir + "/server.sqlite")
        if migrateOnly {
            for id in try ServerStore.migrateOnly(db: dbPath, log: Logger(label: "marfafs.serve")) { print("applied \(id)") }
            return
        }
        if self.`init` {
            let keyFile = keyFile.map(Paths.absolute) ?? (isPostgres ? dataDir + "/server.admin-key" : dbPath + ".admin-key")
            try FileManager.default.createDirectory(atPath: (keyFile as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            guard let path = try ReferenceServer.initialize(db: dbPath, keyFile: keyFile) else {
                throw CLIError("\(dbPath) already has keys; manage them with POST /keys and an admin key", code: Exit.busy)
            }
            print(path)
            return
        }
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = .info
            return h
        }
        var options = ReferenceServer.Options(db: dbPath)
        options.host = host
        options.port = port
        guard let retention = Self.duration(eventRetention) else {
            throw ValidationError("--event-retention is a number and a unit: 90s, 30m, 72h, 7d")
        }
        options.eventRetention = retention
        guard heartbeat >= 0.05 else { throw ValidationError("--heartbeat must be at least 0.05 s") }
        options.heartbeat = .milliseconds(Int64(heartbeat * 1000))
        guard idleTimeout >= 1 else { throw ValidationError("--idle-timeout must be at least 1 s") }
        options.idleTimeout = Int64(idleTimeout)
        guard maxBlobMib >= 1 else { throw ValidationError("--max-blob-mib must be at least 1") }
        options.maxBlob = maxBlobMib << 20
        if let rateLimit {
            guard rateLimit > 0 else { throw ValidationError("--rate-limit must be at least 1") }
            options.rateLimit = rateLimit
        }
        final class Outcome: @unchecked Sendable { var error: Error? }
        let outcome = Outcome()
        let done = DispatchSemaphore(value: 0)
        Task {
            do {
                try await ReferenceServer.run(options, logger: Logger(label: "marfafs.serve")) { address in
                    // Unbuffered, so a supervisor or a test reads the address at once.
                    FileHandle.standardOutput.write(Data("listening on \(address)\n".utf8))
                }
            } catch { outcome.error = error }
            done.signal()
        }
        done.wait()
        if let e = outcome.error { throw CLIError("serve: \(e)") }
    }

    /// `90s`, `30m`, `72h`, `7d` (or plain seconds); nil if malformed or not positive.
    static func duration(_ s: String) -> Duration? {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
        var number = Substring(s), scale = 1.0
        if let last = s.last, let u = units[last] { number = s.dropLast(); scale = u }
        guard let n = Double(number), n.isFinite, n > 0 else { return nil }
        return .milliseconds(Int64(n * scale * 1000))
    }
}
