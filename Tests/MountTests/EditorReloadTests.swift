import Foundation
import MarfaTestSupport
import Testing

/// FS-29 with real editors under tmux on B's vault tree while A edits the same note: vim
/// (`autoread` + `:checktime`) and Emacs (`global-auto-revert-mode`) reload A's edits and save
/// on top of them; nano, micro and kakoune save a stale buffer twice, and A's edit stays.
@Suite(.serialized) struct EditorReloadTests {
    func cat(_ m: MountHarness, _ path: String) -> String { (try? String(contentsOfFile: m.path(path), encoding: .utf8)) ?? "" }

    /// What happens while the editor runs: keys typed, or a change and a wait outside it.
    enum Step: Sendable {
        case keys([String])
        /// A replaces line `old` by `new` in the note; B's mount shows it.
        case remote(String, String)
        /// B's mount shows `text` in the note (a save has settled, merged if it had to).
        case onB(String)
        /// Time for an editor to notice a change by itself (Emacs' auto-revert).
        case pause(Double)
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var command: String
        var steps: [Step]
        /// Lines A changed that the note must hold at the end, once each.
        var remoteLines: [String]
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "vim autoread", command: "vim -u DEFAULTS -i NONE -c 'set autoread backupskip=' NAME", steps: [
            .remote("l1", "l1 from A"), .keys([":checktime", "Enter"]), .keys(["G", "o", "B 1", "Escape"]), .keys([":w", "Enter"]), .onB("B 1"),
            .remote("l2", "l2 from A"), .keys([":checktime", "Enter"]), .keys(["G", "o", "B 2", "Escape"]), .keys([":wq", "Enter"]), .onB("B 2"),
        ], remoteLines: ["l1 from A", "l2 from A"]),
        Case(name: "emacs auto-revert", command: "emacs -nw -Q --eval '(setq auto-revert-interval 0.5)' --eval '(global-auto-revert-mode 1)' NAME", steps: [
            .remote("l1", "l1 from A"), .pause(2.5), .keys(["M->", "B 1", "C-m"]), .keys(["C-x", "C-s"]), .onB("B 1"),
            .remote("l2", "l2 from A"), .pause(2.5), .keys(["M->", "B 2", "C-m"]), .keys(["C-x", "C-s"]), .onB("B 2"), .keys(["C-x", "C-c"]),
        ], remoteLines: ["l1 from A", "l2 from A"]),
        Case(name: "nano stale buffer", command: "nano NAME", steps: [
            .remote("l1", "l1 from A"), .keys(["M-/"]), .keys(["B 1"]), .keys(["C-o"]), .keys(["Enter"]), .keys(["?modified since", "y"]), .onB("B 1"),
            .keys(["Enter", "B 2"]), .keys(["C-o"]), .keys(["Enter"]), .keys(["?modified since", "y"]), .onB("B 2"), .keys(["C-x"]), .keys(["?Save modified", "n"]),
        ], remoteLines: ["l1 from A"]),
        Case(name: "micro stale buffer", command: "micro NAME", steps: [
            .remote("l1", "l1 from A"), .keys(["Escape"]), .keys(["?Reload file", "n"]), .keys(["Down", "Down", "Down"]), .keys(["B 1"]), .keys(["C-s"]), .onB("B 1"),
            .keys(["Escape"]), .keys(["?Reload file", "n"]), .keys(["Enter", "B 2"]), .keys(["C-s"]), .onB("B 2"), .keys(["C-q"]), .keys(["?Save changes", "n"]),
        ], remoteLines: ["l1 from A"]),
        Case(name: "kakoune stale buffer", command: "kak -n -e 'set global autoreload no' NAME", steps: [
            .remote("l1", "l1 from A"), .keys(["ge", "o", "B 1", "Escape"]), .keys([":w", "Enter"]), .onB("B 1"),
            .keys(["o", "B 2", "Escape"]), .keys([":w", "Enter"]), .onB("B 2"), .keys([":q", "Enter"]),
        ], remoteLines: ["l1 from A"]),
    ]

    @Test(arguments: cases) func FS29_editorsOnTheVaultKeepARemoteEdit(_ c: Case) throws {
        try MountPair.with { p in
            let file = c.name.split(separator: " ").first.map(String.init)! + ".md"
            let path = "vault/ed/" + file
            #expect(p.a.sh("mkdir -p vault/ed && printf 'l1\\nl2\\nl3\\n' > \(path)").status == 0)
            #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path) == "l1\nl2\nl3\n" })
            // Steps → key groups, with what happens before each.
            var keys: [[String]] = [], before: [Int: [Step]] = [:], after: [Step] = []
            for s in c.steps {
                if case .keys(let k) = s { keys.append(k); before[keys.count - 1] = after; after = [] } else { after.append(s) }
            }
            var remoteSoFar: [String] = []
            func run(_ s: Step) {
                switch s {
                case .keys: break
                case .remote(let old, let new):
                    #expect(p.a.sh("sed -i 's/^\(old)$/\(new)/' \(path)").status == 0)
                    #expect(MountHarness.eventually(timeout: 20) { cat(p.b, path).contains(new + "\n") }, "B shows A's \(new): \(cat(p.b, path))")
                    remoteSoFar.append(new)
                case .onB(let text):
                    // The save, merged with A's lines (an editor that watches its file prompts once
                    // the merge is there).
                    #expect(MountHarness.eventually(timeout: 20) { let t = cat(p.b, path); return ([text] + remoteSoFar).allSatisfy(t.contains) },
                            "\(c.name): B shows \(text): \(cat(p.b, path))")
                    usleep(300_000)
                case .pause(let s): usleep(UInt32(s * 1e6))
                }
            }
            let out = Terminal.drive(c.command.replacingOccurrences(of: "NAME", with: file), cwd: p.b.path("vault/ed"), ready: "l1", keys: keys,
                                     timeout: 90, between: { i in (before[i] ?? []).forEach(run) })
            after.forEach(run)
            #expect(out.status == 0, "\(c.name) exits 0: \(out.screen)")
            for m in [p.b, p.a] {
                #expect(MountHarness.eventually(timeout: 20) {
                    let lines = cat(m, path).split(separator: "\n").map(String.init)
                    return (c.remoteLines + ["B 1", "B 2", "l3"]).allSatisfy { l in lines.filter { $0 == l }.count == 1 }
                }, "\(c.name): \(m === p.a ? "A" : "B") has A's and B's lines once each: \(cat(m, path))\n\(out.screen)")
            }
            #expect(p.b.sh("ls vault/ed | grep -c 'conflicted copy'").out == "0", "\(c.name): \(p.b.sh("ls vault/ed").out)")
        }
    }
}
