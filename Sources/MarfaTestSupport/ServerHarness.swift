import Foundation
import MarfaModel

/// Runs the built `marfafs serve` on 127.0.0.1 (a free port) with a temporary database, and talks
/// to it over real HTTP with curl.
public final class ServerHarness: @unchecked Sendable {
    public let root: String
    public let db: String
    public private(set) var base = ""
    private var pid: pid_t = 0

    /// Extra `marfafs serve` options (e.g. `--rate-limit 5`).
    let options: [String]

    public init(db: String? = nil, options: [String] = []) throws {
        self.options = options
        let top = ProcessInfo.processInfo.environment["MARFAFS_TEST_ROOT"] ?? (NSTemporaryDirectory() + "marfafs-tests")
        root = top + "/srv-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        self.db = db ?? root + "/server.sqlite"
        try start()
    }

    /// Starts the server (again, on the same database) and waits for its address.
    public func start() throws {
        let out = root + "/serve.out"
        unlink(out)
        guard let p = Shell.spawn([MountHarness.binary, "serve", "--db", db, "--port", "0"] + options, stdout: out, stderr: root + "/serve.log") else {
            throw HarnessError("cannot start marfafs serve")
        }
        pid = p
        for _ in 0..<600 {
            if let text = try? String(contentsOfFile: out, encoding: .utf8), let r = text.range(of: "listening on ") {
                base = String(text[r.upperBound...].prefix { !$0.isNewline })
                return
            }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid { throw HarnessError("marfafs serve exited: \(log)") }
            usleep(20_000)
        }
        throw HarnessError("marfafs serve did not print its address: \(log)")
    }

    public var log: String { (try? String(contentsOfFile: root + "/serve.log", encoding: .utf8)) ?? "" }

    /// SIGTERM, and waits for the process to end; returns its exit status.
    @discardableResult
    public func stop() -> Int32 {
        guard pid > 0 else { return 0 }
        kill(pid, SIGTERM)
        var status: Int32 = 0
        for _ in 0..<500 {
            if waitpid(pid, &status, WNOHANG) == pid { pid = 0; return (status >> 8) & 0xff }
            usleep(10_000)
        }
        kill(pid, SIGKILL); waitpid(pid, &status, 0); pid = 0
        return -1
    }

    deinit { stop(); try? FileManager.default.removeItem(atPath: root) }

    public struct Reply: Sendable {
        public var status: Int
        /// Header names in lowercase.
        public var headers: [String: String]
        public var body: String
        public var json: [String: JSONValue] { (try? JSONParser.parse(body))?.objectValue ?? [:] }
        public var code: String? { json["error"]?.objectValue?["code"]?.stringValue }
        public var item: [String: JSONValue] { json["item"]?.objectValue ?? [:] }
    }

    /// One request. `body` is sent as is (so malformed JSON can be sent too).
    public func call(_ method: String, _ path: String, key: String? = nil, body: String? = nil, headers: [String: String] = [:]) -> Reply {
        let tag = UUID().uuidString.prefix(8)
        let bodyFile = root + "/req-\(tag)", outFile = root + "/resp-\(tag)", headFile = root + "/head-\(tag)"
        defer { unlink(bodyFile); unlink(outFile); unlink(headFile) }
        var argv = ["/usr/bin/curl", "-s", "-X", method, "-o", outFile, "-D", headFile, "-w", "%{http_code}", "--max-time", "30"]
        if let key { argv += ["-H", "Authorization: Bearer \(key)"] }
        for (k, v) in headers { argv += ["-H", "\(k): \(v)"] }
        if let body {
            FileManager.default.createFile(atPath: bodyFile, contents: Data(body.utf8))
            argv += ["-H", "Content-Type: application/json", "--data-binary", "@" + bodyFile]
        }
        argv.append(base + path)
        let r = Shell.run(argv)
        var hs: [String: String] = [:]
        for line in ((try? String(contentsOfFile: headFile, encoding: .utf8)) ?? "").split(whereSeparator: \.isNewline) {
            if let c = line.firstIndex(of: ":") {
                hs[line[..<c].lowercased()] = line[line.index(after: c)...].trimmingCharacters(in: .whitespaces)
            }
        }
        let out = (try? Data(contentsOf: URL(fileURLWithPath: outFile))).map { String(decoding: $0, as: UTF8.self) } ?? ""
        return Reply(status: Int(r.stdout) ?? 0, headers: hs, body: out)
    }

    /// W-18 bootstrap: the first admin key of a fresh server.
    public func bootstrap() throws -> String {
        let r = call("POST", "/keys", body: #"{"label":"admin"}"#)
        guard r.status == 201, let key = r.json["key"]?.stringValue else { throw HarnessError("bootstrap failed: \(r.status) \(r.body)") }
        return key
    }
}
