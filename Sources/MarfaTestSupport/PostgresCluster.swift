import Foundation
import Synchronization

/// A private PostgreSQL cluster for the tests of `marfafs serve --db postgres://…`: started once
/// per test process (initdb and pg_ctl run as the `postgres` user, which initdb requires), on a
/// free port of 127.0.0.1 and a socket directory of its own, and stopped when the process exits.
/// Every `database()` is a new, empty database in it.
public final class PostgresCluster: @unchecked Sendable {
    public let port: Int
    public let directory: String
    public let user = "marfa"
    let bin: String
    private let lock = NSLock()
    private var count = 0

    /// The cluster, started on first use; nil (with the reason) where PostgreSQL is not installed.
    public static let shared: Result<PostgresCluster, HarnessError> = {
        do { return .success(try PostgresCluster()) } catch let e as HarnessError { return .failure(e) } catch {
            return .failure(HarnessError("\(error)"))
        }
    }()

    /// Whether `MARFAFS_TEST_SERVER_DB=postgres` asks every `ServerHarness` for a PostgreSQL database.
    public static var isDefault: Bool { ProcessInfo.processInfo.environment["MARFAFS_TEST_SERVER_DB"] == "postgres" }

    /// Where Debian keeps PostgreSQL's programs (the newest version installed).
    static func binaries() -> String? {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).compactMap(Int.init).sorted()
        return versions.last.map { "\(root)/\($0)/bin" }.flatMap { FileManager.default.isExecutableFile(atPath: $0 + "/initdb") ? $0 : nil }
    }

    init() throws {
        guard let bin = Self.binaries() else { throw HarnessError("PostgreSQL is not installed (scripts/bootstrap installs it)") }
        self.bin = bin
        // Not under MARFAFS_TEST_ROOT: that directory is private to root, and the server runs as `postgres`.
        let top = ProcessInfo.processInfo.environment["MARFAFS_TEST_ROOT"].map { ($0 as NSString).lastPathComponent } ?? "marfafs-tests"
        directory = "/tmp/\(top)-pg-\(UUID().uuidString.prefix(8).lowercased())"
        port = Self.freePort()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let own = Shell.run(["chown", "postgres:postgres", directory])
        guard own.status == 0 else { throw HarnessError("chown postgres \(directory): \(own.stderr)") }
        let initdb = asPostgres([bin + "/initdb", "-D", directory + "/data", "-U", user, "-A", "trust", "-E", "UTF8", "--no-sync"])
        guard initdb.status == 0 else { throw HarnessError("initdb failed: \(initdb.stderr)") }
        let dir = directory
        Self.registry.withLock { (clusters: inout [String: String]) in
            if clusters.isEmpty { atexit { PostgresCluster.stopRunning() } }
            clusters[dir] = bin
        }
        try start()
    }

    /// A cluster of the test's own, for a test that stops and starts it (the shared one serves the
    /// tests running beside it); `destroy()` it at the end.
    public static func own() throws -> PostgresCluster { try PostgresCluster() }

    /// Starts the cluster (again).
    public func start() throws {
        let options = "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c max_connections=300"
        let start = asPostgres([bin + "/pg_ctl", "-D", directory + "/data", "-o", options, "-l", directory + "/log", "-w", "-t", "60", "start"])
        guard start.status == 0 else { throw HarnessError("pg_ctl start failed: \(start.stderr) \(log)") }
    }

    /// Stops the cluster as an administrator does (`pg_ctl stop -m fast`: every connection is
    /// ended); its files stay, for `start()`.
    public func stop() throws {
        let stop = asPostgres([bin + "/pg_ctl", "-D", directory + "/data", "-m", "fast", "-w", "stop"])
        guard stop.status == 0 else { throw HarnessError("pg_ctl stop failed: \(stop.stderr)") }
    }

    /// Stops the cluster at once and removes its files.
    public func destroy() {
        Self.registry.withLock { (clusters: inout [String: String]) in _ = clusters.removeValue(forKey: directory) }
        Self.remove(bin: bin, directory: directory)
    }

    /// Every cluster this process started and has not destroyed: directory → programs.
    static let registry = Mutex<[String: String]>([:])

    /// Stops every cluster at once and removes its files (at the test process's exit).
    static func stopRunning() {
        let all = registry.withLock { (clusters: inout [String: String]) -> [String: String] in
            let all = clusters
            clusters = [:]
            return all
        }
        for (dir, bin) in all { remove(bin: bin, directory: dir) }
    }

    static func remove(bin: String, directory: String) {
        _ = Shell.run(["runuser", "-u", "postgres", "--", bin + "/pg_ctl", "-D", directory + "/data", "-m", "immediate", "-w", "stop"])
        try? FileManager.default.removeItem(atPath: directory)
    }

    public var log: String { (try? String(contentsOfFile: directory + "/log", encoding: .utf8)) ?? "" }

    func asPostgres(_ argv: [String]) -> Shell.Result {
        Shell.run(["runuser", "-u", "postgres", "--"] + argv, cwd: "/tmp")
    }

    /// SQL run by psql as the cluster's superuser, in `database`.
    public func psql(_ sql: String, database: String = "postgres") -> Shell.Result {
        Shell.run([bin + "/psql", "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", "\(port)", "-U", user, "-d", database, "-c", sql])
    }

    /// How many connections process `pid` holds open to this cluster now: its own
    /// sockets, not what the database still lists (a backend leaves `pg_stat_activity` a moment
    /// after its client has gone, and an autovacuum worker names the database too).
    public func connections(heldBy pid: pid_t) -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
        let sockets = Set(fds.compactMap { fd -> Substring? in
            // readlink(2) itself: Foundation's answer for a link to no path is not its text.
            var buf = [CChar](repeating: 0, count: 64)
            let n = readlink("/proc/\(pid)/fd/\(fd)", &buf, buf.count - 1)
            guard n > 0 else { return nil }
            let t = String(decoding: buf[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            return t.hasPrefix("socket:[") ? Substring(t.dropFirst(8).dropLast()) : nil
        })
        let remote = String(format: ":%04X", port)
        // By inode: a table read in pieces while connections come and go may list one twice.
        var held = Set<Substring>()
        for table in ["tcp", "tcp6"] {
            // Read to its end: a /proc file says it has no size, and one read of it is not all of it.
            let data = FileHandle(forReadingAtPath: "/proc/\(pid)/net/\(table)").map { h in defer { try? h.close() }; return h.readDataToEndOfFile() }
            let text = String(decoding: data ?? Data(), as: UTF8.self)
            // sl local_address rem_address st … inode: established (01) to the port, one of its sockets.
            for line in text.split(separator: "\n").dropFirst() {
                let f = line.split(separator: " ")
                if f.count > 9, f[2].hasSuffix(remote), f[3] == "01", sockets.contains(f[9]) { held.insert(f[9]) }
            }
        }
        return held.count
    }

    /// A new, empty database; its `postgres://` URL.
    public func database() throws -> String {
        let name = lock.withLock { count += 1; return "t\(count)_\(UUID().uuidString.prefix(6).lowercased())" }
        let r = psql("CREATE DATABASE \(name)")
        guard r.status == 0 else { throw HarnessError("CREATE DATABASE failed: \(r.stderr)") }
        return url(name)
    }

    public func url(_ database: String) -> String { "postgres://\(user)@127.0.0.1:\(port)/\(database)" }

    /// A port nothing listens on now.
    public static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return Int(UInt16(bigEndian: addr.sin_port))
    }
}
