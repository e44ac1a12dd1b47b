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

    @Option(help: "The server's database. Default: $XDG_DATA_HOME/marfafs/server.sqlite.")
    var db: String?

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "Port to listen on (0: any free port).")
    var port = 8600

    @Option(help: "Requests per minute per API key (W-4 headers and 429 past it). Default: no limit.")
    var rateLimit: Int?

    @Flag(help: "On a server with no keys, create the first tenant and its admin key, write the key to a 0600 file beside the database, print the file's path, and exit.")
    var `init` = false

    func run() throws {
        let dbPath = Paths.absolute(db ?? ((Paths.defaultStore() as NSString).deletingLastPathComponent + "/server.sqlite"))
        if self.`init` {
            let keyFile = dbPath + ".admin-key"
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
}
