import Foundation

/// `-o name=value,…`: the options of `marfafs mount` in mount(8)'s form, for `marfafs mount -o`,
/// `mount -t fuse.marfafs` and `/etc/fstab` (marfafs(1), MOUNT OPTIONS).
///
/// Each `marfafs mount` option has a name here (`key_file` or `key-file` for `--key-file`); the
/// generic options mount(8) and systemd pass along (`rw`, `defaults`, `_netdev`, `nofail`,
/// `noauto`, `user`, `x-systemd.*`, …) are accepted and change nothing; anything else is refused.
struct MountOptions: Equatable {
    var store: String?
    var server: String?
    var keyFile: String?
    var conflict: String?
    var device: String?
    var logFile: String?
    var trashDays: Int?
    var allowOther = false
    var readOnly = false
    var verbose = false
    var foreground = false
    /// `user=NAME`, `uid=N` or `setuid=NAME`: who the mount runs as (the mount helper becomes them).
    var runAs: String?

    /// Options that take a value, by their name in `-o`.
    static let valued = ["store", "server", "key_file", "conflict", "device", "log_file", "trash_days", "user", "uid", "setuid"]
    /// Flags, by their name in `-o`.
    static let flags = ["allow_other", "ro", "rw", "verbose", "foreground"]
    /// What mount(8), fstab and systemd put in the options for themselves.
    static let generic: Set<String> = ["defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group", "_netdev",
                                       "nofail", "dev", "nodev", "suid", "nosuid", "exec", "noexec", "async", "atime",
                                       "noatime", "relatime", "norelatime", "strictatime", "lazytime", "nolazytime",
                                       "diratime", "nodiratime", "silent", "loud", "default_permissions"]

    /// Parses each `-o` argument (several may be given; later ones win). With `sloppy` (mount's
    /// `-s`), an unknown option is skipped instead of refused.
    static func parse(_ lists: [String], sloppy: Bool = false) throws -> MountOptions {
        var o = MountOptions()
        for list in lists {
            for item in split(list) where !item.isEmpty {
                let (rawName, value) = item.firstIndex(of: "=").map { (String(item[..<$0]), String(item[item.index(after: $0)...])) } ?? (item, nil)
                let name = rawName.replacingOccurrences(of: "-", with: "_")
                if value == nil, generic.contains(name) { continue }
                if name.hasPrefix("x_") || name.hasPrefix("x-") || rawName.hasPrefix("x-") || name == "comment" || name == "_netdev" { continue }
                do { try o.set(name, value) } catch let e as CLIError {
                    if sloppy { continue }
                    throw e
                }
            }
        }
        return o
    }

    /// Splits at commas not escaped by a backslash (`\,` is a comma in a value).
    static func split(_ list: String) -> [String] {
        var out: [String] = [], cur = "", escaped = false
        for c in list {
            if escaped { cur.append(c); escaped = false } else if c == "\\" { escaped = true } else if c == "," { out.append(cur); cur = "" } else { cur.append(c) }
        }
        out.append(cur)
        return out
    }

    private mutating func set(_ name: String, _ value: String?) throws {
        if Self.flags.contains(name) {
            if let value, !["1", "yes", "true"].contains(value) { throw CLIError("mount option \(name) takes no value (got \(name)=\(value))") }
            switch name {
            case "allow_other": allowOther = true
            case "ro": readOnly = true
            case "rw": readOnly = false
            case "verbose": verbose = true
            default: foreground = true
            }
            return
        }
        guard Self.valued.contains(name) else {
            throw CLIError("unknown mount option \"\(name)\"; marfafs takes \((Self.valued + Self.flags).filter { !["user", "uid", "setuid"].contains($0) }.joined(separator: ", ")), user=, uid= and mount(8)'s generic options (marfafs(1), MOUNT OPTIONS)")
        }
        guard let value, !value.isEmpty else { throw CLIError("mount option \(name) needs a value: \(name)=…") }
        switch name {
        case "store": store = value
        case "server": server = value
        case "key_file": keyFile = value
        case "conflict": conflict = value
        case "device": device = value
        case "log_file": logFile = value
        case "trash_days":
            guard let n = Int(value), n >= 0 else { throw CLIError("mount option trash_days needs a number of days (got \(value))") }
            trashDays = n
        default: runAs = value
        }
    }
}
