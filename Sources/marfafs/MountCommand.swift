import ArgumentParser
import Foundation
import Logging
import MarfaFS
import MarfaModel
import MarfaFUSE
import MarfaStore
import MarfaSync

struct MountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mount", abstract: "Mount a knowledge base; returns once the mount is ready.")

    @Argument(help: "The directory to mount on.")
    var mountpoint: String

    @OptionGroup var storeOption: StoreOption

    @Flag(name: .long, help: "Stay in the foreground (logs to stderr) instead of starting a daemon.")
    var foreground = false

    @Option(name: .long, help: "Where the daemon writes its log. Default: <store>.log.")
    var logFile: String?

    @Flag(name: .long, help: "Log every operation that fails, and more.")
    var verbose = false

    @Option(name: .long, help: "The server to sync with: a Marfa-compatible server (http://127.0.0.1:8600), or a MyLifeDB server (mylifedb+http://127.0.0.1:12345). Default: none (local only).")
    var server: String?

    @Option(name: .long, help: "The file holding the server's API key, or a MyLifeDB server's password (mode 0600). Default: the MARFAFS_KEY environment variable.")
    var keyFile: String?

    @Option(name: .long, help: "How a conflict with the server is settled: merge (three-way merge of text, a conflicted copy only when edits overlap), keep-both (always a conflicted copy), or manual (held for the next save).")
    var conflict: String = "merge"

    @Option(name: .long, help: "The device label in a conflicted copy's name. Default: the host name.")
    var device: String?

    @Option(name: .long, help: "Items in the trash longer than this many days are purged at mount (0: never). Default: 30.")
    var trashDays: Int = 30

    @Flag(name: .long, help: "Let other users (and services running as them) use the mount; the kernel checks each file's mode (default_permissions). A mount by a user other than root needs user_allow_other in /etc/fuse.conf.")
    var allowOther = false

    @Option(name: .customShort("o"), help: ArgumentHelp("Options as mount(8) takes them: name=value,… (server=URL,key_file=F,conflict=,device=,trash_days=,log_file=,store=,allow_other,ro,verbose,user=NAME); see MOUNT OPTIONS in marfafs(1).", valueName: "options"))
    var options: [String] = []

    /// `-o ro`: the kernel refuses every change (EROFS).
    var readOnly = false

    /// The key, from --key-file or MARFAFS_KEY; checked before mounting so a bad one fails at once.
    func credential() throws -> Credential? {
        guard server != nil else { return nil }
        do {
            if let keyFile { return try Credential.file(Paths.absolute(keyFile), password: isMyLifeDB) }
            if isMyLifeDB, let p = ProcessInfo.processInfo.environment["MARFAFS_KEY"] { return try Credential(password: p) }
            guard let c = try Credential.environment() else {
                // A MyLifeDB server without password auth takes any password.
                if isMyLifeDB { return try Credential(password: "-") }
                throw CLIError("--server needs a key: --key-file FILE (mode 0600) or MARFAFS_KEY")
            }
            return c
        } catch let e as CredentialError { throw CLIError(e.description) }
    }

    /// A store follows one kind of server: its queue and what it knows of the server differ.
    func checkServerKind(_ store: Store) throws {
        guard let server, let bound = try store.boundServer(), bound.files != isMyLifeDB else { return }
        throw CLIError("the store \(storeOption.path) syncs with \(bound.files ? "the MyLifeDB server" : "the Marfa server") \(bound.server); "
                       + "it cannot follow \(server): use another --store")
    }

    static let myLifeDBScheme = "mylifedb+"
    /// `--server mylifedb+http://…` (FS-34).
    var isMyLifeDB: Bool { server?.hasPrefix(Self.myLifeDBScheme) ?? false }
    /// The server's own URL (`mylifedb+` taken off).
    var serverURL: String? { server.map { isMyLifeDB ? String($0.dropFirst(Self.myLifeDBScheme.count)) : $0 } }

    /// Takes `-o` into the options, and becomes the user it names.
    mutating func applyOptions() throws {
        let o = try MountOptions.parse(options)
        if let v = o.store { storeOption.store = v }
        if let v = o.server { server = v }
        if let v = o.keyFile { keyFile = v }
        if let v = o.conflict { conflict = v }
        if let v = o.device { device = v }
        if let v = o.logFile { logFile = v }
        if let v = o.trashDays { trashDays = v }
        allowOther = allowOther || o.allowOther
        verbose = verbose || o.verbose
        foreground = foreground || o.foreground
        readOnly = o.readOnly
        if let who = o.runAs { try Privileges.become(who) }
    }

    mutating func run() throws {
        do { try applyOptions() } catch let e as CLIError { fail(e) }
        let mnt = Paths.absolute(mountpoint)
        do {
            if let server = serverURL {
                guard let u = URL(string: server), ["http", "https"].contains(u.scheme ?? ""), u.host != nil else {
                    throw CLIError("--server must be an http(s) URL, e.g. http://127.0.0.1:8600, or mylifedb+http(s)://HOST:PORT for a MyLifeDB server")
                }
                _ = try credential()
                if FileManager.default.fileExists(atPath: storeOption.path) { try checkServerKind(try Store(path: storeOption.path)) }
                guard ConflictMode(rawValue: conflict) != nil else {
                    throw CLIError("--conflict is one of \(ConflictMode.allCases.map(\.rawValue).joined(separator: ", "))")
                }
            }
            try MountPoint.prepare(mnt)
            if foreground { try serve(mnt) } else { try daemonize(mnt) }
        } catch let e as CLIError { fail(e) }
        catch { fail(CLIError("\(error)")) }
    }

    func serve(_ mnt: String) throws {
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = verbose ? .debug : .info
            return h
        }
        let log = Logger(label: "marfafs.fuse")
        let lock = try StoreLock(store: storeOption.path)
        lock.record("mounted on \(mnt) by pid \(getpid())")
        let store = try Store(path: storeOption.path)
        let fs = try FileSystem(store: store, logger: Logger(label: "marfafs.fs"))
        // Trash retention (FS-28): what has been in the trash for --trash-days is purged.
        // On a disk with no room (a purge is a commit first) the mount comes up all the same.
        if trashDays > 0 {
            do {
                let purged = try store.purgeTrash(olderThan: Date().addingTimeInterval(-Double(trashDays) * 86_400))
                if !purged.isEmpty {
                    fs.forget(purged)
                    log.info("purged from the trash", metadata: ["items": "\(purged.count)", "older_than_days": "\(trashDays)"])
                }
            } catch StoreError.noSpace(let why) {
                log.warning("the trash is purged at the next mount", metadata: ["error": "no space left: \(why)"])
            }
        }
        store.device.withLock { [device] in $0 = device ?? ProcessInfo.processInfo.hostName }
        // A store keeps its queue's payloads only once a server has seen it (FS-28).
        try checkServerKind(store)
        if isMyLifeDB, let server {
            let queued = try store.useFileRemote(server: server)
            if queued > 0 { log.info("first mount with a MyLifeDB server: the local store's files are queued", metadata: ["files": "\(queued)"]) }
        } else if let server {
            let queued = try store.bind(server: server)
            if queued > 0 { log.info("first mount with a server: the local store's items are queued", metadata: ["mutations": "\(queued)"]) }
            do {
                let forms = try store.queueFileFormOnce()
                if forms > 0 { log.info("the names and front matter of files sent before are queued for the other mounts", metadata: ["items": "\(forms)"]) }
            } catch {
                log.warning("the files' names and front matter are queued at the next mount", metadata: ["error": "\(error)"])
            }
        } else {
            try store.useLocalOnly()
        }
        let fuse = FuseMount(fs: fs, mountpoint: mnt, logger: log, allowOther: allowOther, readOnly: readOnly, source: storeOption.path)
        try fuse.mount()
        // The sync engine: drains the queue to the server, off the FUSE threads.
        let engine = try startSync(fs: fs, store: store)
        let count = fs.itemCount
        log.info("mounted", metadata: ["mountpoint": "\(mnt)", "store": "\(storeOption.path)", "items": "\(count)"])
        // Under systemd (Type=notify): READY=1 once the mount answers, STATUS=, WATCHDOG=1, STOPPING=1.
        let service = ServiceReporter(mountpoint: mnt, withServer: engine != nil, logPath: logFile ?? "the journal") { fs.currentStatus() }
        service?.start()
        // SIGTERM and SIGINT unmount cleanly: end the loop, then wake a worker so it notices.
        signal(SIGTERM, SIG_IGN); signal(SIGINT, SIG_IGN); signal(SIGHUP, SIG_IGN)
        let sources = [SIGTERM, SIGINT, SIGHUP].map { sig -> DispatchSourceSignal in
            let s = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            s.setEventHandler { log.info("signal received, unmounting", metadata: ["signal": "\(sig)"]); service?.stopping(); fuse.stop() }
            s.resume()
            return s
        }
        // A command that finds the store held from now on waits for it (`StoreLock`), rather than
        // telling the user to unmount what is unmounted.
        fuse.onUnmounted = { lock.record(StoreLock.finishing(mnt)) }
        let done = DispatchSemaphore(value: 0)
        let t = Thread { fuse.run(); done.signal() }
        t.name = "marfafs-fuse"
        t.start()
        done.wait()
        service?.stopping()
        // Everything settled: a server change still held for a save is the store's now, or the
        // next mount, whose stream starts after it, would never see it.
        if engine != nil { _ = try? store.applyHeldRemotes(publishing: false) }
        engine?.stop()
        _ = sources
        try? store.syncDurably()
        // The log's pages into the database file: a copy of it after the unmount is whole (a
        // reader of the log, another program's, is waited for a moment).
        store.truncateWAL(readerWaitMs: 1000)
        log.info("unmounted", metadata: ["mountpoint": "\(mnt)"])
        withExtendedLifetime(lock) {}
    }

    /// The sync engine for `--server` (a Marfa server's, or a MyLifeDB server's: FS-34), started,
    /// with what the filesystem asks of it; nil without a server.
    func startSync(fs: FileSystem, store: Store) throws -> (any SyncRemote)? {
        if let server, let url = serverURL, let key = try credential() {
            let reload: @Sendable () throws -> Credential = { [keyFile, isMyLifeDB] in
                if let keyFile { return try Credential.file(Paths.absolute(keyFile), password: isMyLifeDB) }
                return try Credential.environment() ?? key
            }
            let label = device ?? ProcessInfo.processInfo.hostName
            let sync: any SyncRemote
            if isMyLifeDB {
                let rescan = ProcessInfo.processInfo.environment["MARFAFS_RESCAN_SECONDS"].flatMap(Double.init) ?? 60
                sync = MyLifeDBEngine(store: store, baseURL: url, password: key, log: Logger(label: "marfafs.sync"), device: label,
                                      rescan: rescan, isLocalOnly: { [weak fs] path in fs?.keepsLocal(path) ?? false },
                                      loadCredential: reload)
            } else {
                let silence = ProcessInfo.processInfo.environment["MARFAFS_STREAM_SILENCE_SECONDS"].flatMap(Double.init) ?? 60
                sync = SyncEngine(store: store, baseURL: url, credential: key, log: Logger(label: "marfafs.sync"),
                                  conflictMode: ConflictMode(rawValue: conflict) ?? .merge, device: label,
                                  silence: silence, isLocalOnly: { [weak fs] path in fs?.keepsLocal(path) ?? false },
                                  loadCredential: reload)
            }
            let status = sync.status
            status.pathOf.withLock { $0 = { [weak fs] id in fs?.pathOfItem(id) } }
            fs.syncStatus = { status.snapshot }
            fs.syncEvents = { status.eventLines }
            fs.fetchBlob = { sync.fetchBlob($0, timeout: 120) }
            fs.fetchVersions = { sync.fetchVersions($0, timeout: 5) }
            fs.onStaleSave = { item, copy in
                status.record(copy == nil ? "stale_save.merged" : "stale_save.copied",
                              copy.map { ["item": .string(item), "copy": .string($0)] } ?? ["item": .string(item)])
            }
            if let mylifedb = sync as? MyLifeDBEngine {
                fs.fetchPreview = { mylifedb.fetchPreview($0, timeout: 20) }
                fs.remoteKeepsSymlinks = false
            }
            sync.start()
            Logger(label: "marfafs.fuse").info("syncing", metadata: ["server": "\(server)", "key": "\(isMyLifeDB ? "password" : key.description)"])
            return sync
        }
        return nil
    }

    /// Starts `marfafs mount --foreground` in a new session and waits for the mount to appear.
    func daemonize(_ mnt: String) throws {
        StoreLock.waitIfFinishing(store: storeOption.path)
        let logPath = Paths.absolute(logFile ?? storeOption.path + ".log")
        try FileManager.default.createDirectory(atPath: (logPath as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let exe = Self.executablePath()
        var args = [exe, "mount", mnt, "--foreground", "--store", storeOption.path]
        if verbose { args.append("--verbose") }
        if let server { args += ["--server", server] }
        if let keyFile { args += ["--key-file", Paths.absolute(keyFile)] }
        if server != nil { args += ["--conflict", conflict] }
        if let device { args += ["--device", device] }
        args += ["--trash-days", String(trashDays)]
        if allowOther { args.append("--allow-other") }
        if readOnly { args += ["-o", "ro"] }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, logPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        posix_spawnattr_setflags(&attr, Int16(0x80) /* POSIX_SPAWN_SETSID (glibc) */)
        var pid: pid_t = 0
        let cargs = args.map { strdup($0) } + [nil]
        defer { cargs.forEach { free($0) } }
        let rc = posix_spawn(&pid, exe, &actions, &attr, cargs, environ)
        posix_spawn_file_actions_destroy(&actions)
        posix_spawnattr_destroy(&attr)
        guard rc == 0 else { throw CLIError("cannot start the daemon \(exe) (log \(logPath)): \(String(cString: strerror(rc)))") }
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if MountPoint.isMarfafsMount(mnt) {
                print("mounted \(mnt) (store \(storeOption.path), log \(logPath), pid \(pid))")
                if server != nil { Self.followFirstSync(mnt, log: logPath) }
                return
            }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                let tail = (try? String(contentsOfFile: logPath, encoding: .utf8))?.split(separator: "\n").suffix(5).joined(separator: "\n") ?? ""
                throw CLIError("the daemon exited before the mount was ready:\n\(tail)", code: (status >> 8) & 0xff == Exit.busy ? Exit.busy : Exit.failure)
            }
            usleep(20_000)
        }
        kill(pid, SIGTERM)
        throw CLIError("the mount did not become ready within 60 s (log: \(logPath))")
    }

    /// With a server: waits for the first sync to end, with a progress line on a terminal (one
    /// log line otherwise). It stops waiting when the server refuses the key, or has not answered
    /// for `offlinePatience` seconds, and says so: the mount works offline meanwhile, and the
    /// first sync runs when the server is back.
    /// A read of the status that fails or does not parse is tried again; it gives up only after
    /// `patience` seconds of failures, and then says so.
    static func followFirstSync(_ mnt: String, log: String, patience: Double = 30, offlinePatience: Double = 10) {
        let tty = isatty(1) != 0
        let started = Date()
        var shown = false
        var failingSince: Date?
        var offlineSince: Date?
        var lastFailure = ""
        while true {
            let text: String?
            do { text = try readControlFile(mnt, "status") } catch {
                text = nil; lastFailure = "\(error.localizedDescription)"
            }
            guard let text, let status = (try? JSONParser.parse(text))?.objectValue else {
                if text != nil { lastFailure = "it did not parse as JSON (\(text!.count) bytes)" }
                let since = failingSince ?? Date()
                failingSince = since
                if Date().timeIntervalSince(since) > patience {
                    if shown, tty { print("") }
                    print("stopped waiting for the first sync: \(mnt)/.marfafs/status could not be read for \(Int(patience)) s (\(lastFailure)); the mount is up and the first sync goes on: see marfafs status \(mnt) and the log \(log)")
                    return
                }
                usleep(200_000)
                continue
            }
            failingSince = nil
            if status["first_sync_done"] == .bool(true) {
                if shown, tty { print("") }
                let items = status["items"].map { JSONCoding.encode($0) } ?? "?"
                if shown || !tty { print("first sync done: \(items) items (\(String(format: "%.1f", Date().timeIntervalSince(started))) s)") }
                return
            }
            // A refused key needs the user; a server that does not answer may be busy (the engine
            // keeps trying): it is waited for a while before the mount returns without it.
            let conn = status["connection"]?.stringValue ?? ""
            let offline = conn == "offline" || status["stream"]?.stringValue == "offline"
            offlineSince = offline ? (offlineSince ?? Date()) : nil
            if conn == "unauthorized" || (offlineSince.map { Date().timeIntervalSince($0) > offlinePatience } ?? false) {
                if shown, tty { print("") }
                print("the server is \(conn == "unauthorized" ? "refusing the key" : "unreachable"); the first sync will run when it answers (marfafs status \(mnt); log: \(log))")
                return
            }
            if tty, case .object(let t)? = status["transfer"] {
                let items = t["items"].map { JSONCoding.encode($0) } ?? "0", edges = t["edges"].map { JSONCoding.encode($0) } ?? "0"
                let done: Double = { if case .double(let d)? = t["done"] { return d }; if case .int(let n)? = t["done"] { return Double(n) }; return 0 }()
                let width = 30, filled = min(width, max(0, Int(done * Double(width))))
                let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
                print("\rfirst sync [\(bar)] \(Int(done * 100))%: \(items) items, \(edges) edges", terminator: "")
                fflush(nil)
                shown = true
            }
            usleep(100_000)
        }
    }

    static func executablePath() -> String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    }
}

