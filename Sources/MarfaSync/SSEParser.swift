import Foundation

/// One Server-Sent Events frame (wire.md W-14): `id:`, `event:`, `data:` lines, then a blank line.
public struct SSEEvent: Sendable, Equatable {
    public var id: String?
    public var event: String
    public var data: String
    public init(id: String? = nil, event: String = "message", data: String) { self.id = id; self.event = event; self.data = data }
}

/// What the stream says, in order: events, and comments (`: ping`), which prove the connection lives.
public enum SSEItem: Sendable, Equatable {
    case event(SSEEvent)
    case comment(String)
}

/// An incremental parser of `text/event-stream` (the WHATWG rules): bytes may arrive split
/// anywhere, lines end in LF, CRLF or CR, `data` lines join with LF, unknown fields are ignored,
/// and a block without data dispatches nothing.
public struct SSEParser: Sendable {
    private var line: [UInt8] = []
    private var lastWasCR = false
    private var id: String?
    private var event: String?
    private var data: [String] = []
    private var hasData = false
    /// The reconnection delay the server asked for (`retry:`), in milliseconds.
    public private(set) var retry: Int?

    public init() {}

    public mutating func feed(_ bytes: some Sequence<UInt8>) -> [SSEItem] {
        var out: [SSEItem] = []
        for b in bytes {
            if b == 0x0a, lastWasCR { lastWasCR = false; continue }
            lastWasCR = b == 0x0d
            if b == 0x0a || b == 0x0d {
                if let item = endLine() { out.append(item) }
            } else {
                line.append(b)
            }
        }
        return out
    }

    private mutating func endLine() -> SSEItem? {
        defer { line.removeAll(keepingCapacity: true) }
        if line.isEmpty {
            defer { event = nil; data = []; hasData = false }
            guard hasData else { return nil }
            return .event(SSEEvent(id: id, event: event ?? "message", data: data.joined(separator: "\n")))
        }
        let text = String(decoding: line, as: UTF8.self)
        if text.hasPrefix(":") { return .comment(String(text.dropFirst()).trimmingCharacters(in: .whitespaces)) }
        var field = Substring(text), value = Substring("")
        if let colon = text.firstIndex(of: ":") {
            field = text[..<colon]
            value = text[text.index(after: colon)...]
            if value.hasPrefix(" ") { value = value.dropFirst() }
        }
        switch field {
        case "data": data.append(String(value)); hasData = true
        case "event": event = String(value)
        case "id": if !value.contains("\0") { id = value.isEmpty ? nil : String(value) }
        case "retry": if let ms = Int(value), ms >= 0 { retry = ms }
        default: break
        }
        return nil
    }
}
