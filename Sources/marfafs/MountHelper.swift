import Foundation

/// `mount.fuse.marfafs` (and `mount.marfafs`): what mount(8) runs for `mount -t fuse.marfafs` and
/// for an fstab line of that type, as `mount.fuse.marfafs STORE MOUNTPOINT [-sfnv] [-o OPTIONS]`.
/// It becomes `marfafs mount MOUNTPOINT --store STORE -o OPTIONS`, which returns once the mount
/// is ready (marfafs(1), MOUNT OPTIONS).
enum MountHelper {
    static let names: Set<String> = ["mount.fuse.marfafs", "mount.marfafs"]

    /// Whether this process was started as the mount helper: by its name, or as fuse3's
    /// `mount.fuse` runs the program a `fuse.marfafs` type names (`marfafs STORE MOUNTPOINT -o …`:
    /// two arguments that are neither a command nor an option).
    static func invoked(_ argv: [String] = CommandLine.arguments) -> Bool {
        if names.contains(URL(fileURLWithPath: argv.first ?? "").lastPathComponent) { return true }
        let args = argv.dropFirst()
        guard args.count >= 2, let first = args.first, !first.hasPrefix("-"), !args.dropFirst().first!.hasPrefix("-") else { return false }
        let commands = Set(Marfafs.configuration.subcommands.map { $0.configuration.commandName ?? "" } + ["help"])
        return !commands.contains(first)
    }

    struct Call: Equatable {
        var source = "", target = ""
        var options: [String] = []
        var sloppy = false, fake = false, verbose = false
    }

    /// mount(8)'s helper arguments.
    static func parse(_ args: [String]) throws -> Call {
        var call = Call(), positional: [String] = []
        var i = 0
        while i < args.count {
            let a = args[i]
            switch a {
            case "-o":
                guard i + 1 < args.count else { throw CLIError("-o needs a list of options", code: 64) }
                call.options.append(args[i + 1]); i += 1
            case "-t", "-N":
                guard i + 1 < args.count else { throw CLIError("\(a) needs a value", code: 64) }
                if a == "-t", !["fuse.marfafs", "marfafs"].contains(args[i + 1]) { throw CLIError("this helper mounts fuse.marfafs, not \(args[i + 1])", code: 64) }
                i += 1
            default:
                if a.hasPrefix("-o"), a.count > 2 { call.options.append(String(a.dropFirst(2))) }
                else if a.hasPrefix("-"), a.count > 1, a.dropFirst().allSatisfy({ "sfnvwr".contains($0) }) {
                    call.sloppy = call.sloppy || a.contains("s")
                    call.fake = call.fake || a.contains("f")
                    call.verbose = call.verbose || a.contains("v")
                    if a.contains("r") { call.options.append("ro") }
                } else if a.hasPrefix("-"), a.count > 1 { throw CLIError("unknown argument \(a)", code: 64) }
                else { positional.append(a) }
            }
            i += 1
        }
        guard positional.count == 2 else { throw CLIError("usage: mount.fuse.marfafs STORE MOUNTPOINT [-o OPTIONS]", code: 64) }
        call.source = positional[0]
        call.target = positional[1]
        return call
    }

    /// Runs as the helper: checks the options, then runs `marfafs mount` in this process.
    static func main() -> Never {
        do {
            let call = try parse(Array(CommandLine.arguments.dropFirst()))
            // Checked here so a bad fstab line fails before anything is started.
            let checked = try MountOptions.parse(call.options, sloppy: call.sloppy)
            if call.fake { exit(0) }
            var argv = ["mount", call.target, "--store", call.source]
            // With -s the unknown options were dropped: only what was understood goes on.
            if call.sloppy { argv += ["-o", checked.asList] } else { argv += call.options.flatMap { ["-o", $0] } }
            if call.verbose { print("marfafs " + argv.joined(separator: " ")) }
            Marfafs.main(argv)
            exit(0)
        } catch let e as CLIError { fail(e) }
        catch { fail(CLIError("\(error)")) }
    }
}

extension MountOptions {
    /// The options again as one `-o` list (commas in values escaped).
    var asList: String {
        var parts: [String] = []
        func add(_ n: String, _ v: String?) { if let v { parts.append(n + "=" + v.replacingOccurrences(of: ",", with: "\\,")) } }
        add("store", store); add("server", server); add("key_file", keyFile); add("conflict", conflict); add("device", device)
        add("log_file", logFile); add("trash_days", trashDays.map(String.init)); add("user", runAs)
        if allowOther { parts.append("allow_other") }
        if readOnly { parts.append("ro") }
        if verbose { parts.append("verbose") }
        return parts.joined(separator: ",")
    }
}

/// Running the mount as the user an option names (`user=`, `uid=`, `setuid=`).
enum Privileges {
    /// As root: becomes `who` (a name or a uid), with its groups, home and XDG data directory.
    /// As anyone else: only oneself may be named.
    static func become(_ who: String) throws {
        guard let pw = (UInt32(who).flatMap { getpwuid($0) } ?? getpwnam(who)) else {
            throw CLIError("no such user: \(who)")
        }
        let uid = pw.pointee.pw_uid, gid = pw.pointee.pw_gid
        let name = String(cString: pw.pointee.pw_name), home = String(cString: pw.pointee.pw_dir)
        if getuid() == uid && geteuid() == uid { return }
        guard geteuid() == 0 else { throw CLIError("only root can mount as another user (\(name)); this is uid \(geteuid())") }
        guard initgroups(name, gid) == 0, setgid(gid) == 0, setuid(uid) == 0 else {
            throw CLIError("cannot become \(name): \(String(cString: strerror(errno)))")
        }
        setenv("HOME", home, 1); setenv("USER", name, 1); setenv("LOGNAME", name, 1)
        unsetenv("XDG_DATA_HOME")
    }
}
