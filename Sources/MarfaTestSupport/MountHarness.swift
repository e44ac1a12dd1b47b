import Foundation
import MarfaModel

/// Starts the built `marfafs` binary on a temporary mount point with a temporary store, runs real
/// programs against it, and always unmounts (lazily and by aborting the connection if it must).
/// Test roots live under `$MARFAFS_TEST_ROOT` so `scripts/test` can fail a run that leaves a mount.
public final class MountHarness: @unchecked Sendable {
    public let root: String
    public let mountpoint: String
    public let store: String
    public private(set) var mounted = false
    /// Extra `marfafs mount` options (e.g. `--server URL --key-file FILE`).
    public var mountOptions: [String] = []
    /// Environment variables for the daemon (e.g. `MARFAFS_RESCAN_SECONDS`).
    public var environment: [String: String] = [:]

    public init(store: String? = nil) throws {
        let base = ProcessInfo.processInfo.environment["MARFAFS_TEST_ROOT"] ?? (NSTemporaryDirectory() + "marfafs-tests")
        root = base + "/" + UUID().uuidString.prefix(8).lowercased()
        mountpoint = root + "/mnt"
        self.store = store ?? root + "/store.sqlite"
        try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
        // Which test process made it: a later run's sweep unmounts what a dead one left.
        try String(getpid()).write(toFile: root + "/owner", atomically: true, encoding: .utf8)
        _ = Self.swept
    }

