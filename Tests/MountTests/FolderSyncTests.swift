import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// FS-32: empty folders go in and out with sync, through a Marfa server (as folder markers: man 7,
/// SYNC): made, renamed and removed on one mount, shown with their events on the other; a new
/// device's first sync brings them; a marker is never an item of the views.
@Suite(.serialized) struct FolderSyncTests {
    func read(_ file: String) -> String { (try? String(contentsOfFile: file, encoding: .utf8)) ?? "" }

    /// The folders of a mount's vault tree, sorted.
    func folders(_ m: MountHarness) -> [String] {
        m.sh("cd vault/ && find . -mindepth 1 -type d | sort").out.split(separator: "\n").map { String($0.dropFirst(2)) }
    }

    /// The server's folder markers (active ones): their paths, sorted.
    func markers(_ p: MountPair) -> [String] {
        guard case .array(let list)? = p.server.call("GET", "/items?type=marfafs.folder&limit=200", key: p.key).json["data"] else { return ["?"] }
        return list.compactMap { $0.objectValue?["properties"]?.objectValue?["path"]?.stringValue }.sorted()
    }

    /// `inotifywait -r` on a mount's `vault/` (`MountHarness.inotifywait`), each event as `%e %w%f`.
    func watch(_ m: MountHarness, _ name: String) -> (pid_t, String)? {
        m.inotifywait(["-r", "--format", "%e %w%f", m.path("vault/")], name: name).map { ($0.pid, $0.log) }
    }

    @Test func FS32_FS30_anEmptyFolderTravelsBetweenMountsWithItsEvents() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            #expect(MountHarness.eventually { a.syncStatus["stream"] == .string("live") && b.syncStatus["stream"] == .string("live") })
            guard let (watcher, events) = watch(b, "inotify") else { return }
            defer { Shell.killAndReap(watcher) }

