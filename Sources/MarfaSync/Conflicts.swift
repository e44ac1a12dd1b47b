import Foundation
import Logging
import MarfaModel
import MarfaStore

/// Conflicts, client side (W-7, FS-20): how a 409 is settled — the per-field merge policy, the
/// three-way text merge, and when the local version is kept as a conflicted copy. The store keeps
/// the result (MarfaStore/Store+Conflicts.swift); the server decides what is a conflict
/// (MarfaServer/ServerStore+Items.swift, `mergeStalePatch`).

/// How a 409 is settled (FS-20, `--conflict`).
public enum ConflictMode: String, Sendable, CaseIterable {
    /// Per-field policy; `keep_both_copies` fields first try a three-way merge of the text.
    case merge
    /// Per-field policy; a conflict on a `keep_both_copies` field always keeps both copies.
    case keepBoth = "keep-both"
    /// Nothing automatic: the item stays conflicted with its local bytes until its next save.
    case manual
}

public enum ConflictResolver {
    /// Field by field over ancestor, local and server (`current`): a field only one side changed
    /// takes that side's value; one both changed follows its policy: `last_writer_wins` takes the
    /// server's, `keep_both_copies` merges the text (mode `merge`) or, if that fails, takes the
    /// server's value and keeps the whole local version as a copy. Without an ancestor
    /// (`ancestor_unavailable`), every field that differs counts as changed on both sides.
    public static func resolve(local: [String: JSONValue], ancestor: [String: JSONValue]?, current: [String: JSONValue],
                               policy: MergePolicy, mode: ConflictMode) -> (outcome: ConflictOutcome, merged: [String], kept: [String]) {
        var resolved: [String: JSONValue] = [:]
        var merged: [String] = [], kept: [String] = []
        for k in Set(local.keys).union(current.keys).union(ancestor?.keys ?? [:].keys).sorted() {
            let l = local[k], c = current[k]
            var v: JSONValue?
            if l == c { v = c } else if let a = ancestor, l == a[k] { v = c } else if let a = ancestor, c == a[k] { v = l } else {
                switch policy.fields[k] ?? policy.default {
                case .lastWriterWins: v = c
                case .keepBothCopies:
                    if mode == .merge, let ls = l?.stringValue, let cs = c?.stringValue,
                       let text = TextMerge.threeWay(base: ancestor?[k]?.stringValue ?? "", local: ls, remote: cs) {
                        v = .string(text); merged.append(k)
                    } else {
                        v = c; kept.append(k)
                    }
                }
            }
            if let v { resolved[k] = v }
        }
        return (ConflictOutcome(resolved: resolved, copy: kept.isEmpty ? nil : local), merged, kept)
    }
}

extension QueueDrainer {
    /// A 409 (W-7, FS-20): settled by the type's merge policy, unless `--conflict manual` or the
    /// answer has no three-way context (then the mutation is held as a conflict).
    func settle(_ m: Mutation, conflict r: WireResponse, failure f: WireFailure) -> Outcome {
        let body = r.json
        let code = r.errorCode ?? ""
        func props(_ k: String) -> [String: JSONValue]? { body[k]?.objectValue?["properties"]?.objectValue }
        let currentVersion: Int64? = { if case .int(let v)? = body["current"]?.objectValue?["version"] { return v }; return nil }()
        guard conflictMode != .manual, m.kind == .update, ["version_conflict", "ancestor_unavailable"].contains(code),
              let current = props("current"), let currentVersion else {
            try? store.markConflict(seq: m.seq, itemID: m.itemID, error: f.description, context: String(decoding: r.body, as: UTF8.self),
                                    currentVersion: conflictMode == .manual ? currentVersion : nil)
            status.update { $0.lastError = "\(m.itemID): \(f.description)" }
            status.record("conflict.held", ["item": .string(m.itemID), "error": .string(f.description)])
            return .done(StoreChanges(items: [m.itemID]))
        }
        let ancestor = code == "version_conflict" ? props("ancestor") : nil
        let policy: MergePolicy = body["merge_policy"].flatMap { try? JSONCoding.decode(MergePolicy.self, from: JSONCoding.encode($0)) }
            ?? ((try? store.item(id: m.itemID))?.map { store.type($0.item.type).mergePolicy } ?? MergePolicy())
        var merged: [String] = [], kept: [String] = []
        do {
            let changes = try store.resolveConflict(seq: m.seq, itemID: m.itemID, currentVersion: currentVersion, device: device) { local in
                let r = ConflictResolver.resolve(local: local, ancestor: ancestor, current: current, policy: policy, mode: conflictMode)
                merged = r.merged; kept = r.kept
                return r.outcome
            }
            let copy = changes.items.first { $0 != m.itemID }
            status.record(copy == nil ? "conflict.merged" : "conflict.copied", [
                "item": .string(m.itemID), "copy": copy.map(JSONValue.string) ?? .null,
                "merged_fields": .array(merged.map(JSONValue.string)), "kept_fields": .array(kept.map(JSONValue.string)),
                "strategy": .string(conflictMode.rawValue),
            ])
            log.info("conflict settled", metadata: ["item": "\(m.itemID)", "merged": "\(merged)", "copied": "\(kept)"])
            return .done(changes)
        } catch {
            try? store.markConflict(seq: m.seq, itemID: m.itemID, error: f.description, context: String(decoding: r.body, as: UTF8.self))
            log.error("settling a conflict failed; it is held", metadata: ["item": "\(m.itemID)", "error": "\(error)"])
            return .done(StoreChanges(items: [m.itemID]))
        }
    }
}
