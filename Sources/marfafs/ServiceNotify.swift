import Foundation
import MarfaModel

/// systemd's notify protocol (sd_notify(3)): datagrams of `NAME=value` lines sent to the socket
/// named by `NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace).
final class NotifySocket: @unchecked Sendable {
    private let fd: Int32
    private var address: sockaddr_un
    private let length: socklen_t

    /// nil when `NOTIFY_SOCKET` is unset or cannot be used.
    init?(_ environment: [String: String] = ProcessInfo.processInfo.environment) {
        guard let name = environment["NOTIFY_SOCKET"], !name.isEmpty, name.hasPrefix("/") || name.hasPrefix("@") else { return nil }
        var bytes = Array(name.utf8)
        if bytes[0] == UInt8(ascii: "@") { bytes[0] = 0 }
        var a = sockaddr_un()
        a.sun_family = sa_family_t(AF_UNIX)
        let room = MemoryLayout.size(ofValue: a.sun_path)
        guard bytes.count < room else { return nil }
        withUnsafeMutableBytes(of: &a.sun_path) { p in for (i, b) in bytes.enumerated() { p[i] = b } }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        self.fd = fd
        address = a
        length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes[0] == 0 ? 0 : 1))
    }

    deinit { close(fd) }

    /// Sends one message (several `NAME=value` lines); a manager that is gone is not an error.
    func send(_ message: String) {
        let data = Array(message.utf8)
        _ = withUnsafePointer(to: &address) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                data.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), sa, length) }
            }
        }
    }
}

/// What a foreground mount tells its service manager (marfafs(1), SYSTEMD):
/// `READY=1` once the mount answers (with a server, once the first sync is done or the mount
/// has stopped waiting for it), a `STATUS=` line every few seconds (items, queue depth,
/// connection), `WATCHDOG=1` at half of `WATCHDOG_USEC` while the mount answers, and
/// `STOPPING=1` when it begins to unmount.
final class ServiceReporter: @unchecked Sendable {
    let socket: NotifySocket
    let mountpoint: String
    let statusJSON: @Sendable () -> String
    let withServer: Bool
    let logPath: String
    private let stopped = NSCondition()
    private var isStopping = false

    init?(mountpoint: String, withServer: Bool, logPath: String, statusJSON: @escaping @Sendable () -> String) {
        guard let s = NotifySocket() else { return nil }
        socket = s
        self.mountpoint = mountpoint
        self.withServer = withServer
        self.logPath = logPath
        self.statusJSON = statusJSON
    }

    /// Starts reporting on threads of its own.
    func start() {
        Thread { [self] in
            guard waitUntilAnswering() else { return }
            if withServer { MountCommand.followFirstSync(mountpoint, log: logPath) }
            socket.send("READY=1\nMAINPID=\(getpid())\n" + statusLine())
            while !pause(5) { socket.send(statusLine()) }
        }.start()
        let env = ProcessInfo.processInfo.environment
        if let usec = env["WATCHDOG_USEC"].flatMap(UInt64.init), usec > 0,
           env["WATCHDOG_PID"].flatMap(Int32.init).map({ $0 == getpid() }) ?? true {
            Thread { [self] in
                let every = Double(usec) / 2e6
                while !pause(every) { if answers() { socket.send("WATCHDOG=1") } }
            }.start()
        }
    }

    /// The mount begins to unmount.
    func stopping() {
        stopped.lock()
        let first = !isStopping
        isStopping = true
        stopped.broadcast()
        stopped.unlock()
        if first { socket.send("STOPPING=1\nSTATUS=unmounting \(mountpoint)") }
    }

    /// Waits `seconds`; true once the mount is stopping.
    private func pause(_ seconds: Double) -> Bool {
        stopped.lock()
        defer { stopped.unlock() }
        let until = Date().addingTimeInterval(seconds)
        while !isStopping && stopped.wait(until: until) {}
        return isStopping
    }

    /// A name never seen before reaches the daemon (the kernel has nothing cached for it), so an
    /// answer (ENOENT) means the request loop serves.
    private func answers() -> Bool {
        var st = stat()
        return lstat(mountpoint + "/.marfafs/watchdog-\(UInt64.random(in: 0...UInt64.max))", &st) == 0 || errno == ENOENT
    }

    private func waitUntilAnswering() -> Bool {
        while !answers() { if pause(0.02) { return false } }
        return true
    }

    /// `STATUS=` for `systemctl status`: items, queue, connection.
    func statusLine() -> String {
        let o = (try? JSONParser.parse(statusJSON()))?.objectValue ?? [:]
        func text(_ k: String) -> String { o[k].map { $0.stringValue ?? JSONCoding.encode($0) } ?? "-" }
        var line = "STATUS=\(mountpoint): \(text("items")) items, queue \(text("queue_depth"))"
        if withServer { line += ", \(text("connection"))" }
        if let c = o["conflicts"], c != .int(0) { line += ", conflicts \(JSONCoding.encode(c))" }
        return line
    }
}
