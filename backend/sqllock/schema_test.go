package sqllock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestNoSchema: on a database where Migrate never ran, every call fails
// with an error matching distlock.ErrNoSchema, a wait included, which ends
// at once since waiting cannot create a table; CheckSchema says the same
// and creates nothing; after Migrate both pass.
func TestNoSchema(t *testing.T) {
	for name, start := range map[string]func(testing.TB) store{"Postgres": postgres, "MariaDB": mariadb} {
		t.Run(name, func(t *testing.T) {
			st := start(t)
			ctx := testContext(t, time.Minute)
			b := st.open(t)
			c := distlock.New(b)
			defer c.Close()
			for i := range 2 { // CheckSchema creates nothing
				if err := b.CheckSchema(ctx); !errors.Is(err, distlock.ErrNoSchema) {
					t.Fatalf("CheckSchema #%d before Migrate: %v; want ErrNoSchema", i+1, err)
				}
			}
			if _, err := c.Inspect(ctx, "k"); !errors.Is(err, distlock.ErrNoSchema) {
				t.Errorf("Inspect before Migrate: %v; want ErrNoSchema", err)
			}
			start := time.Now()
			if _, err := c.Lock(ctx, "k", distlock.WithWait(10*time.Second)); !errors.Is(err, distlock.ErrNoSchema) {
				t.Errorf("Lock before Migrate: %v; want ErrNoSchema", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("Lock before Migrate waited %v for a table that no wait creates", took)
			}
			if err := b.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := b.CheckSchema(ctx); err != nil {
				t.Fatalf("CheckSchema after Migrate: %v", err)
			}
			l, err := c.TryLock(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
