import GRDB

/// Statements compiled once per connection and reused: the write path runs a dozen per request.
extension Database {
    func run(_ sql: String, _ arguments: StatementArguments = []) throws {
        try cachedStatement(sql: sql).execute(arguments: arguments)
    }

    func row(_ sql: String, _ arguments: StatementArguments = []) throws -> Row? {
        try Row.fetchOne(cachedStatement(sql: sql), arguments: arguments)
    }

    func rows(_ sql: String, _ arguments: StatementArguments = []) throws -> [Row] {
        try Row.fetchAll(cachedStatement(sql: sql), arguments: arguments)
    }

    func exists(_ sql: String, _ arguments: StatementArguments = []) throws -> Bool {
        try Row.fetchOne(cachedStatement(sql: sql), arguments: arguments) != nil
    }
}
