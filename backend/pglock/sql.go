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
	//go:embed sql/list_page.sql
	listPageSQL string
	//go:embed sql/cleanup.sql
	cleanupSQL string
	//go:embed sql/cleanup_rw_holds.sql
	cleanupRWHoldsSQL string
	//go:embed sql/cleanup_permits.sql
	cleanupPermitsSQL string
	//go:embed sql/cleanup_intents.sql
	cleanupIntentsSQL string
	//go:embed sql/cleanup_permit_intents.sql
	cleanupPermitIntentsSQL string
	//go:embed sql/force_release.sql
	forceReleaseSQL string
	//go:embed sql/xact_lock.sql
	xactLockSQL string
	//go:embed sql/try_xact_lock.sql
	tryXactLockSQL string
	//go:embed sql/used_before.sql
	usedBeforeSQL string
	//go:embed sql/settings_migrate.sql
	settingsMigrateSQL string
	//go:embed sql/key_ids.sql
	keyIDsSQL string
)

// migrateLockID serialises concurrent migrations: CREATE ... IF NOT EXISTS
// can still fail when two sessions run it at once, and a database's key-id
// scheme is read and written under it. It is the id every version used, so
// that migrations of old and new versions serialise: never change it.
var migrateLockID = LegacyKeyID("distlock/pglock/migrate")
