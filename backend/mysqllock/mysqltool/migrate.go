package mysqltool

import (
	"context"
	"net/url"

	"github.com/distlock/distlock/backend/mysqllock"
)

// Migrate is the migration of a mysql:// URL, read by mysqllock's
// ParseURL: mysqllock's Migrate, which the backend also runs on first use,
// here ahead of it by a user that may create the table.
func Migrate(ctx context.Context, u *url.URL) (string, error) {
	b, err := mysqllock.Open(ctx, u.String())
	if err != nil {
		return "", err
	}
	defer b.Close()
	if err := b.Migrate(ctx); err != nil {
		return "", err
	}
	return "the holder table distlock_mysql_locks", nil
}
