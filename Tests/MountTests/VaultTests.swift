import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// A Markdown vault, alive in the mount (FS-26, FS-27): links and tags come from the notes' text
/// and show in `links/`, `backlinks/` and `tags/`; the vault's folders are real directories in
/// `vault/`, which `rsync -a` fills and empties and `marfafs export` writes back.
@Suite struct VaultTests {
    /// A vault with every form of link, tag styles, code that holds neither, names used twice.
    static let vaultScript = #"""
    mkdir -p Projects/Atlas Old Daily Attachments
    cat > Home.md <<'EOF'
    ---
    tags: [home, "#index"]
    ---
    # Home
    Plans: [[Atlas Plan]] and [[Projects/Atlas/Atlas Plan|the real plan]], also [[Atlas Plan#Goals]].
    Relative: [the plan](Projects/Atlas/Atlas%20Plan.md). Web: [site](https://example.com/x.md).
    ![[diagram.png]] and [[Missing Note]] and [[Daily/Sibling#^block|a block]].
    Inline `[[not-a-link]] #not-a-tag` and:
    ```
    [[not-a-link-either]] #nor-this
    ```
    EOF
    cat > "Projects/Atlas/Atlas Plan.md" <<'EOF'
    Back to [[Home]]; see ![img](../../Attachments/diagram.png). #projects/atlas
    EOF
    printf 'An older plan.\n' > "Old/Atlas Plan.md"
    printf 'Up: [[Home]]. Next to me: [[./Sibling]].\n' > Daily/Home.md
    printf -- '---\ntags:\n  - daily\n---\nA sibling. #Daily\n' > Daily/Sibling.md
    head -c 3000 /dev/urandom > Attachments/diagram.png
    printf 'body { color: red }\n' > Attachments/style.css
    """#

    /// The inode a path (a file, or what a symlink names) has.
    func ino(_ m: MountHarness, _ path: String) -> String { m.sh("stat -L -c %i '\(path)'").out }

    /// The name a file of the vault has in `types/<type>/` (and so in `links/` and `backlinks/`).
    func typesPath(_ m: MountHarness, _ vaultPath: String) -> String {
        let id = m.sh("getfattr --only-values -n user.marfa.id 'vault/\(vaultPath)'").out
        return String(m.sh("readlink by-id/\(id)").out.dropFirst(3))   // ../types/T/N → types/T/N
    }

    /// The vault paths of the entries of a `links/` or `backlinks/` directory, found by inode.
    func far(_ m: MountHarness, _ view: String, _ vaultPath: String, _ edgeType: String) -> Set<String> {
        let dir = view + "/" + typesPath(m, vaultPath).dropFirst("types/".count) + "/" + edgeType
        let all = m.sh("cd vault && find . -type f | sed 's|^./||'").out.split(separator: "\n").map(String.init)
        let byIno = Dictionary(all.map { (ino(m, "vault/" + $0), $0) }, uniquingKeysWith: { a, _ in a })
        let entries = m.sh("ls '\(dir)'").out.split(separator: "\n").map(String.init)
        return Set(entries.map { byIno[ino(m, dir + "/" + $0)] ?? "?\($0)" })
    }

    @Test func FS26_linksAndBacklinksResolveAsObsidianDoes() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        _ = try h.importFolder(Self.vaultScript)
        try h.mount()
        // The first look at backlinks/ on a fresh mount shows the notes' links.
        #expect(h.sh("ls backlinks/core.file.image/diagram.png/embeds | wc -l").out == "2")
        // A bare name: the shortest path wins (Old/ over Projects/Atlas/); a path picks its file;
        // a Markdown link is relative to the note; a heading or block changes nothing.
        #expect(far(h, "links", "Home.md", "references") == ["Old/Atlas Plan.md", "Projects/Atlas/Atlas Plan.md", "Daily/Sibling.md"])
        #expect(far(h, "links", "Home.md", "embeds") == ["Attachments/diagram.png"])
        #expect(far(h, "links", "Projects/Atlas/Atlas Plan.md", "references") == ["Home.md"], "[[Home]] is the top-level one")
        #expect(far(h, "links", "Projects/Atlas/Atlas Plan.md", "embeds") == ["Attachments/diagram.png"])
        #expect(far(h, "links", "Daily/Home.md", "references") == ["Home.md", "Daily/Sibling.md"])
        #expect(far(h, "backlinks", "Attachments/diagram.png", "embeds") == ["Home.md", "Projects/Atlas/Atlas Plan.md"])
        #expect(far(h, "backlinks", "Home.md", "references") == ["Projects/Atlas/Atlas Plan.md", "Daily/Home.md"])
        // What resolves to nothing is listed; code and URLs are not links.
        #expect(h.sh("cat .marfafs/unresolved").out == "Home.md\tMissing Note")
        // Edges from the text are the text's: removing one is refused, editing the text moves it.
        let entry = "links/\(typesPath(h, "Home.md").dropFirst(6))/embeds/diagram.png"
        #expect(h.sh("rm '\(entry)'").status != 0)
        #expect(h.sh("test -L '\(entry)'").status == 0)
        #expect(h.sh("printf 'Now [[Sibling]] too.\\n' >> 'vault/Old/Atlas Plan.md'").status == 0)
        #expect(MountHarness.eventually { far(h, "backlinks", "Daily/Sibling.md", "references") == ["Home.md", "Daily/Home.md", "Old/Atlas Plan.md"] })
        // A note made later resolves the links that named it.
        #expect(h.sh("printf 'here\\n' > 'vault/Missing Note.md'").status == 0)
        #expect(MountHarness.eventually { h.sh("cat .marfafs/unresolved").out.isEmpty })
        #expect(far(h, "backlinks", "Missing Note.md", "references") == ["Home.md"])
        // Renamed away, the name resolves to nothing again.
        #expect(h.sh("mv 'vault/Missing Note.md' 'vault/Found.md'").status == 0)
        #expect(h.sh("cat .marfafs/unresolved").out == "Home.md\tMissing Note")
    }

    /// Obsidian's order among several files a bare link could name (FS-32): the exact vault path,
    /// then the linking note's own folder (not a parent), then the shortest path string (not the
    /// fewest folders); a note's link to itself is an edge.
    @Test func FS32_linksResolveExactPathThenOwnFolderThenShortestPathString() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        _ = try h.importFolder(#"""
        mkdir -p clientes/centro Stack b a/b zzzz/deep d
        printf 'hub\n' > clientes/centro/index.md
        printf 'stack\n' > Stack/index.md
        printf 'See [[index|Centro HUB]].\n' > clientes/centro/visit.md
        for f in b/Note.md a/b/Note.md zzzz/Note.md a/b/Tie.md zzzz/Tie.md Home.md d/Home.md; do printf '%s\n' "$f" > "$f"; done
        printf '[[Note]]\n' > zzzz/deep/src.md
        printf '[[b/Note]] and [[Tie]]\n' > top.md
        printf '[[Home]]\n' > d/x.md
        printf 'Me: [[self]].\n' > self.md
        """#)
        try h.mount()
        #expect(far(h, "links", "clientes/centro/visit.md", "references") == ["clientes/centro/index.md"], "the note's own folder")
        #expect(far(h, "links", "zzzz/deep/src.md", "references") == ["b/Note.md"], "a parent folder counts for nothing; the shortest path")
        #expect(far(h, "links", "top.md", "references") == ["b/Note.md", "a/b/Tie.md"], "the exact path; the shortest string, not the fewest folders")
        #expect(far(h, "links", "d/x.md", "references") == ["Home.md"], "the exact path over the own folder")
        #expect(far(h, "links", "self.md", "references") == ["self.md"])
        #expect(far(h, "backlinks", "self.md", "references") == ["self.md"])
        // A new file beside the linking note takes the link from the shorter path.
        #expect(h.sh("printf 'near\\n' > vault/zzzz/deep/Note.md").status == 0)
        #expect(MountHarness.eventually { far(h, "links", "zzzz/deep/src.md", "references") == ["zzzz/deep/Note.md"] })
    }

    /// A note whose front matter does not parse (an unquoted colon, an unclosed list) still gives
    /// its body's links and inline tags and the keys that parse alone, imported or written
    /// through the mount; status names it by path (FS-32, FS-10).
    @Test func FS32_brokenFrontMatterStillGivesItsLinksAndTags() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        _ = try h.importFolder(#"""
        mkdir -p clientes
        printf 'target\n' > Target.md
        printf 'other\n' > Other.md
        printf -- '---\ntitle: Centro: HUB\ntags: [crm]\n---\nGo to [[Target]]. #inline\n' > clientes/hub.md
        """#)
        try h.mount()
        #expect(h.sh("getfattr --only-values -n user.marfa.sync vault/clientes/hub.md").out == "invalid")
        #expect(far(h, "links", "clientes/hub.md", "references") == ["Target.md"])
        #expect(h.sh("ls tags/crm tags/inline").out == "tags/crm:\nhub.md\n\ntags/inline:\nhub.md")
        let status = h.sh("cat .marfafs/status").out
        #expect(status.contains("\"path\":\"vault/clientes/hub.md\""), "\(status)")
        #expect(h.sh("\(MountHarness.binary) status .").out.contains("vault/clientes/hub.md: front matter is not valid YAML"))
        // Written through the mount, still broken: the links and tags follow the new text.
        #expect(h.sh("printf -- '---\\ntags: [unclosed\\n---\\nNow [[Other]]. #second\\n' > vault/clientes/hub.md").status == 0)
        #expect(MountHarness.eventually { far(h, "links", "clientes/hub.md", "references") == ["Other.md"] })
        #expect(h.sh("ls tags/second && ls tags/inline 2>/dev/null | wc -l").out == "hub.md\n0")
        #expect(h.sh("getfattr --only-values -n user.marfa.sync vault/clientes/hub.md").out == "invalid")
        #expect(!h.sql("SELECT payload FROM mutations").contains("unclosed"), "invalid bytes are not queued")
        // Mended, it is a note like any other.
        #expect(h.sh("printf -- '---\\ntags: [crm]\\n---\\nNow [[Other]]. #second\\n' > vault/clientes/hub.md").status == 0)
        #expect(MountHarness.eventually { h.sh("getfattr --only-values -n user.marfa.sync vault/clientes/hub.md").out == "pending" })
        #expect(h.sh("ls tags/crm tags/second").out == "tags/crm:\nhub.md\n\ntags/second:\nhub.md")
        #expect(!h.sh("cat .marfafs/status").out.contains("hub.md"))
    }

    @Test func FS26_tagsComeFromTheTextAndGoBackIntoIt() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        _ = try h.importFolder(Self.vaultScript)
        try h.mount()
        // Front matter (flow list, `#` dropped, block list), inline, nested; not from code.
        #expect(h.sh("ls tags").out.split(separator: "\n") == ["daily", "folder:Attachments", "folder:Daily", "folder:Old", "folder:Projects", "home", "index", "projects"])
        #expect(h.sh("ls tags/projects").out == "atlas")
        #expect(h.sh("ls tags/projects/atlas").out == "Atlas Plan.md")
        #expect(h.sh("readlink 'tags/projects/atlas/Atlas Plan.md'").out.hasPrefix("../../../types/core.note/"))
        #expect(h.sh("cat 'tags/projects/atlas/Atlas Plan.md'").out.hasPrefix("Back to [[Home]]"))
        #expect(h.sh("ls tags/folder:Projects/Atlas").out == "Atlas Plan.md")
        #expect(h.sh("ls tags/daily").out == "Sibling.md", "#Daily and daily are one tag")
        // Tagging writes the tag into the front matter in its style; untagging takes it out.
        let home = typesPath(h, "Home.md")
        #expect(h.sh("mkdir tags/later && ln -s '../../\(home)' tags/later/").status == 0)
        #expect(h.sh("head -3 vault/Home.md").out == "---\ntags: [home, \"#index\", later]\n---")
        #expect(h.sh("rm tags/index/*").status == 0)
        #expect(h.sh("head -3 vault/Home.md").out == "---\ntags: [home, later]\n---")
        // A note with no front matter gets one; nested tags are typed as paths.
        #expect(h.sh("mkdir -p tags/area/health && ln -s '../../../\(typesPath(h, "Old/Atlas Plan.md"))' tags/area/health/").status == 0)
        #expect(h.sh("cat 'vault/Old/Atlas Plan.md'").out == "---\ntags:\n  - area/health\n---\nAn older plan.")
        // An inline tag removed loses its `#`, nothing else.
        #expect(h.sh("rm 'tags/projects/atlas/Atlas Plan.md'").status == 0)
        #expect(h.sh("cat 'vault/Projects/Atlas/Atlas Plan.md'").out == "Back to [[Home]]; see ![img](../../Attachments/diagram.png). projects/atlas")
        #expect(h.sh("ls tags").out.split(separator: "\n").contains("projects") == false)
        // A tag renamed with its nested tags follows into the text; `user.marfa.tags` agrees.
        #expect(h.sh("mv tags/area tags/life").status == 0)
        #expect(h.sh("ls tags/life/health").out == "Atlas Plan.md")
        #expect(h.sh("sed -n 3p 'vault/Old/Atlas Plan.md'").out == "- life/health")
        #expect(h.sh("getfattr --only-values -n user.marfa.tags 'vault/Old/Atlas Plan.md'").out == "folder:Old,life/health")
        // Written in the text by an editor: the tags follow the text.
        #expect(h.sh("printf 'Now #fresh only.\\n' > vault/Daily/Sibling.md").status == 0)
        #expect(MountHarness.eventually { h.sh("getfattr --only-values -n user.marfa.tags vault/Daily/Sibling.md").out == "folder:Daily,fresh" })
        #expect(h.sh("test -e tags/daily").status != 0, "the tag the old text gave is gone")
        #expect(h.sh("ls tags/fresh").out == "Sibling.md")
    }

    /// A tag put on or taken off a note through `tags/` rewrites the note's front matter; a read of
    /// the note right after the call returns (or after `setfattr` of `user.marfa.tags`) sees the new text even when the daemon's invalidation
    /// thread is far behind (here held back half a second before each batch): the note's cached
    /// pages are dropped before the call returns (FS-26, FS-25).
    @Test func FS26_aNoteReadRightAfterItsTagChangesShowsTheNewText() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        h.environment = ["MARFAFS_NOTIFY_DELAY_MS": "500"]
        _ = try h.importFolder(Self.vaultScript)
        try h.mount()
        let home = typesPath(h, "Home.md")
        // Each step reads the note whole first (its pages cached), changes its tags, reads again at once.
        func step(_ change: String) -> String {
            h.sh("cat vault/Home.md >/dev/null && \(change) && head -3 vault/Home.md && cat '\(home)' | sed -n 2p").out
        }
        #expect(step("mkdir tags/later && ln -s '../../\(home)' tags/later/")
                == "---\ntags: [home, \"#index\", later]\n---\ntags: [home, \"#index\", later]")
        #expect(step("rm tags/index/Home.md") == "---\ntags: [home, later]\n---\ntags: [home, later]")
        #expect(step("mv tags/later tags/soon") == "---\ntags: [home, soon]\n---\ntags: [home, soon]")
        #expect(step("setfattr -n user.marfa.tags -v home,soon,more vault/Home.md") == "---\ntags: [home, soon, more]\n---\ntags: [home, soon, more]")
        #expect(step("setfattr -x user.marfa.prop.tags vault/Home.md") == "# Home\nPlans: [[Atlas Plan]] and [[Projects/Atlas/Atlas Plan|the real plan]], also [[Atlas Plan#Goals]].\nRelative: [the plan](Projects/Atlas/Atlas%20Plan.md). Web: [site](https://example.com/x.md).\nPlans: [[Atlas Plan]] and [[Projects/Atlas/Atlas Plan|the real plan]], also [[Atlas Plan#Goals]].")
        #expect(h.sh("getfattr --only-values -n user.marfa.tags vault/Home.md").out == "", "the tags the key gave went with it")
        // The tag's folder goes with its last note; the kernel may hold it until the (delayed)
        // notifier thread has replayed its making and its removal (FS-25).
        #expect(MountHarness.eventually { h.sh("test -e tags/more").status != 0 })
        // Tags set again: a new front matter, in block style; the tags it lost went with it.
        #expect(step("setfattr -n user.marfa.tags -v home,soon vault/Home.md") == "---\ntags:\n  - home\ntags:")
        #expect(h.sh("getfattr --only-values -n user.marfa.tags vault/Home.md").out == "home,soon")
        // The last tag gone, the front matter goes.
        #expect(h.sh("cat vault/Home.md >/dev/null && rm tags/soon/Home.md tags/home/Home.md && head -1 vault/Home.md").out == "# Home")
        // Several notes at once: a tag directory renamed rewrites each.
        #expect(h.sh("mkdir tags/both && ln -s '../../\(home)' tags/both/ && ln -s '../../\(typesPath(h, "Old/Atlas Plan.md"))' tags/both/").status == 0)
        #expect(h.sh("cat vault/Home.md 'vault/Old/Atlas Plan.md' >/dev/null && mv tags/both tags/each && grep -c each vault/Home.md 'vault/Old/Atlas Plan.md'").out
                == "vault/Home.md:1\nvault/Old/Atlas Plan.md:1")
    }

    /// A vault comes whole (FS-32): import keeps hidden files and folders, empty folders and
    /// every file's and folder's time, and leaves a git repository out, saying so; the mount
    /// shows exactly the original (`rsync -a` from it finds nothing to do) and so does export.
    @Test func FS32_importMountAndExportKeepHiddenFilesEmptyFoldersAndTimes() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        let src = h.root + "/src", out = h.root + "/out"
        let made = Shell.run(["/bin/bash", "-c", """
            set -e; mkdir -p '\(src)' && cd '\(src)'
            mkdir -p .obsidian/plugins/x notes/empty deep/a/b
            printf '{"theme":"dark"}' > .obsidian/app.json && printf '{}' > .obsidian/plugins/x/data.json
            printf '*.tmp\\n' > .gitignore && printf 'x' > .DS_Store && printf '# A\\n[[B]]\\n' > notes/A.md && printf 'B\\n' > B.md
            git init -q && git add -A && git -c user.name=t -c user.email=t@example.com commit -qm first
            touch -d '2020-01-02 03:04:05.123456789' notes/A.md B.md .gitignore .DS_Store .obsidian/app.json .obsidian/plugins/x/data.json
            touch -d '2019-05-05 01:02:03' notes/empty deep/a/b deep/a deep notes .obsidian/plugins/x .obsidian/plugins .obsidian .
            """])
        #expect(made.status == 0, "\(made.stderr)")
        let imported = Shell.run([MountHarness.binary, "import", src, "--store", h.store])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(imported.stdout.contains("6 new") && imported.stdout.contains("2 empty folders"), "\(imported.stdout)")
        #expect(imported.stdout.contains("skipped .git/"), "the summary says what was left out: \(imported.stdout)")
        #expect(h.sql("SELECT count(*) FROM items") == "6", "nothing of .git is an item")
        #expect(h.sql("SELECT count(*) FROM tags WHERE tag LIKE 'folder:.git%'") == "0")
        try h.mount()
        #expect(h.sh("diff -r --exclude=.git '\(src)' vault/ && echo same").out == "same")
        #expect(h.sh("rsync -a --dry-run --itemize-changes --exclude=.git '\(src)/' vault/").out == "", "nothing to send")
        #expect(h.sh("stat -c '%y %n' vault/notes/A.md vault/notes/empty").out
                == "2020-01-02 03:04:05.123456789 +0000 vault/notes/A.md\n2019-05-05 01:02:03.000000000 +0000 vault/notes/empty")
        h.unmount()
        let exported = Shell.run([MountHarness.binary, "export", out, "--store", h.store])
        #expect(exported.status == 0, "\(exported.stderr)")
        #expect(Shell.run(["/bin/bash", "-c", "diff -r --exclude=.git '\(src)' '\(out)' && echo same"]).out == "same")
        #expect(Shell.run(["/bin/bash", "-c", "rsync -a --dry-run --itemize-changes --exclude=.git '\(src)/' '\(out)/'"]).out == "")
        // Imported again, nothing has changed.
        let again = Shell.run([MountHarness.binary, "import", src, "--store", h.store])
        #expect(again.stdout.contains("0 new, 0 changed, 6 unchanged"), "\(again.stdout)")
    }

    @Test func FS27_theTreeTakesRsyncTwiceGivesItBackAndExportsIt() throws {
        let h = try MountHarness()
        defer { h.unmount(); try? FileManager.default.removeItem(atPath: h.root) }
        try h.mount()
        let src = h.root + "/src", out = h.root + "/out", exported = h.root + "/exported"
        let made = Shell.run(["/bin/bash", "-c", "set -e; mkdir -p '\(src)' && cd '\(src)' && " + Self.vaultScript + """

            mkdir -p .obsidian "Deep/er/est" Empty
            printf '{"theme":"dark"}' > .obsidian/app.json
            printf 'UNIQUE-MARKER deep\\n' > "Deep/er/est/Home.md"
            head -c 5000 /dev/urandom > favicon.ico
            printf '{"k": [1, 2]}\\n' > Deep/data.json
            touch -d '2020-01-02 03:04:05' Home.md Deep/data.json
            """])
        #expect(made.status == 0, "\(made.stderr)")
        // In, through the `vault` symlink: every folder made, every file taken, whatever its type.
        let first = h.sh("rsync -a --stats '\(src)/' vault/")
        #expect(first.status == 0, "\(first.stderr)")
        let second = h.sh("rsync -a --stats '\(src)/' vault/")
        #expect(second.status == 0 && second.stdout.contains("Number of regular files transferred: 0"), "\(second.stdout)")
        #expect(h.sh("diff -r '\(src)' vault/ && echo same").out == "same")
        #expect(h.sh("getfattr --only-values -n user.marfa.type vault/Deep/data.json vault/favicon.ico 'vault/Deep/er/est/Home.md'").out
                == "core.filecore.file.imagecore.note")
        #expect(h.sh("stat -c %y vault/Home.md").out.hasPrefix("2020-01-02 03:04:05"))
        // Names used twice keep their folders; the whole mount shows each match once.
        #expect(h.sh("ls types/core.note | grep -c '^Home'").out == "3")
        #expect(h.sh("grep -r UNIQUE-MARKER . | wc -l").out == "1")
        #expect(h.sh("find . -name 'Sibling.md' -type f").out == "./types/core.note/Sibling.md")
        // Out again, and export writes the same tree.
        #expect(h.sh("rsync -a vault/ '\(out)/' && diff -r '\(src)' '\(out)' && echo same").out == "same")
        // mkdir, rename and rmdir of folders.
        #expect(h.sh("mkdir vault/New && mv vault/Old/'Atlas Plan.md' vault/New/ && rmdir vault/Old && ls vault/New").out == "Atlas Plan.md")
        #expect(h.sh("ls tags/folder:New").out == "Atlas Plan.md")
        #expect(h.sh("mv vault/New vault/Renamed && ls vault/Renamed").out == "Atlas Plan.md")
        #expect(h.sh("test -d vault/New").status != 0)
        #expect(h.sh("rmdir vault/Renamed").status != 0, "not empty")
        #expect(h.sh("mkdir vault/Old && mv vault/Renamed/'Atlas Plan.md' vault/Old/ && rmdir vault/Renamed").status == 0)
        h.unmount()
        let exp = Shell.run([MountHarness.binary, "export", exported, "--store", h.store])
        #expect(exp.status == 0, "\(exp.stderr)")
        #expect(Shell.run(["diff", "-r", src, exported]).status == 0, "\(Shell.run(["diff", "-r", src, exported]).stdout)")
    }

    /// The tree's files are the items' files: an editor's rename save, `rsync -aX` and `cp -a`
    /// round trips and a large `dd` behave there as in `types/`.
    @Test func FS27_editorsRsyncXAndLargeFilesInTheTree() throws {
        try MountHarness.with { m in
            #expect(m.sh("mkdir -p vault/Notes && printf 'hello old\nsecond line\n' > vault/Notes/n.md && setfattr -n user.c -v 1 vault/Notes/n.md").status == 0)
            m.settle()
            let id = m.sh("getfattr --only-values -n user.marfa.id vault/Notes/n.md").out
            // vim with a backup (a rename save) in a folder of the tree: the item keeps its id and folder.
            let run = Terminal.drive("vim -u DEFAULTS -i NONE -c 'set backupskip=' -c 'set backup' n.md", cwd: m.path("vault/Notes"),
                                     ready: "hello old", keys: [[":%s/old/new/", "Enter"], [":wq", "Enter"]])
            #expect(run.status == 0 && !run.screen.contains("E667"), "\(run.screen)")
            #expect(m.sh("cat vault/Notes/n.md").stdout == "hello new\nsecond line\n")
            #expect(m.sh("getfattr --only-values -n user.marfa.id vault/Notes/n.md").out == id)
            #expect(m.sh("getfattr --only-values -n user.c vault/Notes/n.md; echo; ls tags/folder:Notes").out == "1\nn.md")
            #expect(m.sh("ls vault/Notes").out == "n.md\nn.md~", "vim's backup stays a local file beside the note")
            // rsync -aX out and back, twice: nothing transferred, attributes and bytes kept.
            let out = m.root + "/out"
            #expect(m.sh("rsync -aX vault/ '\(out)/' && rsync -aX '\(out)/' vault/").status == 0)
            let again = m.sh("rsync -aX --stats '\(out)/' vault/")
            #expect(again.stdout.contains("Number of regular files transferred: 0"), "\(again.stdout)")
            #expect(m.sh("getfattr --only-values -n user.c vault/Notes/n.md; echo; cat vault/Notes/n.md").out == "1\nhello new\nsecond line")
            #expect(m.sh("cp -a vault/Notes/n.md '\(out)/copy.md' && cp -a '\(out)/copy.md' vault/Notes/ && getfattr --only-values -n user.c vault/Notes/copy.md").out == "1")
            // 300 MiB written into the tree: a file item, read back exactly.
            #expect(m.sh("head -c 314572800 /dev/urandom > '\(out)/big.bin' && dd if='\(out)/big.bin' of=vault/Notes/big.bin bs=1M conv=fsync status=none").status == 0)
            #expect(m.sh("cmp '\(out)/big.bin' vault/Notes/big.bin && getfattr --only-values -n user.marfa.type vault/Notes/big.bin").out == "core.file")
            #expect(m.sh("cmp '\(out)/big.bin' types/core.file/big.bin && echo same").out == "same")
        }
    }

    @Test func FS26_aRemoteEditThatAddsALinkShowsInTheOtherMountsBacklinks() throws {
        try MountPair.with { p in
            let (a, b) = (p.a, p.b)
            #expect(a.sh("printf 'the target\\n' > vault/target.md && printf 'no links yet\\n' > vault/source.md").status == 0)
            #expect(MountHarness.eventually { b.sh("cat vault/source.md").out == "no links yet" })
            #expect(b.sh("ls backlinks/core.note").out.isEmpty)
            #expect(a.sh("printf 'now [[target]] and #shared\\n' >> vault/source.md").status == 0)
            #expect(MountHarness.eventually { b.sh("ls backlinks/core.note/target.md/references").out == "source.md" },
                    "\(b.sh("cat vault/source.md; ls -R backlinks").out)")
            #expect(MountHarness.eventually { b.sh("ls tags/shared").out == "source.md" })
        }
    }
}
