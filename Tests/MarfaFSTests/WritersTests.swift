import Foundation
@testable import MarfaFS
import MarfaStore
import Testing

/// FS-29: the writer behind a request is its program: thread group and start time.
@Suite struct WritersTests {
    /// A program is its thread group and its start time; a program started later is another,
    /// whatever its id (the start time tells programs with one reused id apart).
    @Test func FS29_aWriterIsItsProgramAndWhenItStarted() throws {
        let writers = Writers()
        let me = writers.writer(Int32(getpid()))
        #expect(me.process == getpid())
        #expect(me.started > 0, "the start time is read")
        // A child started later: another process, and a start time not before ours.
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sleep")
        p.arguments = ["2"]
        try p.run()
        defer { p.terminate(); p.waitUntilExit() }
        let child = writers.writer(p.processIdentifier)
        #expect(child.process == p.processIdentifier && child != me)
        #expect(child.started >= me.started)
        #expect(Writers.startTime(p.processIdentifier) == child.started)
        #expect(Writers.startTime(-5) == nil)
    }
}
