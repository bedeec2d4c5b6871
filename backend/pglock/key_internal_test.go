package pglock

import "testing"

// TestMigrateLockIDNeverChanges pins the id under which every version
// serialises its migrations, so that an old and a new version migrating one
// database at once never run into each other.
func TestMigrateLockIDNeverChanges(t *testing.T) {
	if migrateLockID != 7364288644699447983 {
		t.Fatalf("migrateLockID = %d, want 7364288644699447983, the id every version takes", migrateLockID)
	}
}
