import Foundation
import MarfaModel

/// Runs the built `marfafs serve` on 127.0.0.1 (a free port) with a temporary database, and talks
/// to it over real HTTP with curl.
public final class ServerHarness: @unchecked Sendable {
    public let root: String
    public let db: String
    public private(set) var base = ""
    public private(set) var pid: pid_t = 0

    /// Extra `marfafs serve` options (e.g. `--rate-limit 5`).
    let options: [String]
    /// The soft limit of open files the server starts with (nil: the test's own).
    let openFiles: Int?

    /// `db`: the database to serve (another process's, to run several on one PostgreSQL
    /// database); nil: a new one, a SQLite file, or a PostgreSQL database of the tests' cluster
    /// when `postgres` is true or `MARFAFS_TEST_SERVER_DB=postgres`.
    public init(db: String? = nil, postgres: Bool = PostgresCluster.isDefault, options: [String] = [], openFiles: Int? = nil) throws {
        self.options = options
        self.openFiles = openFiles
        let top = ProcessInfo.processInfo.environment["MARFAFS_TEST_ROOT"] ?? (NSTemporaryDirectory() + "marfafs-tests")
        root = top + "/srv-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        if let db { self.db = db } else if postgres { self.db = try PostgresCluster.shared.get().database() } else { self.db = root + "/server.sqlite" }
        try start()
    }

    /// A harness for a server this one did not start (a proxy in front of servers): requests
    /// only, no process.
    public init(address: String) throws {
        options = []
        openFiles = nil
        let top = ProcessInfo.processInfo.environment["MARFAFS_TEST_ROOT"] ?? (NSTemporaryDirectory() + "marfafs-tests")
        root = top + "/front-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        db = ""
        base = address
    }

