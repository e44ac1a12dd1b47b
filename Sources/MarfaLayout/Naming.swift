import Foundation
import MarfaModel

/// The name an item asks for in a directory before FS-7 disambiguation (FS-4, FS-5).
public enum Naming {
    public static func stemAndExt(id: String, type: TypeSchema, properties: [String: JSONValue],
                                  fileName: String?) -> (stem: String, ext: String) {
        if let f = fileName, Names.isValidComponent(f) { return Names.split(f) }
        if TypeSchema.isBlobType(type.id) {
            let filename = properties["filename"]?.stringValue
            let ext = Names.blobExtension(filename: filename, mimeType: properties["mime_type"]?.stringValue)
            if let t = properties[type.titleField]?.stringValue, !Names.escape(t).isEmpty {
                let stem = Names.escape(t)
                return Names.split(stem).ext.lowercased() == ext.lowercased() && !ext.isEmpty
                    ? (Names.split(stem).stem, ext) : (stem, ext)
            }
            if let f = filename, !Names.escape(f).isEmpty { return (Names.split(Names.escape(f)).stem, ext) }
            return (id, ext)
        }
        if let t = properties[type.titleField]?.stringValue {
            let s = Names.escape(t)
            if !s.isEmpty && s != "." && s != ".." { return (s, ".md") }
        }
        return (id, ".md")
    }
}
