import Foundation
import MarfaModel

/// The three views that show items by state.
public enum StateView: String, Sendable, CaseIterable {
    case types, archive, trash
    public var state: ItemState { switch self { case .types: .active; case .archive: .archived; case .trash: .trashed } }
    public static func of(_ s: ItemState) -> StateView { switch s { case .active: .types; case .archived: .archive; case .trashed: .trash } }
}

/// Every node the mount shows. Items are identified by their store rowid, which is also their inode.
public enum Node: Hashable, Sendable {
    case root
    case viewRoot(StateView)             // types/, archive/, trash/
    case tagsRoot, linksRoot, backlinksRoot, byIDRoot, control
    case controlFile(String)
    case typeDir(StateView, String)      // types/<type>
    case item(Int64)                     // the canonical file
    case tagDir(String)                  // tags/<tag>
    case tagEntry(String, Int64)         // tags/<tag>/<name> symlink
    case linkTypeDir(Bool, String)       // links|backlinks/<type>   (Bool: backlinks)
    case linkItemDir(Bool, Int64)        // links|backlinks/<type>/<name>
    case linkEdgeDir(Bool, Int64, String)   // .../<edge_type>
    case linkEntry(Bool, Int64)          // .../<edge_type>/<name> symlink (edge rowid)
    case byIDEntry(Int64)                // by-id/<id> symlink
    case scratch(Int64)                  // a local-only file (FS-14), by scratch row

    public enum Kind: Sendable { case directory, file, symlink }
    public var kind: Kind {
        switch self {
        case .item, .controlFile, .scratch: return .file
        case .tagEntry, .linkEntry, .byIDEntry: return .symlink
        default: return .directory
        }
    }
}

/// Attributes the kernel is told.
public struct FileAttr: Sendable, Equatable {
    public var ino: UInt64
    public var kind: Node.Kind
    public var size: Int64
    public var mtimeNs: Int64
    public var nlink: UInt32
    /// Seconds the kernel may cache this entry and its attributes.
    public var timeout: Double
    /// Seconds the kernel may cache the name, when not `timeout`.
    public var entryTimeout: Double?

    public init(ino: UInt64, kind: Node.Kind, size: Int64, mtimeNs: Int64, nlink: UInt32, timeout: Double) {
        self.ino = ino; self.kind = kind; self.size = size; self.mtimeNs = mtimeNs; self.nlink = nlink; self.timeout = timeout
    }
}

/// A change the kernel must forget: a name in a directory, or a node's attributes and pages.
public enum Invalidation: Hashable, Sendable {
    case entry(parent: UInt64, name: String)
    case inode(UInt64)
    /// A change made without a system call on the mount (a remote edit, a merged save), replayed
    /// on the file at `path` (relative to the mount point) so inotify watchers see it (FS-25):
    /// `modified` raises IN_MODIFY and IN_CLOSE_WRITE, else IN_ATTRIB. The replaying thread's
    /// requests change nothing (`FileSystem.replayThread`).
    case replay(path: String, modified: Bool)
}

public struct DirEntry: Sendable {
    public var name: String
    public var attr: FileAttr
}

/// The control files of §7: reachable by name, never listed.
public enum ControlFile: String, CaseIterable, Sendable {
    case status, pending, conflicts, flush, events
}