enum MountPoint {
    /// Checks the directory and recovers one left dead by a crashed daemon
    /// ("Transport endpoint is not connected"): lazy unmount, then abort its connection.
    static func prepare(_ mnt: String) throws {
        var st = stat()
        if stat(mnt, &st) != 0 {
            let err = errno
            if err == ENOTCONN || err == ECONNABORTED {
                recoverDead(mnt)
                guard stat(mnt, &st) == 0 else { throw CLIError("\(mnt) is a dead mount and could not be recovered") }
            } else {
                throw CLIError("\(mnt): \(String(cString: strerror(err)))")
            }
        }
        guard (st.st_mode & S_IFMT) == S_IFDIR else { throw CLIError("\(mnt) is not a directory") }
        if isMarfafsMount(mnt) {
            // The kernel may answer for the mount point itself from its cache after the daemon died;
            // the status file is never cached, so asking for it reaches the daemon, or fails.
            var probe = stat()
            if stat(mnt + "/.marfafs/status", &probe) != 0 && (errno == ENOTCONN || errno == ECONNABORTED) {
                recoverDead(mnt)
                if isMarfafsMount(mnt) { throw CLIError("\(mnt) is a dead mount and could not be recovered") }
                return
            }
            throw CLIError("\(mnt) is already mounted", code: Exit.busy)
        }
    }

