import Foundation

public enum MergeStrategy: String, Codable, Sendable { case lastWriterWins = "last_writer_wins", keepBothCopies = "keep_both_copies" }

public struct MergePolicy: Codable, Hashable, Sendable {
    public var `default`: MergeStrategy
    public var fields: [String: MergeStrategy]
    public init(default: MergeStrategy = .lastWriterWins, fields: [String: MergeStrategy] = [:]) {
        self.default = `default`; self.fields = fields
    }
}

public struct FieldSpec: Codable, Hashable, Sendable {
    public var type: String
    public var required: Bool?
    public var maxLength: Int?
    public init(type: String, required: Bool? = nil, maxLength: Int? = nil) {
        self.type = type; self.required = required; self.maxLength = maxLength
    }
}

public struct DisplayHints: Codable, Hashable, Sendable {
    public var titleField: String?
    public var bodyField: String?
    public init(titleField: String? = nil, bodyField: String? = nil) { self.titleField = titleField; self.bodyField = bodyField }
    enum CodingKeys: String, CodingKey { case titleField = "title_field", bodyField = "body_field" }
}

/// A registered type (wire.md W-9): fields, display hints, merge policy, parent.
public struct TypeSchema: Codable, Hashable, Sendable {
    public var id: String
    public var label: String
    public var parent: String?
    public var version: Int
    public var fields: [String: FieldSpec]
    public var displayHints: DisplayHints
    public var mergePolicy: MergePolicy

    public init(id: String, label: String, parent: String? = nil, version: Int = 1, fields: [String: FieldSpec],
                displayHints: DisplayHints = DisplayHints(), mergePolicy: MergePolicy = MergePolicy()) {
        self.id = id; self.label = label; self.parent = parent; self.version = version; self.fields = fields
        self.displayHints = displayHints; self.mergePolicy = mergePolicy
    }

    enum CodingKeys: String, CodingKey {
        case id, label, parent, version, fields
        case displayHints = "display_hints", mergePolicy = "merge_policy"
    }

    /// The field that names the item (FS-4): the display hint, else `title`.
    public var titleField: String { displayHints.titleField ?? "title" }
    /// The field shown as the file body (FS-8): the display hint, else `body`.
    public var bodyField: String { displayHints.bodyField ?? "body" }

    /// Types whose content is a blob (FS-5): `core.file` and its subtypes.
    public static func isBlobType(_ id: String) -> Bool { id == "core.file" || id.hasPrefix("core.file.") }

    /// The built-in types of wire.md W-10.
    public static let builtIns: [TypeSchema] = {
        let s = FieldSpec(type: "string")
        let fileFields: [String: FieldSpec] = [
            "title": s, "filename": FieldSpec(type: "string", required: true),
            "mime_type": FieldSpec(type: "string", required: true), "blob_ref": FieldSpec(type: "string", required: true),
        ]
        var types = [
            TypeSchema(id: "core.note", label: "Note", fields: ["title": s, "body": s],
                       displayHints: DisplayHints(titleField: "title", bodyField: "body"),
                       mergePolicy: MergePolicy(fields: ["body": .keepBothCopies])),
            TypeSchema(id: "core.bookmark", label: "Bookmark", fields: ["title": s, "url": s, "notes": s],
                       displayHints: DisplayHints(titleField: "title", bodyField: "notes"),
                       mergePolicy: MergePolicy(fields: ["notes": .keepBothCopies])),
            TypeSchema(id: "core.highlight", label: "Highlight", fields: ["text": s, "note": s],
                       displayHints: DisplayHints(titleField: "text", bodyField: "note"),
                       mergePolicy: MergePolicy(fields: ["note": .keepBothCopies])),
            TypeSchema(id: "core.file", label: "File", fields: fileFields, displayHints: DisplayHints(titleField: "title")),
        ]
        for (sub, label) in [("image", "Image"), ("audio", "Audio"), ("video", "Video"), ("document", "Document")] {
            types.append(TypeSchema(id: "core.file.\(sub)", label: label, parent: "core.file", fields: fileFields,
                                    displayHints: DisplayHints(titleField: "title")))
        }
        return types
    }()
}
