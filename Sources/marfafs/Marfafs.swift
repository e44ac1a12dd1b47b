import ArgumentParser
import Foundation

/// The `marfafs` command line: the composition root of the project.
@main
struct Marfafs: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "marfafs",
        abstract: "Mount a knowledge base as a filesystem.",
        discussion: "See marfafs(1) for commands and exit codes, marfafs(7) for the layout.",
        subcommands: [MountCommand.self, UnmountCommand.self, StatusCommand.self, PendingCommand.self, SyncCommand.self, ConflictsCommand.self, EventsCommand.self, ResyncCommand.self, TrashCommand.self,
                      ImportCommand.self, ExportCommand.self, ServeCommand.self])

    /// Started as `mount.fuse.marfafs` (by mount(8)) or as fuse3's `mount.fuse` starts it, it is
    /// the mount helper; else the command line.
    static func main() {
        if MountHelper.invoked() { MountHelper.main() }
        main(nil)
    }
}

/// Exit codes (marfafs(1)): 0 success, 1 failure, 3 busy or in use, 64 usage error (ArgumentParser).
enum Exit {
    static let failure: Int32 = 1
    static let busy: Int32 = 3
}

struct CLIError: Error, CustomStringConvertible {
    var description: String
    var code: Int32 = Exit.failure
    init(_ d: String, code: Int32 = Exit.failure) { description = d; self.code = code }
}

func fail(_ e: CLIError) -> Never {
    FileHandle.standardError.write(Data("marfafs: \(e.description)\n".utf8))
    exit(e.code)
}

enum Paths {
    /// `$XDG_DATA_HOME/marfafs/default.sqlite` (XDG_DATA_HOME defaults to ~/.local/share).
    static func defaultStore() -> String {
        let env = ProcessInfo.processInfo.environment
        let base = env["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? ((env["HOME"] ?? NSHomeDirectory()) + "/.local/share")
        return base + "/marfafs/default.sqlite"
    }

    static func absolute(_ p: String) -> String {
        let url = URL(fileURLWithPath: p, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
        return url.standardizedFileURL.path
    }

    /// The marfafs mount that holds `p` (a mount point, or any path inside a mount: `.` in
    /// `vault/notes`, whose real path runs through `.marfafs/vault`); `p` made absolute if none does.
    static func mount(holding p: String) -> String {
        let given = absolute(p)
        let points = MountPoint.mounts().filter { $0.type == "fuse.marfafs" }.map(\.point)
        var candidates = [given]
        if let real = realpath(given, nil) { candidates.append(String(cString: real)); free(real) }
        for path in candidates {
            let holding = points.filter { path == $0 || path.hasPrefix($0 == "/" ? "/" : $0 + "/") }
            if let longest = holding.max(by: { $0.count < $1.count }) { return longest }
        }
        return given
    }
}

struct StoreOption: ParsableArguments {
    @Option(name: .long, help: "The store (SQLite file). Default: $XDG_DATA_HOME/marfafs/default.sqlite.")
    var store: String?

    var path: String { Paths.absolute(store ?? Paths.defaultStore()) }
}