    /// Aborts the dead mount's FUSE connection, then detaches it. In that order: once detached, its
    /// connection number is free, and a mount made meanwhile (another marfafs, any FUSE program)
    /// may get it; aborting by that number afterwards would kill the new mount.
    static func recoverDead(_ mnt: String) {
        if let minor = fuseMinor(mnt) {
            if !FileManager.default.fileExists(atPath: "/sys/fs/fuse/connections/\(minor)") {
                _ = run("/bin/mount", ["-t", "fusectl", "fusectl", "/sys/fs/fuse/connections"])
            }
            try? "1".write(toFile: "/sys/fs/fuse/connections/\(minor)/abort", atomically: false, encoding: .utf8)
        }
        _ = run("/bin/fusermount3", ["-u", "-z", mnt])
        _ = run("/bin/umount", ["-l", mnt])
    }

    static func mounts() -> [(dev: String, point: String, type: String)] {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let f = line.split(separator: " ")
            guard f.count > 9, let dash = f.firstIndex(of: "-"), dash + 1 < f.count else { return nil }
            let point = String(f[4]).replacingOccurrences(of: "\\040", with: " ")
            return (String(f[2]), point, String(f[dash + 1]))
        }
    }

    static func isMarfafsMount(_ mnt: String) -> Bool { mounts().contains { $0.point == mnt && $0.type == "fuse.marfafs" } }

    static func fuseMinor(_ mnt: String) -> String? {
        mounts().first { $0.point == mnt && $0.type.hasPrefix("fuse") }.map { String($0.dev.split(separator: ":").last ?? "") }
    }

    @discardableResult
    static func run(_ exe: String, _ args: [String]) -> Int32 {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: exe)
        p.arguments = args
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        do { try p.run() } catch { return -1 }
        p.waitUntilExit()
        return p.terminationStatus
    }
}
