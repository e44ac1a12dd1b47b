import Hummingbird
import HTTPTypes
import Synchronization

/// Every route's path and method, so a request for a real path with a method it does not take is
/// answered 405 with `Allow`, not 404.
final class RouteTable: Sendable {
    private let routes = Mutex<[(segments: [Substring], method: String)]>([])

    func add(_ path: String, _ method: HTTPRequest.Method) {
        routes.withLock { $0.append((path.split(separator: "/"), method.rawValue)) }
    }

    /// The methods the routes matching `path` take (empty: no route has that path).
    func methods(for path: String) -> [String] {
        let parts = path.split(separator: "/")
        return routes.withLock { table in
            table.filter { r in
                r.segments.count == parts.count && zip(r.segments, parts).allSatisfy { $0.hasPrefix(":") || $0 == $1 }
            }.map(\.method)
        }
    }
}

/// The router as `API.register` uses it: each route is also recorded in the `RouteTable`.
struct RecordingRouter {
    let router: Router<BasicRequestContext>
    let table: RouteTable
    typealias Handler<R: ResponseGenerator> = @Sendable (Request, BasicRequestContext) async throws -> R

    private func on<R: ResponseGenerator>(_ path: String, _ method: HTTPRequest.Method, _ handler: @escaping Handler<R>) {
        table.add(path, method)
        router.on(RouterPath(path), method: method, use: handler)
    }
    func get<R: ResponseGenerator>(_ path: String, use handler: @escaping Handler<R>) { on(path, .get, handler) }
    func head<R: ResponseGenerator>(_ path: String, use handler: @escaping Handler<R>) { on(path, .head, handler) }
    func post<R: ResponseGenerator>(_ path: String, use handler: @escaping Handler<R>) { on(path, .post, handler) }
    func put<R: ResponseGenerator>(_ path: String, use handler: @escaping Handler<R>) { on(path, .put, handler) }
    func patch<R: ResponseGenerator>(_ path: String, use handler: @escaping Handler<R>) { on(path, .patch, handler) }
    func delete<R: ResponseGenerator>(_ path: String, use handler: @escaping Handler<R>) { on(path, .delete, handler) }
}
