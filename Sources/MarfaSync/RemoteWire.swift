import Foundation
import MarfaModel
import MarfaStore

/// Reading the server's objects liberally (W-1, W-15): unknown fields are ignored, `space_id` or
/// `tenant_id`, the upstream wrapped forms (`{"item": …}`, `{"edge": …}`), missing optional fields.
public enum RemoteWire {
    public static func item(_ o: [String: JSONValue]) -> Item? {
        if case .object(let inner)? = o["item"] { return item(inner) }
        guard let id = o["id"]?.stringValue, let type = o["type"]?.stringValue else { return nil }
        func str(_ k: String) -> String? { o[k]?.stringValue }
        func int(_ k: String) -> Int? { if case .int(let n)? = o[k] { return Int(n) }; if case .double(let d)? = o[k] { return Int(d) }; return nil }
        let now = Timestamp.now()
        let created = str("created_at") ?? now
        let props: [String: JSONValue] = { if case .object(let p)? = o["properties"] { return p }; return [:] }()
        return Item(id: id, type: type, properties: props, version: int("version") ?? 1, schemaVersion: int("schema_version") ?? 1,
                    source: str("source") ?? "server", sourceID: str("source_id"), timestamp: str("timestamp") ?? created,
                    createdAt: created, updatedAt: str("updated_at") ?? created,
                    state: str("state").flatMap(ItemState.init(rawValue:)) ?? .active, tier: str("tier").flatMap(Tier.init(rawValue:)) ?? .library)
    }

    public static func edge(_ o: [String: JSONValue]) -> Edge? {
        if case .object(let inner)? = o["edge"] { return edge(inner) }
        guard let id = o["id"]?.stringValue, let s = o["source_id"]?.stringValue, let t = o["target_id"]?.stringValue,
              let et = o["edge_type"]?.stringValue else { return nil }
        let now = Timestamp.now()
        let props: [String: JSONValue] = { if case .object(let p)? = o["properties"] { return p }; return [:] }()
        return Edge(id: id, sourceID: s, targetID: t, edgeType: et, properties: props,
                    createdAt: o["created_at"]?.stringValue ?? now, updatedAt: o["updated_at"]?.stringValue ?? now)
    }

    /// `{item, metadata}` (a single-item answer or a `include=metadata` list row).
    public static func envelope(_ o: [String: JSONValue]) -> RemoteChange? {
        guard let it = item(o) else { return nil }
        let meta = o["metadata"]?.objectValue
        return .item(it, tags: meta.flatMap { tags($0["tags"]) }, extensions: meta?["extensions"]?.objectValue)
    }

    static func tags(_ v: JSONValue?) -> [String]? {
        guard case .array(let a)? = v else { return nil }
        return a.compactMap(\.stringValue)
    }

    /// An event frame as a change (nil: an event this client does not know, or malformed data).
    public static func change(event: String, data: String) -> RemoteChange? {
        guard let o = (try? JSONParser.parse(data))?.objectValue else { return nil }
        switch event {
        case "item.created", "item.updated", "item.state_changed", "item.restored":
            return item(o).map { .item($0, tags: nil, extensions: nil) }
        case "item.deleted":
            let inner = o["item"]?.objectValue ?? o
            return (inner["id"]?.stringValue ?? inner["item_id"]?.stringValue).map { .deleted(itemID: $0) }
        case "metadata.changed":
            let inner = o["metadata"]?.objectValue ?? o
            guard let id = inner["item_id"]?.stringValue ?? inner["id"]?.stringValue else { return nil }
            return .metadata(itemID: id, tags: tags(inner["tags"]), tier: inner["tier"]?.stringValue.flatMap(Tier.init(rawValue:)),
                             state: inner["state"]?.stringValue.flatMap(ItemState.init(rawValue:)),
                             extensions: inner["extensions"]?.objectValue)
        case "edge.created":
            return edge(o).map { .edge($0) }
        case "edge.deleted":
            let inner = o["edge"]?.objectValue ?? o
            return inner["id"]?.stringValue.map { .edgeDeleted(id: $0) }
        default:
            return nil
        }
    }
}
