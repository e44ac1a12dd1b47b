import Foundation

/// Drives an interactive program (an editor) in a detached tmux session: waits for its screen,
/// types key groups, and waits for it to exit.
public struct Terminal {
    public struct Outcome: Sendable {
        /// The program's exit status, nil if it did not exit in time.
        public var status: Int32?
        /// Every screen seen after a key group, and the last one (vim's E667, "changed since reading").
        public var screen: String
    }

    static let tmux = "/usr/bin/tmux"

    /// Runs `command` with `cwd` as working directory. `ready` is text the first screen shows once
    /// the program is ready for keys; each group of `keys` is sent after the screen settles.
    /// `between(i)` runs before key group `i` is sent (a change made while the program runs).
    /// A group whose first element is `?TEXT` is sent only if the screen shows TEXT (the answer to
    /// a prompt the program may or may not show).
    public static func drive(_ command: String, cwd: String, ready: String, keys: [[String]], timeout: Double = 15,
                             between: (Int) -> Void = { _ in }) -> Outcome {
        let session = "marfafs-\(UInt32.random(in: 0...UInt32.max))"
        let statusFile = NSTemporaryDirectory() + session + ".status"
        defer { _ = Shell.run([tmux, "kill-session", "-t", session]); unlink(statusFile) }
        let script = "cd '\(cwd)' && \(command); echo $? > '\(statusFile)'; sleep 30"
        let start = Shell.run([tmux, "new-session", "-d", "-s", session, "-x", "120", "-y", "30", script])
        guard start.status == 0 else { return Outcome(status: nil, screen: "tmux: \(start.stderr)") }
        let deadline = Date().addingTimeInterval(timeout)
        var screen = capture(session)
        while !screen.contains(ready) && Date() < deadline { usleep(50_000); screen = capture(session) }
        var seen = [String]()
        for (i, group) in keys.enumerated() {
            between(i)
            var group = group
            if let first = group.first, first.hasPrefix("?") {
                // A prompt may take a moment to show.
                let wait = Date().addingTimeInterval(1.5)
                var shown = capture(session).contains(first.dropFirst())
                while !shown && Date() < wait { usleep(100_000); shown = capture(session).contains(first.dropFirst()) }
                group = shown ? Array(group.dropFirst()) : []
            }
            if !group.isEmpty { _ = Shell.run([tmux, "send-keys", "-t", session] + group) }
            // Let the program take the keys in before the next group (a stable screen).
            var last = ""
            for _ in 0..<20 {
                usleep(100_000)
                let now = capture(session)
                if now == last { break }
                last = now
            }
            seen.append(last)
        }
        var status: Int32?
        while status == nil && Date() < deadline {
            if let s = try? String(contentsOfFile: statusFile, encoding: .utf8), let v = Int32(s.trimmingCharacters(in: .whitespacesAndNewlines)) {
                status = v
            } else { usleep(50_000) }
        }
        return Outcome(status: status, screen: (seen + [capture(session)]).joined(separator: "\n----\n"))
    }

    static func capture(_ session: String) -> String {
        Shell.run([tmux, "capture-pane", "-p", "-t", session]).stdout
    }
}
