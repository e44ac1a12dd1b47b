import Foundation
import Hummingbird
import NIOCore

/// Request handlers on threads of their own, for a database whose calls wait on the network
/// (PostgreSQL). The store's calls are synchronous; on Swift's cooperative pool (one thread per
/// core) a handler waiting for PostgreSQL holds a whole thread, so a process could have only as
/// many requests in the database as it has cores, and every other task of the process (event
/// streams among them) waited behind them. Here each request runs on one of `threads` threads,
/// as many as the process has database connections.
struct DatabaseThreads<Context: RequestContext>: RouterMiddleware {
    let executor: BlockingExecutor

    init(threads: Int) { executor = BlockingExecutor(threads: threads, name: "marfafs db") }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try await withTaskExecutorPreference(executor) { try await next(request, context) }
    }
}

/// A task executor of a fixed number of threads that may block: jobs run in the order they come.
/// Its threads last as long as the process.
final class BlockingExecutor: TaskExecutor, @unchecked Sendable {
    private let cond = NSCondition()
    private var jobs = CircularBuffer<UnownedJob>()

    init(threads: Int, name: String) {
        for i in 0..<max(1, threads) {
            let thread = Thread { [self] in work() }
            thread.name = "\(name) \(i)"
            thread.start()
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        cond.lock()
        jobs.append(job)
        cond.signal()
        cond.unlock()
    }

    private func work() {
        while true {
            cond.lock()
            while jobs.isEmpty { cond.wait() }
            let job = jobs.removeFirst()
            cond.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
