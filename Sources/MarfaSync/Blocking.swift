import Foundation
import Synchronization

/// Sleeps until `deadline` (seconds since 1970), looking every quarter of a second whether the
/// wait may end sooner (`endsEarly`, run on the caller's actor); true if it did. A cancelled task
/// returns at once (false). The queue's wait after a network error and the event stream's wait
/// to reconnect each end so when the other half of the engine meets the server again.
func wait(until deadline: Double, isolation: isolated (any Actor)? = #isolation, endsEarly: () -> Bool) async -> Bool {
    while !Task.isCancelled {
        let left = deadline - Date().timeIntervalSince1970
        if left <= 0 { return false }
        try? await Task.sleep(for: .milliseconds(Int64(min(left, 0.25) * 1000)))
        if endsEarly() { return true }
    }
    return false
}

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