    /// Starts the server (again, on the same database and, after the first time, the same port)
    /// and waits for its address.
    public func start() throws {
        let out = root + "/serve.out"
        unlink(out)
        let port = base.split(separator: ":").last.map(String.init) ?? "0"
        var argv = [MountHarness.binary, "serve", "--db", db, "--port", port] + options
        if let openFiles { argv = ["/bin/sh", "-c", "ulimit -Sn \(openFiles) && exec \"$0\" \"$@\""] + argv }
        guard let p = Shell.spawn(argv, stdout: out, stderr: root + "/serve.log") else {
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
        Shell.killAndReap(pid); pid = 0
        return -1
    }

    /// SIGKILL: the server dies mid-whatever, as in a crash.
    public func kill9() {
        guard pid > 0 else { return }
        Shell.killAndReap(pid); pid = 0
    }

    /// SIGSTOP / SIGCONT: a server that accepts connections but answers nothing until resumed.
    public func pause() { if pid > 0 { kill(pid, SIGSTOP) } }
    public func resume() { if pid > 0 { kill(pid, SIGCONT) } }

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

    /// One request. `body` is sent as is (so malformed JSON can be sent too); `data` is sent with
    /// `contentType` instead.
    public func call(_ method: String, _ path: String, key: String? = nil, body: String? = nil, data: Data? = nil,
                     contentType: String = "application/json", headers: [String: String] = [:]) -> Reply {
        let tag = UUID().uuidString.prefix(8)
        let bodyFile = root + "/req-\(tag)", outFile = root + "/resp-\(tag)", headFile = root + "/head-\(tag)"
        defer { unlink(bodyFile); unlink(outFile); unlink(headFile) }
        var argv = ["/usr/bin/curl", "-s", "-X", method, "-o", outFile, "-D", headFile, "-w", "%{http_code}", "--max-time", "30"]
        if let key { argv += ["-H", "Authorization: Bearer \(key)"] }
        for (k, v) in headers { argv += ["-H", "\(k): \(v)"] }
        if let payload = data ?? body.map({ Data($0.utf8) }) {
            _ = FileManager.default.createFile(atPath: bodyFile, contents: payload)
            argv += ["-H", "Content-Type: \(contentType)", "--data-binary", "@" + bodyFile]
        }
        if method == "HEAD" { argv[argv.firstIndex(of: "-X")!...argv.firstIndex(of: "-X")! + 1] = ["-I"] }
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

    /// Subscribes to `GET /events` (curl -N into a file) until `close()`.
    public func events(key: String, query: String = "", lastEventID: String? = nil) throws -> EventTap {
        try EventTap(url: base + "/events" + query, key: key, lastEventID: lastEventID, file: root + "/events-" + UUID().uuidString.prefix(8))
    }

    /// W-18 bootstrap: the first admin key of a fresh server.
    public func bootstrap() throws -> String {
        let r = call("POST", "/keys", body: #"{"label":"admin"}"#)
        guard r.status == 201, let key = r.json["key"]?.stringValue else { throw HarnessError("bootstrap failed: \(r.status) \(r.body)") }
        return key
    }

    /// The first admin key, written to a 0600 key file, and the `marfafs mount` options that use
    /// this server with it.
    public func mountKey() throws -> (key: String, options: [String]) {
        let key = try bootstrap()
        let file = root + "/key"
        try (key + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o600)
        return (key, ["--server", base, "--key-file", file])
    }
}

/// A server and two mounts of one tenant on it (devices `dev-a` and `dev-b`).
public struct MountPair {
    public let server: ServerHarness
    public let key: String
    public let a: MountHarness
    public let b: MountHarness

    /// Starts the server and both mounts, runs `body`, and unmounts everything whatever happens.
    /// `environment`: the daemons' (both).
    public static func with(serverOptions: [String] = [], mountOptions: [String] = [], environment: [String: String] = [:],
                            _ body: (MountPair) throws -> Void) throws {
        let s = try ServerHarness(options: serverOptions)
        let (key, options) = try s.mountKey()
        try MountHarness.with(options: options + mountOptions + ["--device", "dev-a"], environment: environment) { a in
            try MountHarness.with(options: options + mountOptions + ["--device", "dev-b"], environment: environment) { b in
                try body(MountPair(server: s, key: key, a: a, b: b))
            }
        }
    }
}

/// One SSE subscriber: curl writes the stream to a file, parsed into frames on demand.
public final class EventTap: @unchecked Sendable {
    public struct Frame: Sendable, Equatable {
        public var id: String?
        public var event: String?
        public var data: String
        /// The comment of a comment-only block (`: ping` → "ping").
        public var comment: String?
        public var json: [String: JSONValue] { (try? JSONParser.parse(data))?.objectValue ?? [:] }
    }

    let file: String
    private var pid: pid_t

    init(url: String, key: String, lastEventID: String?, file: String) throws {
        self.file = file
        var argv = ["/usr/bin/curl", "-sN", "-H", "Accept: text/event-stream", "-H", "Authorization: Bearer \(key)"]
        if let lastEventID { argv += ["-H", "Last-Event-ID: \(lastEventID)"] }
        guard let p = Shell.spawn(argv + [url], stdout: file, stderr: file + ".err") else { throw HarnessError("cannot start curl") }
        pid = p
    }

    public var text: String { (try? String(contentsOfFile: file, encoding: .utf8)) ?? "" }

    /// The complete frames so far (a block ends with a blank line).
    public var frames: [Frame] {
        var blocks = text.components(separatedBy: "\n\n")
        blocks.removeLast()  // incomplete (or empty) tail
        return blocks.map { block in
            var f = Frame(data: "")
            var data: [String] = []
            for line in block.split(separator: "\n", omittingEmptySubsequences: false) {
                if line.hasPrefix(":") { f.comment = line.dropFirst().trimmingCharacters(in: .whitespaces); continue }
                let (field, value) = line.firstIndex(of: ":").map { (String(line[..<$0]), String(line[line.index(after: $0)...].drop { $0 == " " })) } ?? (String(line), "")
                switch field {
                case "id": f.id = value
                case "event": f.event = value
                case "data": data.append(value)
                default: break
                }
            }
            f.data = data.joined(separator: "\n")
            return f
        }
    }

    /// The frames that carry an event (not comments).
    public var events: [Frame] { frames.filter { $0.event != nil } }

    /// Polls until `condition` holds on the frames, or `timeout` seconds pass.
    @discardableResult
    public func wait(timeout: Double = 10, until condition: ([Frame]) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition(frames) { return true }
            usleep(20_000)
        }
        return condition(frames)
    }

    /// Whether the server ended the stream (curl exited).
    public var ended: Bool {
        guard pid > 0 else { return true }
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == pid { pid = 0; return true }
        return false
    }

    public func close() {
        guard pid > 0 else { return }
        Shell.killAndReap(pid); pid = 0
    }

    deinit { close() }
}
