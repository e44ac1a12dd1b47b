import Foundation
import MarfaLayout
import MarfaStore

/// Node ⇄ inode for everything but items (whose inode is their rowid), allocated on first sight.
/// A directory keeps its number for its life (FS-31): a renamed directory takes its number, and
/// its sub-directories', along (`move`); the vault tree's folders keep theirs across mounts (the
/// store's `tree_dirs`, written by `FileSystem.saveTreeDirs`).
struct InodeTable {
    static let dynamicBase: UInt64 = 1 << 40
    private var byNode: [Node: UInt64] = [:]
    private var byIno: [UInt64: Node] = [:]
    private var next = dynamicBase
    /// Folders of the tree numbered since the store last recorded them.
    private(set) var unsaved: [String: UInt64] = [:]
    /// Directories made by name (folders, tags) that the kernel was last told exist under their
    /// name — a lookup, a listing or a mkdir answered — and has not been told otherwise since.
    var shown: Set<Node> = []

    init(folders: [(path: String, ino: UInt64)] = []) {
        for (path, i) in folders {
            byNode[.treeDir(path)] = i; byIno[i] = .treeDir(path)
            next = max(next, i + 1)
        }
    }

    mutating func ino(_ n: Node) -> UInt64 {
        if let i = byNode[n] { return i }
        let i = next; next += 1
        byNode[n] = i; byIno[i] = n
        if case .treeDir(let f) = n { unsaved[f] = i }
        return i
    }

    func existing(_ n: Node) -> UInt64? { byNode[n] }
    func node(_ i: UInt64) -> Node? { byIno[i] }

    var hasUnsaved: Bool { !unsaved.isEmpty }

    mutating func takeUnsaved() -> [String: UInt64] {
        defer { unsaved = [:] }
        return unsaved
    }

    /// Renamed directories: every node `rename` maps to a new node keeps its number under the new
    /// node; what the new nodes were numbered before (a directory renamed over) is forgotten.
    mutating func move(_ rename: (Node) -> Node?) {
        let moves = byNode.compactMap { n, i in rename(n).map { (from: n, to: $0, ino: i) } }
        let moving = Set(moves.map(\.from))
        for m in moves where !moving.contains(m.to) { retire(m.to) }
        for m in moves { byNode[m.from] = nil }
        for m in moves {
            byNode[m.to] = m.ino; byIno[m.ino] = m.to
            if shown.remove(m.from) != nil { shown.insert(m.to) }
            if case .treeDir(let f) = m.from, let u = unsaved.removeValue(forKey: f), case .treeDir(let t) = m.to { unsaved[t] = u }
        }
    }

    /// A directory that is gone: its number is not given to the next directory of that name.
    mutating func retire(_ n: Node) {
        guard let i = byNode.removeValue(forKey: n) else { return }
        byIno[i] = nil
        shown.remove(n)
        if case .treeDir(let f) = n { unsaved[f] = nil }
    }
}

/// Directory identity (FS-31): what the kernel is told to forget never unhashes a directory that
/// is still there under the same name, so a process's working directory (a shell, an editor, git)
/// survives changes around it; renames move numbers, removals retire them.
extension FileSystem {
    /// The directory a name in `p` is when it is one made by name (a folder of the tree, a tag).
    static func dirNamed(_ name: String, in p: Node) -> Node? {
        switch p {
        case .treeDir(let f): return .treeDir(VaultIndex.join(f, name))
        case .tagDir(let t): return .tagDir(tagPath(t, name))
        case .tagsRoot: return .tagDir(name)
        default: return nil
        }
    }

    /// Whether the kernel must forget `name` in `p` after a change. Not when the name is still the
    /// directory the kernel was shown there: its number is fixed, and forgetting the name would
    /// unhash the directory of any process in it (`getcwd` then fails: git, `pwd`).
    func mustForget(_ name: String, in p: Node) -> Bool {
        guard let d = Self.dirNamed(name, in: p) else { return true }
        if inodes.shown.contains(d), inodes.existing(d) != nil, (try? childNode(p, name)) == d { return false }
        inodes.shown.remove(d)
        return true
    }

    /// The kernel was told that `n` exists under its name.
    func noteShown(_ n: Node) {
        switch n {
        case .treeDir, .tagDir: inodes.shown.insert(n)
        default: break
        }
    }

    /// The kernel was told that `name` in `p` does not exist (it may keep that answer).
    func noteMissing(_ name: String, in p: Node) {
        if let d = Self.dirNamed(name, in: p) { inodes.shown.remove(d) }
    }

    /// Records the folders numbered since the last call (with the lock held). A failure (a full
    /// disk) leaves the numbers for this mount's life and tries again at the next call.
    func saveTreeDirs() {
        let numbers = inodes.takeUnsaved()
        if numbers.isEmpty { return }
        do { try store.saveTreeDirInodes(numbers) } catch {
            log.warning("folder inode numbers not recorded", metadata: ["error": "\(error)"])
        }
    }

    /// A tag renamed, and a folder with it when both are `folder:` tags: the numbers of its
    /// directories and their sub-directories move to the new paths, with the times set on them.
    func moveDirs(tag from: String, to: String) {
        let fp = VaultText.folderPrefix
        let folders = from.hasPrefix(fp) && to.hasPrefix(fp) ? (String(from.dropFirst(fp.count)), String(to.dropFirst(fp.count))) : nil
        func under(_ path: String, _ top: String, _ new: String) -> String? {
            path == top || path.hasPrefix(top + "/") ? new + path.dropFirst(top.count) : nil
        }
        inodes.move { n in
            switch n {
            case .tagDir(let t): return under(t, from, to).map { .tagDir($0) }
            case .treeDir(let f): return folders.flatMap { under(f, $0.0, $0.1) }.map { .treeDir($0) }
            default: return nil
            }
        }
        guard let (ff, tf) = folders else { return }
        // What is kept by folder path follows (what was at the new paths goes).
        func follow<V>(_ d: inout [String: V]) {
            var kept = d.filter { under($0.key, tf, tf) == nil }
            for (p, v) in d { if let m = under(p, ff, tf) { kept[p] = nil; kept[m] = v } }
            d = kept
        }
        follow(&catalog.dirModes)
        follow(&catalog.dirOwners)
        for (key, ns) in catalog.dirTimes {
            guard let path = key.hasPrefix("vault/") ? String(key.dropFirst(6)) : nil, let moved = under(path, ff, tf) else { continue }
            catalog.dirTimes[key] = nil
            catalog.dirTimes["vault/" + moved] = ns
        }
        do { try store.moveTreeDirs(from: ff, to: tf) } catch {
            log.warning("folder inode numbers not moved", metadata: ["error": "\(error)"])
        }
    }

    /// A folder removed (by `rmdir`, or elsewhere): its number retires with it, recorded beside the
    /// store (`Store.dropTreeDir`).
    func retireDir(_ n: Node) {
        inodes.retire(n)
        guard case .treeDir(let f) = n else { return }
        catalog.dirTimes["vault/" + f] = nil
        do { try store.dropTreeDir(f) } catch {
            log.warning("a removed folder's inode number was not dropped", metadata: ["error": "\(error)"])
        }
        // Written by the settler's next pass if nothing writes first (a remote's removal too).
        settler.wake()
    }
}