    /// Once per test process: mounts under the test root left by a test process that died (a
    /// crash, a kill) are unmounted, so they never hold up this run or the machine.
    static let swept: Int = {
        let base = ProcessInfo.processInfo.environment["MARFAFS_TEST_ROOT"] ?? (NSTemporaryDirectory() + "marfafs-tests")
        let mounts = (try? String(contentsOfFile: "/proc/mounts", encoding: .utf8)) ?? ""
        var n = 0
        for line in mounts.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count > 2, fields[2].hasPrefix("fuse"), fields[1].hasPrefix(base + "/") else { continue }
            let mnt = String(fields[1]).replacingOccurrences(of: "\\040", with: " ")
            let owner = (mnt as NSString).deletingLastPathComponent + "/owner"
            guard let text = try? String(contentsOfFile: owner, encoding: .utf8), let pid = pid_t(text),
                  pid != getpid(), kill(pid, 0) != 0, errno == ESRCH else { continue }
            forceUnmount(mnt)
            n += 1
        }
        return n
    }()

    /// The binary under test: `$MARFAFS_BIN`, else `.build/debug/marfafs` of this package.
    public static var binary: String {
        if let b = ProcessInfo.processInfo.environment["MARFAFS_BIN"] { return b }
        var dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while dir.path != "/" {
            let candidate = dir.appendingPathComponent(".build/debug/marfafs").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        return "marfafs"
    }

    public func mount() throws {
        let env = environment.isEmpty ? [] : ["/usr/bin/env"] + environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        let r = Shell.run(env + [Self.binary, "mount", mountpoint, "--store", store] + mountOptions)
        guard r.status == 0 else { throw HarnessError("mount failed (\(r.status)): \(r.stderr)\(r.stdout)") }
        mounted = true
    }

    /// Takes charge of a mount made here by other means (`marfafs mount` run by the test).
    public func adoptMount() { mounted = true }

    /// Unmounts whatever is mounted here, cleanly if the daemon is alive, by force otherwise. A
    /// daemon still running 5 s after a forced unmount (a program stuck on the detached mount
    /// keeps its connection open) is killed: no test leaves a daemon or a stuck program behind.
    public func unmount() {
        let pid = daemonPID
        if mounted {
            mounted = false
            _ = Shell.run([Self.binary, "unmount", mountpoint])
        }
        let listed = (try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8))?.contains(" \(mountpoint) ") ?? false
        if listed {
            Self.forceUnmount(mountpoint)
            // (The pid checked to be this store's daemon still: a number may have been used again.)
            func ours(_ pid: pid_t) -> Bool {
                guard let cmd = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline")) else { return false }
                return String(decoding: cmd.map { $0 == 0 ? 32 : $0 }, as: UTF8.self).contains(" --store \(store)")
            }
            if let pid, ours(pid) {
                // Up to 5 s for it to exit on its own.
                var polls = 0
                while polls < 1000, ours(pid) { usleep(5_000); polls += 1 }
                if ours(pid) { kill(pid, SIGKILL) }
            }
        }
        reportCrash()
    }

    /// The daemon's log as it is now (its last `bytes`), to show with a failing expectation.
    public func daemonLog(last bytes: Int = 4000) -> String {
        String(((try? String(contentsOfFile: store + ".log", encoding: .utf8)) ?? "").suffix(bytes))
    }

    /// A daemon that crashed leaves its backtrace in its log: show it with the failing test.
    public var daemonCrashLog: String? {
        guard let log = try? String(contentsOfFile: store + ".log", encoding: .utf8),
              let start = log.range(of: "Fatal error") ?? log.range(of: "Crash") else { return nil }
        return String(log[start.lowerBound...].prefix(6000))
    }

    private func reportCrash() {
        if let crash = daemonCrashLog {
            FileHandle.standardError.write(Data("\n=== marfafs daemon crashed (\(store).log) ===\n\(crash)\n".utf8))
        }
    }

    /// The daemon's pid, from the store's lock file.
    public var daemonPID: pid_t? {
        let holder = (try? String(contentsOfFile: store + ".lock", encoding: .utf8)) ?? ""
        guard holder.hasPrefix("mounted"), let pid = holder.split(separator: " ").last.flatMap({ Int32($0) }) else { return nil }
        return pid
    }

    /// Kills the daemon (SIGKILL by default) and waits for it to be gone; the mount point is left
    /// dead, as a crash leaves it, until the next `mount()` recovers it.
    public func killDaemon(_ signal: Int32 = SIGKILL) {
        guard let pid = daemonPID else { return }
        kill(pid, signal)
        for _ in 0..<400 where kill(pid, 0) == 0 { usleep(5_000) }
        mounted = false
    }

    /// The repository root (for the helper scripts in `scripts/testing`).
    public static var repoRoot: String {
        var dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while dir.path != "/" {
            if FileManager.default.fileExists(atPath: dir.appendingPathComponent("Package.swift").path) { return dir.path }
            dir = dir.deletingLastPathComponent()
        }
        return "."
    }

    /// The upstream OpenAPI document and wire fixtures, as copied into `Tests/Fixtures/upstream`.
    public static var upstream: String { repoRoot + "/Tests/Fixtures/upstream" }

    /// Lazy unmount plus an abort of the FUSE connection: for teardown after a failure.
    public static func forceUnmount(_ path: String) {
        _ = Shell.run(["/bin/fusermount3", "-u", "-z", path])
        _ = Shell.run(["/bin/umount", "-l", path])
    }

    /// `.marfafs/status` as JSON (empty when it cannot be read), read to its end as `cat` does.
    public var syncStatus: [String: JSONValue] {
        let r = Shell.run(["/bin/cat", path(".marfafs/status")])
        return r.status == 0 ? (try? JSONParser.parse(r.out))?.objectValue ?? [:] : [:]
    }

    /// `.marfafs/requests`: the kernel's requests so far, by operation (and `total`).
    public var requestCounts: [String: Int] {
        var out: [String: Int] = [:]
        for line in sh("cat .marfafs/requests").out.split(separator: "\n") {
            let f = line.split(whereSeparator: { $0 == "\t" || $0 == " " })
            if f.count == 3, let n = Int(f[1]) { out[String(f[0])] = n }
        }
        return out
    }

    /// Runs a shell command with the mount point as working directory.
    @discardableResult
    public func sh(_ command: String) -> Shell.Result {
        Shell.run(["/bin/bash", "-c", "cd '\(mountpoint)' && " + command])
    }

    /// Polls `condition` every 50 ms until it holds or `timeout` seconds pass.
    @discardableResult
    public static func eventually(timeout: Double = 15, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition() { return true }
            usleep(50_000)
        }
        return condition()
    }

    /// Makes the daemon settle every written file now (FS-14), as reading `.marfafs/status` does.
    public func settle() {
        if mounted { _ = Shell.run(["/bin/cat", mountpoint + "/.marfafs/status"]) }
    }

    /// Reads the store with the sqlite3 program (the daemon keeps it open in WAL mode), after the
    /// daemon has settled what was written.
    public func sql(_ query: String) -> String {
        settle()
        return Shell.run(["/usr/bin/sqlite3", "-readonly", store, query]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    public func path(_ rel: String) -> String { mountpoint + "/" + rel }

    /// Empties the queue and puts every item at version 1, as a sync with a server leaves them, so a
    /// test sees only the mutations its own steps queue.
    @discardableResult
    public func markQueueSent() -> Bool {
        settle()
        return Shell.run(["/usr/bin/sqlite3", store, "DELETE FROM mutations; UPDATE items SET version = 1 WHERE version = 0"]).status == 0
    }

    /// Makes a folder with a shell script (run with the folder as working directory) and imports it
    /// into this harness's store; returns the folder.
    public func importFolder(_ script: String) throws -> String {
        let vault = root + "/vault"
        try FileManager.default.createDirectory(atPath: vault, withIntermediateDirectories: true)
        let made = Shell.run(["/bin/bash", "-c", "set -e; cd '\(vault)'; " + script])
        guard made.status == 0 else { throw HarnessError("vault script failed: \(made.stderr)") }
        let r = Shell.run([Self.binary, "import", vault, "--store", store])
        guard r.status == 0 else { throw HarnessError("import failed: \(r.stderr)") }
        return vault
    }

    /// Makes the store one a server has seen (as after a sync), so its queue keeps every payload
    /// even when mounted without `--server` (a store no server has seen keeps none).
    public func bindStore() throws {
        let empty = root + "/empty-vault"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        let r = Shell.run([Self.binary, "import", empty, "--store", store])
        guard r.status == 0 else { throw HarnessError("import failed: \(r.stderr)") }
        let q = Shell.run(["/usr/bin/sqlite3", store, "INSERT OR REPLACE INTO meta(key, value) VALUES ('server', 'http://127.0.0.1:9')"])
        guard q.status == 0 else { throw HarnessError("binding the store failed: \(q.stderr)") }
    }

    /// Mounts, runs `body`, and unmounts whatever happens. `bound`: the store is one a server has
    /// seen (`bindStore`).
    public static func with(store: String? = nil, options: [String] = [], bound: Bool = false,
                            environment: [String: String] = [:], _ body: (MountHarness) throws -> Void) throws {
        let h = try MountHarness(store: store)
        h.mountOptions = options
        h.environment = environment
        if bound { try h.bindStore() }
        try h.mount()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try body(h)
    }

    deinit { unmount() }
}

public struct HarnessError: Error, CustomStringConvertible {
    public var description: String
    public init(_ d: String) { description = d }
}

public enum Shell {
    public struct Result: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
        public var out: String { stdout.trimmingCharacters(in: .whitespacesAndNewlines) }
    }

    /// Starts a program with stdin from /dev/null and stdout and stderr to files; returns its pid
    /// and the `posix_spawn` result (0: started).
    static func launch(_ argv: [String], stdout: String, stderr: String, append: Bool) -> (pid: pid_t, rc: Int32) {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        let mode = O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdout, mode, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, stderr, mode, 0o600)
        // Nothing else the test process has open (a file on another test's mount, a pipe) reaches
        // the child: a long-lived child (a watcher, an editor, tmux's server) would hold it, and
        // that mount would be busy at its unmount.
        _ = spawn_addclosefrom(&actions, 3)
        // The child starts with no signal blocked and every signal at its default, as from a
        // shell: the test runner's threads block most signals, and a mask is inherited across
        // exec (stress-ng's alarms never came).
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attr, &none)
        posix_spawnattr_setsigdefault(&attr, &all)
        // And in a process group of its own: a program that signals its group (stress-ng at its
        // time limit) reaches only its own children, never the test runner or another test's
        // server or daemon.
        posix_spawnattr_setpgroup(&attr, 0)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        let cargs = argv.map { strdup($0) } + [nil]
        defer { cargs.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawnp(&pid, argv[0], &actions, &attr, cargs, environ)
        return (pid, rc)
    }

    /// SIGKILL to a child started with `spawn`, then reaps it.
    public static func killAndReap(_ pid: pid_t) {
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
    }

    /// Starts a program in the background (output appended to the given files, else discarded); returns its pid.
    public static func spawn(_ argv: [String], stdout: String = "/dev/null", stderr: String = "/dev/null") -> pid_t? {
        let (pid, rc) = launch(argv, stdout: stdout, stderr: stderr, append: true)
        return rc == 0 ? pid : nil
    }

    /// Runs a program with stdin from /dev/null and its output captured in temporary files
    /// (no pipes: a daemon it starts can never hold the caller's pipe open).
    public static func run(_ argv: [String], cwd: String? = nil) -> Result {
        var argv = argv
        if let cwd {
            let quoted = argv.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
            argv = ["/bin/bash", "-c", "cd '\(cwd)' && exec \(quoted)"]
        }
        let base = NSTemporaryDirectory() + "marfafs-sh-" + UUID().uuidString
        let outPath = base + ".out", errPath = base + ".err"
        defer { unlink(outPath); unlink(errPath) }
        let (pid, rc) = launch(argv, stdout: outPath, stderr: errPath, append: false)
        guard rc == 0 else { return Result(status: -1, stdout: "", stderr: "spawn \(argv[0]): \(String(cString: strerror(rc)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let code: Int32 = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        let out = (try? Data(contentsOf: URL(fileURLWithPath: outPath))) ?? Data()
        let err = (try? Data(contentsOf: URL(fileURLWithPath: errPath))) ?? Data()
        return Result(status: code, stdout: String(decoding: out, as: UTF8.self), stderr: String(decoding: err, as: UTF8.self))
    }
}


/// glibc's `posix_spawn_file_actions_addclosefrom_np(3)` (2.34; Swift's Glibc module leaves it out).
@_silgen_name("posix_spawn_file_actions_addclosefrom_np")
private func spawn_addclosefrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32) -> Int32
