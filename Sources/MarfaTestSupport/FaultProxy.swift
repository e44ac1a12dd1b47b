import Foundation

/// `scripts/testing/fault_proxy.py` in front of a real server: every request goes through, except
/// what the mode says is done to changes (`pass`, `hang`, `503`, `400`, `throttle=N` bytes/s).
/// A stand-in only for the network between the mount and the server, which a test cannot
/// otherwise make slow or refuse on cue.
public final class FaultProxy {
    let control: String
    let pid: pid_t
    /// The proxy's base URL, to give a mount as `--server`.
    public let url: String

    public init(in server: ServerHarness, mode: String = "pass") throws {
        control = server.root + "/proxy-mode"
        let portFile = server.root + "/proxy-port"
        try? FileManager.default.removeItem(atPath: portFile)
        try mode.write(toFile: control, atomically: true, encoding: .utf8)
        let upstream = server.base.split(separator: ":").last.map(String.init) ?? ""
        guard let p = Shell.spawn(["python3", MountHarness.repoRoot + "/scripts/testing/fault_proxy.py", upstream, control, portFile],
                                  stderr: server.root + "/proxy.log") else { throw HarnessError("cannot start the proxy") }
        pid = p
        guard MountHarness.eventually(timeout: 10, { FileManager.default.fileExists(atPath: portFile) }),
              let port = try? String(contentsOfFile: portFile, encoding: .utf8) else {
            Shell.killAndReap(p)
            throw HarnessError("the proxy did not start")
        }
        url = "http://127.0.0.1:\(port)"
    }

    /// What is done to the next changes.
    public func mode(_ m: String) { try? m.write(toFile: control, atomically: true, encoding: .utf8) }

    deinit { Shell.killAndReap(pid) }
}
