import Foundation
import MarfaModel
import MarfaTestSupport
@testable import MarfaStore
import Testing

/// `Store.item(rowid:)` gives a row it read again only while no write has committed since: a
/// file's attributes read one after another share one read, and never see a row older than the
/// last commit (FS-17, FS-28).
@Suite struct StoreItemReadTests {
    @Test func FS17_anItemReadAgainAfterAWriteIsTheWrittenOne() throws {
        let tmp = try TempDirectory("marfafs-store")
        let store = try Store(path: tmp.path + "/store.sqlite")
        let a = try store.createItem(NewItem(type: "core.note", fileName: "a.md", content: Array("hello\n".utf8)))
        let b = try store.createItem(NewItem(type: "core.note", fileName: "b.md", content: Array("other\n".utf8)))
        #expect(try store.item(rowid: a.rowid)?.item.properties["status"] == nil)
        _ = try store.item(rowid: b.rowid)
        _ = try store.setProperty(rowid: a.rowid, name: "status", value: .string("draft"))
        #expect(try store.item(rowid: a.rowid)?.item.properties["status"] == .string("draft"))
        // A write to another item also ends what was kept.
        _ = try store.setProperty(rowid: b.rowid, name: "status", value: .string("done"))
        #expect(try store.item(rowid: b.rowid)?.item.properties["status"] == .string("done"))
        #expect(try store.item(rowid: a.rowid)?.item.properties["status"] == .string("draft"))
    }
}
