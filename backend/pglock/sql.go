package pglock

import _ "embed"

var (
	//go:embed sql/migrate.sql
	migrateSQL string
	//go:embed sql/acquire.sql
	acquireSQL string
	//go:embed sql/acquire_wait.sql
	acquireWaitSQL string
	//go:embed sql/acquire_bare.sql
	acquireBareSQL string
	//go:embed sql/acquire_wait_bare.sql
	acquireWaitBareSQL string
	//go:embed sql/publish.sql
	publishSQL string
	//go:embed sql/renew.sql
	renewSQL string
	//go:embed sql/release.sql
	releaseSQL string
	//go:embed sql/inspect.sql
	inspectSQL string
	//go:embed sql/list.sql
	listSQL string
	//go:embed sql/cleanup.sql
	cleanupSQL string
	//go:embed sql/cleanup_rw_holds.sql
	cleanupRWHoldsSQL string
	//go:embed sql/cleanup_permits.sql
	cleanupPermitsSQL string
	//go:embed sql/cleanup_intents.sql
	cleanupIntentsSQL string
	//go:embed sql/force_release.sql
	forceReleaseSQL string
	//go:embed sql/xact_lock.sql
	xactLockSQL string
	//go:embed sql/try_xact_lock.sql
	tryXactLockSQL string
)

// migrateLockID serialises concurrent migrations: CREATE ... IF NOT EXISTS
// can still fail when two sessions run it at once.
var migrateLockID = KeyID("distlock/pglock/migrate")
