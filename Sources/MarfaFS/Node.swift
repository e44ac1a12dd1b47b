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
    case vaultLink                       // vault -> .marfafs/vault (FS-27)
    case historyLink                     // history -> .marfafs/history (FS-33)
    case historyRoot                     // .marfafs/history
    case historyType(String)             // .marfafs/history/<type>
    case historyItem(Int64)              // .marfafs/history/<type>/<name>
    case historyVersion(Int64, Int64)    // .../<time>.<ext>: an earlier version (item rowid, version seq)
    case treeDir(String)                 // .marfafs/vault/<folder…> ("" for the top)
    case previewDir(String)              // .marfafs/previews/<folder…> ("" for the top) (FS-34)
    case previewFile(Int64)              // .../<name>.<ext>: a MyLifeDB server's preview of an item
    case controlFile(String)
    case typeDir(StateView, String)      // types/<type>
    case item(Int64)                     // the canonical file
    case tagDir(String)                  // tags/<tag path…>: a tag, or a level of nested tags
    case tagEntry(String, Int64)         // tags/<tag>/<name> symlink
    case linkTypeDir(LinkDirection, String)       // links|backlinks/<type>
    case linkItemDir(LinkDirection, Int64)        // links|backlinks/<type>/<name>
    case linkEdgeDir(LinkDirection, Int64, String)   // .../<edge_type>
    case linkEntry(LinkDirection, Int64)          // .../<edge_type>/<name> symlink (edge rowid)
    case byIDEntry(Int64)                // by-id/<id> symlink
    case scratch(Int64)                  // a local-only file (FS-14), by scratch row
    case detached(UInt64)                // a file replaced under its name, held open (FS-31), by inode

    /// The folder of the vault's tree a node is, if it is one.
    var treeFolder: String? { if case .treeDir(let f) = self { return f }; return nil }

    public enum Kind: Sendable { case directory, file, symlink }
    public var kind: Kind {
        switch self {
        case .item, .controlFile, .scratch, .detached, .historyVersion, .previewFile: return .file
        case .tagEntry, .linkEntry, .byIDEntry, .vaultLink, .historyLink: return .symlink
        default: return .directory
        }
    }
}

/// Attributes the kernel is told.
public struct FileAttr: Sendable, Hashable {
    public var ino: UInt64
    public var kind: Node.Kind
    public var size: Int64
    public var mtimeNs: Int64
    public var nlink: UInt32
    /// Seconds the kernel may cache this entry and its attributes.
    public var timeout: Double
    /// Seconds the kernel may cache the name, when not `timeout`.
    public var entryTimeout: Double?
    /// Permission bits (FS-31); 0: the kind's default (0644 files, 0755 directories, 0777 links);
    /// the regular-file type bit alone: none (`chmod 000`).
    public var mode: UInt16 = 0
    /// Last access and last change of the node (FS-31); nil: its mtime.
    public var atimeNs: Int64?
    public var ctimeNs: Int64?
    /// A FIFO, socket or device node (local-only, FS-32): its type bits (`S_IFIFO`, …) and device
    /// number; 0 for every other node (`kind` then says what it is; for these it is `.file`).
    public var special: UInt32 = 0
    public var rdev: UInt64 = 0
    /// Owner and group (FS-31); nil: the mount's user and group.
    public var uid: UInt32?
    public var gid: UInt32?

    /// The permission bits the kernel is told.
    public var permissions: UInt16 {
        if mode != 0 { return mode & 0o7777 }
        switch kind { case .directory: return 0o755; case .file: return 0o644; case .symlink: return 0o777 }
    }

    public init(ino: UInt64, kind: Node.Kind, size: Int64, mtimeNs: Int64, nlink: UInt32, timeout: Double) {
        self.ino = ino; self.kind = kind; self.size = size; self.mtimeNs = mtimeNs; self.nlink = nlink; self.timeout = timeout
    }
}

/// A change the kernel must forget: a name in a directory, or a node's attributes and pages; or a
/// change to replay on the mount so inotify watchers see it.
public enum Invalidation: Hashable, Sendable {
    case entry(parent: UInt64, name: String)
    case inode(UInt64)
    /// A symlink whose target changed (the item it names was renamed, archived, trashed, or its
    /// name moved aside for another's): the kernel drops the target it cached.
    case target(UInt64)
    case replay(Replay)
}

/// A change made without a system call on the mount (a remote change, a merged save), replayed on
/// the mount point as the system call that would have made it, so the kernel raises the inotify
/// events the same change made locally raises (FS-25). The replaying thread's requests are
/// answered from the state before the change where they must be (a name to create is not there
/// yet, a name to remove still is) and change nothing (`FileSystem.replayThread`).
public struct Replay: Hashable, Sendable {
    /// A name in a directory: the directory's inode, and the path from the mount point.
    public struct Place: Hashable, Sendable {
        public var parent: UInt64
        public var name: String
        public var path: String
        func names(_ p: UInt64, _ n: String) -> Bool { parent == p && name == n }
    }

    public enum Op: Hashable, Sendable {
        /// The file changed: `modified` raises IN_MODIFY and IN_CLOSE_WRITE, else IN_ATTRIB.
        case touch(modified: Bool)
        /// A new name (IN_CREATE): a file, a directory or a symlink.
        case create(Node.Kind)
        /// A name gone (IN_DELETE); `ghost` is what the name showed.
        case remove(ghost: FileAttr)
        /// A name moved (IN_MOVED_FROM, IN_MOVED_TO); `ghost` is what the old name showed.
        case rename(to: Place, ghost: FileAttr)
    }

    /// A name as it was before the change: where, and what it showed.
    public struct Ghost: Hashable, Sendable {
        public var at: Place
        public var attr: FileAttr
    }

    public var at: Place
    public var op: Op
    /// Directories on the way to `at` that the change removed (a tag directory whose last entry
    /// went): still there for the replay.
    public var gone: [Ghost] = []
    /// The directories of the tree or of `tags/` on the way to `at` (and to a rename's
    /// destination) as they showed when the change was applied. The replay thread's lookup
    /// answers one of them only once it is no longer there: a later change removed it before this
    /// replay was made (the catalog runs ahead of the notifier: a remote `rm -rf` comes in several
    /// batches, and the last one takes the folders away).
    public var walk: [Ghost] = []
}

public struct DirEntry: Sendable {
    public var name: String
    public var attr: FileAttr
}

/// The control files of §7: reachable by name, never listed.
public enum ControlFile: String, CaseIterable, Sendable {
    case status, pending, conflicts, flush, events, unresolved
    /// `.marfafs/pending.json`: the queue for scripts (`marfafs pending --json`).
    case pendingJSON = "pending.json"
    /// `.marfafs/transfers`: blob uploads and downloads under way.
    case transfers
    /// `.marfafs/requests`: the kernel's requests this mount answered, by operation.
    case requests
}

/// Which way an edge directory looks: `links/` (from an item to the targets of its edges) or
/// `backlinks/` (to an item from the sources of the edges that name it).
public enum LinkDirection: Hashable, Sendable {
    case links, backlinks

    /// The direction of the root directory `links/` or `backlinks/`.
    init(root: Node) { self = root == .backlinksRoot ? .backlinks : .links }

    /// The item at the far end of an edge, seen this way: a link's target, a backlink's source.
    func far(of edge: Edge) -> String { self == .links ? edge.targetID : edge.sourceID }
}