            // Made on A, nested and alone: B shows them, and a recursive watcher hears the top one.
            #expect(a.sh("mkdir -p vault/plans/2027/q1 vault/solo").status == 0)
            #expect(MountHarness.eventually { folders(b) == ["plans", "plans/2027", "plans/2027/q1", "solo"] }, "\(folders(b))")
            #expect(MountHarness.eventually { read(events).contains("CREATE,ISDIR \(b.path("vault/"))plans\n") && read(events).contains("CREATE,ISDIR \(b.path("vault/"))solo\n") }, "\(read(events))")
            // Made on B: A shows it.
            #expect(b.sh("mkdir 'vault/from b'").status == 0)
            #expect(MountHarness.eventually { folders(a).contains("from b") }, "\(folders(a))")
            // Renamed and removed on A: gone from B, the new name there, and a watcher that watches
            // every level (started now, so its own scan has seen them all) hears each level go,
            // deepest first.
            guard let (watcher2, deep) = watch(b, "inotify-deep") else { return }
            defer { Shell.killAndReap(watcher2) }
            #expect(a.sh("mv vault/solo vault/solo2 && rmdir vault/plans/2027/q1 vault/plans/2027 vault/plans").status == 0)
            #expect(MountHarness.eventually { folders(b) == ["from b", "solo2"] }, "\(folders(b))")
            #expect(MountHarness.eventually { read(events).contains("DELETE,ISDIR \(b.path("vault/"))plans\n") && read(events).contains("DELETE,ISDIR \(b.path("vault/"))solo\n") }, "\(read(events))")
            let v = b.path("vault/")
            #expect(MountHarness.eventually {
                read(deep).split(separator: "\n").filter { $0.hasPrefix("DELETE,ISDIR \(v)plans") } == ["DELETE,ISDIR \(v)plans/2027/q1", "DELETE,ISDIR \(v)plans/2027", "DELETE,ISDIR \(v)plans"]
            }, "every level, deepest first: \(read(deep))")
            // A folder made empty that gets a note: the note travels as a note; removed on A once
            // emptied, it goes from B.
            #expect(a.sh("mkdir vault/filled").status == 0)
            #expect(MountHarness.eventually { folders(b).contains("filled") })
            #expect(a.sh("printf 'n\\n' > vault/filled/n.md").status == 0)
            #expect(MountHarness.eventually { b.sh("cat vault/filled/n.md").out == "n" })
            #expect(a.sh("rm vault/filled/n.md && rmdir vault/filled").status == 0)
            #expect(MountHarness.eventually { folders(b) == ["from b", "solo2"] }, "\(folders(b))")
            // A folder removed on one mount while the other put a note in it stays there, with it.
            #expect(b.sh("mkdir vault/both").status == 0)
            #expect(MountHarness.eventually { folders(a).contains("both") })
            _ = a.sh("cat .marfafs/flush")
            #expect(b.sh("printf 'kept\\n' > vault/both/k.md").status == 0)
            _ = a.sh("rmdir vault/both")  // ENOTEMPTY if the note came first
            #expect(MountHarness.eventually { b.sh("cat vault/both/k.md").out == "kept" && a.sh("cat vault/both/k.md").out == "kept" },
                    "\(folders(a)) \(folders(b))")

            // `rsync -a` of a tree makes a list's folders before their files: only the folder it
            // leaves empty gets a marker, not those it fills later.
            #expect(a.sh("""
                mkdir -p ../src/empty && for d in 1 2 3 4 5 6; do mkdir -p ../src/d$d; for i in $(seq 1 400); do echo $d $i > ../src/d$d/n$i.md; done; done \
                && rsync -a ../src/ vault/rs/ && cat .marfafs/flush
                """).out.hasPrefix("ok"))
            Thread.sleep(forTimeInterval: 2)
            #expect(markers(p).filter { $0.hasPrefix("rs/") } == ["rs/empty"], "\(markers(p))")
            // (2,400 notes reach B first: on two busy cores, that can take a while.)
            #expect(MountHarness.eventually(timeout: 90) { folders(b).filter { $0.hasPrefix("rs") } == ["rs", "rs/d1", "rs/d2", "rs/d3", "rs/d4", "rs/d5", "rs/d6", "rs/empty"] })

            // Markers are no items: no type directory, nothing queued, only the markers of the
            // empty folders on the server.
            #expect(a.sh("cat .marfafs/flush").out.hasPrefix("ok") && b.sh("cat .marfafs/flush").out.hasPrefix("ok"))
            // (`both` keeps its marker if A's rmdir came after the note.)
            #expect(MountHarness.eventually { markers(p).filter { $0 != "both" } == ["from b", "rs/empty", "solo2"] }, "\(markers(p))")
            for m in [a, b] {
                #expect(!m.sh("ls types").out.contains("marfafs"), "\(m.sh("ls types").out)")
                #expect(m.sh("cat .marfafs/pending").out.isEmpty)
                #expect(m.sql("SELECT count(*) FROM items WHERE type = 'marfafs.folder'") == "0")
            }

            // A new device's first sync brings the empty folders.
            try MountHarness.with(options: ["--server", p.server.base, "--key-file", p.server.root + "/key", "--device", "dev-c"]) { c in
                #expect(MountHarness.eventually { folders(c) == ["both", "from b", "rs", "rs/d1", "rs/d2", "rs/d3", "rs/d4", "rs/d5", "rs/d6", "rs/empty", "solo2"] }, "\(folders(c))")
            }
        }
    }

    /// Offline: a folder made, and a folder emptied and removed, while the server is down; once it
    /// is back the other mount has the one and not the other (the marker goes after the note that
    /// emptied its folder, so the other mount does not keep the folder for the note).
    /// A folder made here with `mkdir` and filled, then renamed or removed on the other mount:
    /// it goes here too once its last file leaves, and no marker brings it back anywhere. A folder
    /// kept empty on purpose (the other mount moved its file out and kept it) stays on both.
    @Test func FS32_aFolderRenamedOrRemovedElsewhereDoesNotComeBackEmpty() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            #expect(a.sh("mkdir -p vault/Sub/deep && printf 'n\\n' > vault/Sub/deep/n.md && printf 'm\\n' > vault/Sub/m.md").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { folders(b) == ["Sub", "Sub/deep"] })
            #expect(b.sh("mv vault/Sub vault/Renamed").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { folders(a) == ["Renamed", "Renamed/deep"] }, "\(folders(a))")
            // Past the time an empty folder waits for its marker, and its round trip.
            usleep(3_500_000)
            #expect(folders(a) == ["Renamed", "Renamed/deep"] && folders(b) == ["Renamed", "Renamed/deep"], "a: \(folders(a)) b: \(folders(b))")
            #expect(markers(p).isEmpty, "\(markers(p))")
            #expect(read(a.path("vault/Renamed/deep/n.md")) == "n\n")
            // Moved out and kept empty there: kept here too.
            #expect(b.sh("mv vault/Renamed/deep/n.md vault/").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { markers(p) == ["Renamed/deep"] && folders(a) == ["Renamed", "Renamed/deep"] && a.sh("test -f vault/n.md").status == 0 },
                    "a: \(folders(a)) markers: \(markers(p))")
            // Removed with rm -r: gone on both, and stays gone.
            #expect(b.sh("rm -r vault/Renamed").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { folders(a).isEmpty }, "\(folders(a))")
            usleep(3_500_000)
            #expect(folders(a).isEmpty && folders(b).isEmpty && markers(p).isEmpty, "a: \(folders(a)) b: \(folders(b)) markers: \(markers(p))")
        }
    }

    @Test func FS32_foldersMadeAndRemovedOfflineConverge() throws {
        try MountPair.with { p in
            let (a, b, s) = (p.a, p.b, p.server)
            #expect(MountHarness.eventually { a.syncStatus["stream"] == .string("live") && b.syncStatus["stream"] == .string("live") })
            #expect(a.sh("mkdir vault/old vault/keep").status == 0)
            #expect(MountHarness.eventually { markers(p) == ["keep", "old"] }, "\(markers(p))")
            #expect(a.sh("printf 'n\\n' > vault/old/n.md && printf 'k\\n' > vault/keep/k.md && cat .marfafs/flush").out.hasPrefix("ok"))
            #expect(MountHarness.eventually { b.sh("cat vault/old/n.md vault/keep/k.md").out == "n\nk" })
            #expect(s.stop() == 0)
            // Many notes queued first, so the note's removal is sent a while after the server is back.
            #expect(a.sh("mkdir vault/bulk && for i in $(seq 1 300); do echo $i > vault/bulk/$i.md; done").status == 0)
            #expect(a.sh("rm vault/old/n.md && rmdir vault/old && mkdir -p 'vault/made offline/inner' && rm vault/keep/k.md").status == 0)
            try s.start()
            #expect(a.sh("cat .marfafs/flush").out.hasPrefix("ok"))
            #expect(MountHarness.eventually { folders(b) == ["bulk", "keep", "made offline", "made offline/inner"] }, "\(folders(b))")
            #expect(MountHarness.eventually { markers(p) == ["keep", "made offline/inner"] }, "\(markers(p))")
            // Nothing comes back to A, and both stay as they are.
            Thread.sleep(forTimeInterval: 2)
            #expect(folders(a) == ["bulk", "keep", "made offline", "made offline/inner"] && folders(b) == folders(a), "\(folders(a)) \(folders(b))")
        }
    }

    /// FS-32, FS-7: a folder that comes from another device beside a file of its name (each made
    /// where the other was not yet seen) does not hide the file: the file shows under FS-7's
    /// suffix while the folder is there, is read, renamed and copied under it, and takes its
    /// name back when the folder goes.
    @Test func FS32_FS7_aFolderFromAnotherDeviceDoesNotHideAFileOfItsName() throws {
        try MountPair.with { p in
            let a = p.a
            #expect(a.sh("printf 'bytes\\n' > vault/plan && cat .marfafs/flush").out.hasPrefix("ok"))
            // The type is registered by the first mount that needs it; then a marker made elsewhere
            // (by the server's API, as another device's would be) names `plan`.
            #expect(a.sh("mkdir vault/seed").status == 0)
            #expect(MountHarness.eventually { markers(p) == ["seed"] })
            let made = p.server.call("POST", "/items", key: p.key, body: #"{"type":"marfafs.folder","properties":{"path":"plan"}}"#)
            guard made.status == 201, let marker = made.item["id"]?.stringValue else { Issue.record("no marker made: \(made.body)"); return }
            // FS-7's suffix: the last 8 hex digits of the file's id.
            let id = a.sh("getfattr --only-values -n user.marfa.id types/core.file/plan").out.filter(\.isHexDigit)
            let alias = "plan [\(id.suffix(8))]"
            #expect(MountHarness.eventually { a.sh("test -d vault/plan && cat 'vault/\(alias)'").out == "bytes" }, "\(a.sh("ls -la vault/").out)")
            #expect(a.sh("ls vault/").out.split(separator: "\n").contains(Substring(alias)))
            #expect(a.sh("rsync -a vault/ ../copy/ && cat '../copy/\(alias)' && test -d ../copy/plan").out == "bytes")
            // The folder goes: the file has its name again.
            #expect(p.server.call("DELETE", "/items/\(marker)", key: p.key).status < 300)
            #expect(MountHarness.eventually { a.sh("cat vault/plan").out == "bytes" }, "\(a.sh("ls -la vault/").out)")
            #expect(a.sh("test -e 'vault/\(alias)'").status != 0)
        }
    }

    /// The same on one mount with no server, the folder given by a note's folder tag, and what
    /// `marfafs export` writes: the tree as the mount shows it (the export stopped at the clash).
    @Test func FS32_FS7_aFileBesideAFolderOfItsNameIsExportedUnderItsSuffix() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        #expect(h.sh("printf 'bytes\\n' > vault/plan && printf 'n\\n' > vault/n.md && setfattr -n user.marfa.tags -v folder:plan vault/n.md").status == 0)
        let id = h.sh("getfattr --only-values -n user.marfa.id types/core.file/plan").out.filter(\.isHexDigit)
        let alias = "plan [\(id.suffix(8))]"
        #expect(h.sh("ls vault/").out == "plan\n\(alias)", "\(h.sh("ls -la vault/").out)")
        #expect(h.sh("cat 'vault/\(alias)' vault/plan/n.md").out == "bytes\nn")
        h.unmount()
        let out = h.root + "/exported"
        let exported = Shell.run([MountHarness.binary, "export", out, "--store", h.store])
        #expect(exported.status == 0, "\(exported.stderr)")
        #expect(Shell.run(["/bin/bash", "-c", "cd '\(out)' && find . -type f | sort && cat '\(alias)'"]).out == "./\(alias)\n./plan/n.md\nbytes")
    }

    /// A key that may not register the markers' type (a member's, on a server that has none yet):
    /// the empty folder stays on its device, the events say why, and everything else syncs.
    @Test func FS32_aMemberKeyKeepsEmptyFoldersHereAndSaysSo() throws {
        let s = try ServerHarness()
        let (admin, _) = try s.mountKey()
        let member = try #require(s.call("POST", "/keys", key: admin, body: #"{"label":"phone"}"#).json["key"]?.stringValue)
        let file = s.root + "/member-key"
        try (member + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o600)
        try MountHarness.with(options: ["--server", s.base, "--key-file", file, "--device", "phone"]) { m in
            #expect(MountHarness.eventually { m.syncStatus["stream"] == .string("live") })
            #expect(m.sh("mkdir vault/alone && printf 'n\\n' > vault/n.md").status == 0)
            #expect(MountHarness.eventually { m.sh("grep -c '\"folder.refused\"' .marfafs/events").out == "1" }, "\(m.sh("cat .marfafs/events").out)")
            #expect(m.sh("cat .marfafs/flush").out.hasPrefix("ok"))
            #expect(s.call("GET", "/types/marfafs.folder", key: admin).status == 404)
            if case .array(let all)? = s.call("GET", "/items?limit=200", key: admin).json["data"] {
                #expect(all.compactMap { $0.objectValue?["type"]?.stringValue } == ["core.note"], "the note, no marker: \(all)")
            } else { Issue.record("no listing") }
            #expect(m.sh("test -d vault/alone").status == 0, "the folder stays here")
        }
    }
}
