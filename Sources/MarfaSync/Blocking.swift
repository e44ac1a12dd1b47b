import Foundation
import Synchronization

/// Runs `body` as a task and waits for its answer, blocking the calling thread (a FUSE thread that
/// needs bytes from the remote) for at most `timeout` seconds; nil when it did not answer in time
/// (the task is then cancelled) or answered nil.
func waitFor<T: Sendable>(timeout: Double, _ body: @escaping @Sendable () async -> T?) -> T? {
    let done = DispatchSemaphore(value: 0)
    let out = Mutex<T?>(nil)
    let task = Task {
        defer { done.signal() }
        let v = await body()
        out.withLock { $0 = v }
    }
    if done.wait(timeout: .now() + timeout) == .timedOut { task.cancel(); return nil }
    return out.withLock { $0 }
}
