import Foundation

/// A program that holds one file in a buffer as an autosaving editor does (Obsidian, VS Code,
/// Typora): it reads the file only when told to (a reload), edits its buffer, and saves the whole
/// buffer the way it is told — in place (`open(O_TRUNC)` + `write` + `close`) or to a temporary
/// file renamed over the file. One process for its whole life, as an editor is (FS-29: a save's
/// base is what that program saw). Driven line by line over a pipe; ended by `close()` or deinit.
public final class BufferEditor {
    public enum Save: String, CaseIterable, Sendable { case inPlace, tempAndRename }

    private let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private var pending = Data()

    static let script = #"""
    import os, sys
    path = sys.argv[1]
    buf = ""
    for line in sys.stdin:
        cmd, _, arg = line.rstrip("\n").partition(" ")
        arg = arg.replace("\\n", "\n")
        try:
            if cmd == "read":
                with open(path) as f: buf = f.read()
            elif cmd == "append":
                buf += arg
            elif cmd == "replace":
                old, new = arg.split("\t")
                if old not in buf: raise Exception("not in the buffer: " + old)
                buf = buf.replace(old, new, 1)
            elif cmd == "inPlace":
                with open(path, "w") as f: f.write(buf)
            elif cmd == "tempAndRename":
                d, b = os.path.split(path)
                tmp = os.path.join(d, "." + b + ".tmp-" + str(os.getpid()))
                with open(tmp, "w") as f: f.write(buf)
                os.rename(tmp, path)
            elif cmd == "quit":
                sys.exit(0)
            elif cmd == "buffer":
                print("ok " + buf.replace("\n", "\\n"), flush=True); continue
            print("ok", flush=True)
        except Exception as e:
            print("error " + str(e).replace("\n", " "), flush=True)
    """#

    /// Starts the editor on `path` (it reads the file at once, as an editor opening it does).
    public init(path: String) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", Self.script, path]
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        try send("read")
    }

    deinit { close() }

    /// The editor's process id (what the mount sees as the writer).
    public var pid: Int32 { process.processIdentifier }

    /// Reads the file into the buffer (a reload).
    public func reload() throws { try send("read") }
    /// Appends `text` to the buffer.
    public func append(_ text: String) throws { try send("append " + text.replacingOccurrences(of: "\n", with: "\\n")) }
    /// Replaces the first `old` in the buffer by `new` (single lines).
    public func replace(_ old: String, with new: String) throws { try send("replace \(old)\t\(new)") }
    /// Saves the buffer whole, as `how`.
    public func save(_ how: Save) throws { try send(how.rawValue) }
    /// What the buffer holds.
    public func buffer() throws -> String { try send("buffer").replacingOccurrences(of: "\\n", with: "\n") }

    /// Ends the editor: by a command, since a process spawned meanwhile may hold the pipe's other
    /// end (no end of file reaches it then); killed if it does not end within two seconds.
    public func close() {
        guard process.isRunning else { return }
        input.fileHandleForWriting.write(Data("quit\n".utf8))
        let deadline = Date().addingTimeInterval(2)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        try? input.fileHandleForWriting.close()
    }

    /// Sends one command; returns what followed `ok`, throws on `error`.
    @discardableResult
    private func send(_ command: String) throws -> String {
        input.fileHandleForWriting.write(Data((command + "\n").utf8))
        while true {
            if let nl = pending.firstIndex(of: 0x0A) {
                let line = String(decoding: pending[..<nl], as: UTF8.self)
                pending.removeSubrange(...nl)
                if line.hasPrefix("ok") { return String(line.dropFirst(3)) }
                throw HarnessError("editor: \(command): \(line)")
            }
            let more = output.fileHandleForReading.availableData
            if more.isEmpty { throw HarnessError("editor: \(command): the editor ended") }
            pending.append(more)
        }
    }
}
