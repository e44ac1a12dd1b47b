import Foundation
import Glibc

/// A program that holds one file in a buffer as an autosaving editor does (Obsidian, VS Code,
/// Typora): it reads the file only when told to (a reload), edits its buffer, and saves the whole
/// buffer the way it is told — in place (`open(O_TRUNC)` + `write` + `close`) or to a temporary
/// file renamed over the file. One process for its whole life, as an editor is (FS-29: a save's
/// base is what that program saw; it reads on another thread than it writes). Commands go through
/// a FIFO and answers come back in a file: it
/// is started by `Shell.spawn`, which gives a child none of the test process's other descriptors
/// (one open on another test's mount would keep that mount busy). Ended by `close()` or deinit.
public final class BufferEditor {
    public enum Save: String, CaseIterable, Sendable { case inPlace, tempAndRename }

    private let base = NSTemporaryDirectory() + "marfafs-editor-" + UUID().uuidString
    private var input: Int32 = -1
    private var answered = 0
    /// The editor's process id (what the mount sees as the writer).
    public private(set) var pid: pid_t = 0

    static let script = #"""
    import os, sys, threading, time
    path = sys.argv[1]
    buf = ""
    def load():
        global buf
        with open(path) as f: buf = f.read()
    for line in open(sys.argv[2]):
        cmd, _, arg = line.rstrip("\n").partition(" ")
        arg = arg.replace("\\n", "\n")
        try:
            if cmd == "read":
                # On a thread of its own, saved from the main one, as editors on a pool of
                # threads do: the mount must see one program.
                t = threading.Thread(target=load); t.start(); t.join()
            elif cmd == "append":
                buf += arg
            elif cmd == "replace":
                old, new = arg.split("\t")
                if old not in buf: raise Exception("not in the buffer: " + old)
                buf = buf.replace(old, new, 1)
            elif cmd == "inPlace":
                with open(path, "w") as f: f.write(buf)
            elif cmd == "inPlaceSlowly":
                # In place, as a program descheduled between its calls: the truncate, a pause,
                # half the text, a pause, the rest (each pause `arg` seconds).
                with open(path, "w") as f:
                    time.sleep(float(arg)); f.flush()
                    f.write(buf[:len(buf) // 2]); f.flush(); time.sleep(float(arg))
                    f.write(buf[len(buf) // 2:])
            elif cmd == "tempAndRename":
                d, b = os.path.split(path)
                tmp = os.path.join(d, "." + b + ".tmp-" + str(os.getpid()))
                with open(tmp, "w") as f: f.write(buf)
                os.rename(tmp, path)
            elif cmd == "quit":
                sys.exit(0)
            print("ok", flush=True)
        except Exception as e:
            print("error " + str(e).replace("\n", " "), flush=True)
    """#

    /// Starts the editor on `path` (it reads the file at once, as an editor opening it does).
    public init(path: String) throws {
        guard mkfifo(base + ".in", 0o600) == 0 else { throw HarnessError("mkfifo: \(String(cString: strerror(errno)))") }
        guard let p = Shell.spawn(["/usr/bin/python3", "-c", Self.script, path, base + ".in"], stdout: base + ".out", stderr: base + ".err") else {
            throw HarnessError("the editor did not start")
        }
        pid = p
        // Returns once the editor has opened its end (at once).
        input = open(base + ".in", O_WRONLY | O_CLOEXEC)
        guard input >= 0 else { throw HarnessError("the editor's FIFO: \(String(cString: strerror(errno)))") }
        try send("read")
    }

    deinit { close() }

    /// Reads the file into the buffer (a reload).
    public func reload() throws { try send("read") }
    /// Appends `text` to the buffer.
    public func append(_ text: String) throws { try send("append " + text.replacingOccurrences(of: "\n", with: "\\n")) }
    /// Replaces the first `old` in the buffer by `new` (single lines).
    public func replace(_ old: String, with new: String) throws { try send("replace \(old)\t\(new)") }
    /// Saves the buffer whole, as `how`.
    public func save(_ how: Save) throws { try send(how.rawValue) }
    /// Saves the buffer in place with a pause of `pause` seconds after the truncate and another
    /// after the first half of its bytes (a program descheduled on a loaded machine).
    public func saveInPlaceSlowly(pause: Double) throws { try send("inPlaceSlowly \(pause)") }

    /// Ends the editor (killed if it has not ended within two seconds) and removes its files.
    public func close() {
        guard pid > 0 else { return }
        if input >= 0 { _ = Array("quit\n".utf8).withUnsafeBytes { Glibc.write(input, $0.baseAddress, $0.count) } }
        let deadline = Date().addingTimeInterval(2)
        var status: Int32 = 0
        var done = waitpid(pid, &status, WNOHANG) == pid
        while !done && Date() < deadline { usleep(20_000); done = waitpid(pid, &status, WNOHANG) == pid }
        if !done { Shell.killAndReap(pid) }
        pid = 0
        if input >= 0 { Glibc.close(input); input = -1 }
        for ext in [".in", ".out", ".err"] { unlink(base + ext) }
    }

    /// Sends one command; returns what followed `ok`, throws on `error` or when no answer comes
    /// within 20 seconds.
    @discardableResult
    private func send(_ command: String) throws -> String {
        let line = Array((command + "\n").utf8)
        guard line.withUnsafeBytes({ Glibc.write(input, $0.baseAddress, $0.count) }) == line.count else {
            throw HarnessError("editor: \(command): the editor is gone")
        }
        let deadline = Date().addingTimeInterval(20)
        while true {
            let all = (try? String(contentsOfFile: base + ".out", encoding: .utf8)) ?? ""
            let lines = all.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
            if lines.count > answered {
                let answer = String(lines[answered])
                answered += 1
                if answer.hasPrefix("ok") { return String(answer.dropFirst(3)) }
                throw HarnessError("editor: \(command): \(answer)")
            }
            if Date() >= deadline { throw HarnessError("editor: \(command): no answer in 20 s") }
            usleep(5_000)
        }
    }
}
