import Foundation

/// FS-14: names of editors' and tools' temporary files. Such files are real, local-only files:
/// kept in the store, shown only in their directory, never queued for a server.
public enum ScratchNames {
    public static let patterns = [
        "*~", ".*.sw?", ".*.*sw?", "4913", ".#*", "#*#", ".goutputstream-*", "*___jb_tmp___", "*___jb_old___",
        "~$*", ".~lock.*#", "*.part", "*.crdownload", ".fuse_hidden*",
    ]

    public static func matches(_ name: String) -> Bool {
        patterns.contains { fnmatch($0, name, 0) == 0 }
    }
}
