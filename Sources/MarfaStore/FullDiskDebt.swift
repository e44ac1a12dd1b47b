import Synchronization

/// The room a full disk left taken, to give back once there is room again (FS-28): the staging
/// journal's committed records (`journal`: `Staging` drops them) and the WAL at its largest
/// (`wal`: `Store.truncateWAL`). Whatever the disk refused (a journal append, a store write) sets
/// both; each is cleared by what gives its room back. Atomic: set with any lock held or none.
final class FullDiskDebt: Sendable {
    let journal = Atomic<Bool>(false)
    let wal = Atomic<Bool>(false)
    func met() {
        journal.store(true, ordering: .relaxed)
        wal.store(true, ordering: .relaxed)
    }
}
