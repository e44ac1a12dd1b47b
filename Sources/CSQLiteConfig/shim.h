#include <sqlite3.h>

/// A connection that closes last leaves the WAL as it is: no checkpoint, so the log is neither
/// deleted nor cut to nothing (see Store.openPool). `sqlite3_db_config` is variadic, which Swift
/// cannot call.
static inline int marfafs_sqlite_no_checkpoint_on_close(sqlite3 *db) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)0);
}
