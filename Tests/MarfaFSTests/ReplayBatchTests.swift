import Foundation
@testable import MarfaFS
import PropertyBased
import Testing

/// FS-25: a batch of remote changes replayed on the mount (a remote `rm -rf`: every file, then
/// the folders the last one emptied). Each replay walks the folders a later replay of the batch
/// removes (`FileSystem.throughFoldersRemovedLater`), checked against a reference model: every
/// later folder removal looked at for every earlier replay.
@Suite struct ReplayBatchTests {
    static let folders = ["vault/a", "vault/a/b", "vault/a/b/c", "vault/d", "vault/d/e", "vault/a/bc"]

    static func attr(_ ino: UInt64, _ kind: Node.Kind) -> FileAttr {
        FileAttr(ino: ino, kind: kind, size: 0, mtimeNs: Int64(ino), nlink: 1, timeout: 1)
    }

    static func place(_ path: String) -> Replay.Place {
        Replay.Place(parent: UInt64(path.count), name: String(path.split(separator: "/").last ?? ""), path: path)
    }

    /// A folder's ghost: what it showed (its number from its place in the list).
    static func ghost(_ f: String) -> Replay.Ghost {
        Replay.Ghost(at: place(f), attr: attr(UInt64(folders.firstIndex(of: f) ?? 0) + 100, .directory))
    }

    /// A batch from numbers: a file changed or removed in a folder, or a folder removed with
    /// none, or all, of its parents (those that went with it, deepest first).
    static func batch(_ codes: [Int]) -> [Replay] {
        codes.enumerated().map { n, c in
            let f = folders[c % folders.count]
            switch (c / folders.count) % 4 {
            case 0: return Replay(at: place(f + "/n\(n).md"), op: .touch(modified: true))
            case 1: return Replay(at: place(f + "/n\(n).md"), op: .remove(ghost: attr(UInt64(n), .file)))
            case 2: return Replay(at: place(f), op: .remove(ghost: ghost(f).attr))
            default:
                let parents = folders.filter { f.hasPrefix($0 + "/") }.sorted { $0.count > $1.count }
                return Replay(at: place(f), op: .remove(ghost: ghost(f).attr), gone: parents.map(ghost))
            }
        }
    }

    /// The reference: for each folder removal, every replay before it.
    static func reference(_ replays: [Replay]) -> [Replay] {
        var out = replays
        for (j, r) in replays.enumerated() {
            guard case .remove(let ghost) = r.op, ghost.kind == .directory else { continue }
            let removed = r.gone + [Replay.Ghost(at: r.at, attr: ghost)]
            for i in 0..<j {
                let path = out[i].at.path
                let missing = removed.filter { g in path.hasPrefix(g.at.path + "/") && !out[i].gone.contains { $0.at.path == g.at.path } }
                if !missing.isEmpty { out[i].gone = (out[i].gone + missing).sorted { $0.at.path < $1.at.path } }
            }
        }
        return out
    }

    @Test func FS25_eachReplayWalksTheFoldersALaterOneRemovesAsTheReferenceDoes() async {
        await propertyCheck(count: 3000, input: Gen<Int>.int(in: 0...(Self.folders.count * 4 - 1)).array(of: 0...14)) { codes in
            let b = Self.batch(codes)
            #expect(FileSystem.throughFoldersRemovedLater(b) == Self.reference(b), "\(codes)")
        }
    }

    /// A remote `rm -rf vault/t`: both files' replays walk `t` and `t/deep`, which the last
    /// replays remove; the folders' own replays are left as they were.
    @Test func FS25_aRemoteRmRfReplaysEachFileThroughItsFolders() {
        let t = "vault/t", deep = "vault/t/deep"
        let g = [t: Replay.Ghost(at: Self.place(t), attr: Self.attr(1, .directory)), deep: Replay.Ghost(at: Self.place(deep), attr: Self.attr(2, .directory))]
        let b = [
            Replay(at: Self.place(deep + "/1.md"), op: .remove(ghost: Self.attr(3, .file))),
            Replay(at: Self.place(deep + "/2.md"), op: .remove(ghost: Self.attr(4, .file))),
            Replay(at: Self.place(deep), op: .remove(ghost: g[deep]!.attr), gone: [g[t]!]),
            Replay(at: Self.place(t), op: .remove(ghost: g[t]!.attr)),
        ]
        let out = FileSystem.throughFoldersRemovedLater(b)
        #expect(out[0].gone.map(\.at.path) == [t, deep] && out[1].gone.map(\.at.path) == [t, deep])
        #expect(out[2].gone.map(\.at.path) == [t] && out[3].gone.isEmpty)
    }
}
