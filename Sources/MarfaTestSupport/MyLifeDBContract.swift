import Foundation
import MarfaModel

/// A CONTRACT FAKE of a MyLifeDB server (`scripts/testing/mylifedb_contract.py`), on loopback, in a
/// process of its own, over a real folder (`data`): written from the API recorded in
/// `shared/spec/mylifedb.md`, because the real server cannot be built on CI machines. Tests act as
/// a second client of it over HTTP (curl), and read its folder for what it holds.
public final class MyLifeDBContract: @unchecked Sendable {
    public let root: String
    /// The server's data directory: what it holds.
    public let data: String
    public let routes: String
    public let password: String?
    let unset: Bool
    var pid: pid_t?
    public private(set) var port = 0
    /// `mylifedb+http://127.0.0.1:PORT`, for `--server`.
    public var url: String { "mylifedb+http://127.0.0.1:\(port)" }
    public var base: String { "http://127.0.0.1:\(port)" }

    /// `routes`: `current` or `legacy`; `password`: password auth on, with this password (set
    /// already, unless `unset`: then the first login sets it).
    public init(routes: String = "current", password: String? = nil, unset: Bool = false) throws {
        let base = ProcessInfo.processInfo.environment["MARFAFS_TEST_ROOT"] ?? (NSTemporaryDirectory() + "marfafs-tests")
        root = base + "/mld-" + UUID().uuidString.prefix(8).lowercased()
        data = root + "/data"
        self.routes = routes; self.password = password; self.unset = unset
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        try start()
    }

    /// Starts the server (again, on the same port after `stop`).
    public func start() throws {
        let portFile = root + "/port"
        try? FileManager.default.removeItem(atPath: portFile)
        var argv = ["python3", MountHarness.repoRoot + "/scripts/testing/mylifedb_contract.py", data, portFile,
                    "--routes", routes, "--heartbeat", "2", "--port", String(port)]
        if let password { argv += ["--password", password] }
        if unset { argv += ["--password-unset", "1"] }
        guard let p = Shell.spawn(argv, stderr: root + "/server.log") else { throw HarnessError("cannot start the contract server") }
        pid = p
        guard MountHarness.eventually(timeout: 10, { FileManager.default.fileExists(atPath: portFile) }),
              let text = try? String(contentsOfFile: portFile, encoding: .utf8), let n = Int(text) else {
            Shell.killAndReap(p)
            throw HarnessError("the contract server did not start: \((try? String(contentsOfFile: root + "/server.log", encoding: .utf8)) ?? "")")
        }
        port = n
    }

    /// Stops the server (the mount sees it gone).
    public func stop() {
        if let pid { Shell.killAndReap(pid) }
        pid = nil
    }

    /// A 0600 file holding `secret` (the password, or a wrong one), and the mount options that use it.
    public func mountOptions(secret: String? = nil) throws -> [String] {
        let file = root + "/password-\(UUID().uuidString.prefix(6))"
        try ((secret ?? password ?? "none") + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o600)
        return ["--server", url, "--key-file", file]
    }

    /// A call as a second client (curl, with the password as HTTP Basic): status and body.
    @discardableResult
    public func call(_ method: String, _ path: String, body: String? = nil, data file: String? = nil) -> (status: Int, body: String) {
        var argv = ["/usr/bin/curl", "-s", "-g", "-X", method, "-w", "\n%{http_code}"]
        if let password { argv += ["-u", "client:\(password)"] }
        if let body { argv += ["-H", "Content-Type: application/json", "--data-binary", body] }
        if let file { argv += ["--data-binary", "@" + file] }
        let r = Shell.run(argv + [base + path])
        let lines = r.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
    }

    /// `PUT /raw/<path>` with `text`.
    @discardableResult
    public func put(_ path: String, _ text: String) -> Int {
        let f = root + "/put-" + UUID().uuidString
        try? text.write(toFile: f, atomically: true, encoding: .utf8)
        defer { unlink(f) }
        return call("PUT", "/raw/" + path, data: f).status
    }

    /// The server's copy of a file (nil: none).
    public func read(_ path: String) -> String? { try? String(contentsOfFile: data + "/" + path, encoding: .utf8) }

    /// Events stop reaching the streams (`on`), as on a connection that misses them; or flow again.
    public func quiet(_ on: Bool) { call("POST", "/_contract/quiet?on=\(on ? 1 : 0)") }

    /// Every event stream is closed by the server.
    public func dropStreams() { call("POST", "/_contract/drop-streams") }

    /// Tree listings of `folder` wait (as a listing read while other changes land) until `release`.
    public func hold(_ folder: String) { call("POST", "/_contract/hold?path=\(folder)") }
    public func release(_ folder: String) { call("POST", "/_contract/release?path=\(folder)") }
    /// How many tree listings wait now.
    public var waitingListings: Int {
        guard case .int(let n)? = (try? JSONParser.parse(call("GET", "/_contract/held").body))?.objectValue?["waiting"] else { return 0 }
        return Int(n)
    }

    deinit { stop(); try? FileManager.default.removeItem(atPath: root) }
}
