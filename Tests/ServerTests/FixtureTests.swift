import Foundation
import MarfaModel
import MarfaTestSupport
import Testing

/// Every upstream wire fixture (Tests/Fixtures/upstream/wire, from ../shared/spec/upstream) decodes with the model types the
/// client uses.
@Suite struct FixtureTests {
    static let dir = MountHarness.upstream + "/wire/"

    func decode<T: Decodable>(_ type: T.Type, _ file: String) throws -> T {
        try JSONCoding.decode(T.self, from: String(contentsOfFile: Self.dir + file, encoding: .utf8))
    }

    @Test func W1_everyFixtureDecodes() throws {
        let item = try decode(Item.self, "item.json")
        #expect(item.id == "itm_01JABCXYZ" && item.version >= 1)
        let page = try decode(Page<Item>.self, "paginated_items.json")
        #expect(page.hasMore && page.cursor != nil && !page.data.isEmpty)
        let edge = try decode(Edge.self, "edge.json")
        #expect(!edge.sourceID.isEmpty && !edge.edgeType.isEmpty)
        let meta = try decode(ItemMetadata.self, "metadata.json")
        #expect(meta.tags == ["work", "draft"])
        let version = try decode(ItemVersion.self, "version.json")
        #expect(version.version == 1 && version.properties["body"] != nil)
        let conflict = try decode(ErrorResponse.self, "conflict_response.json")
        #expect(conflict.error.code == "version_conflict" && conflict.conflictingFields == ["title"])
        #expect(conflict.mergePolicy?.fields["body"] == .keepBothCopies && conflict.ancestor?.version == 1)
        let blob = try decode(BlobUploadResponse.self, "blob_upload_response.json")
        #expect(blob.hash.hasPrefix("sha256:") && blob.size == 1_048_576)
        let key = try decode(APIKey.self, "api_key.json")
        #expect(key.key == nil && key.typePermissions?["core.note"] == "write")
        let created = try decode(APIKey.self, "created_key.json")
        #expect(created.key?.hasPrefix("marfa_k1_") == true)
        let config = try decode(SpaceConfig.self, "space_config.json")
        #expect(config.eventLogRetentionHours == 72)
        // Outside v1 (connections, recurrence): the client keeps them as plain JSON.
        for file in ["connection_install_result.json", "occurrences_response.json"] {
            #expect(try decode(JSONValue.self, file).objectValue != nil)
        }
        let all = try FileManager.default.contentsOfDirectory(atPath: Self.dir).filter { $0.hasSuffix(".json") }
        #expect(all.count == 12, "a new fixture needs a decoding check here: \(all.sorted())")
    }
}
