package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/mysqllock"
	"github.com/distlock/distlock/idem"
	"github.com/distlock/distlock/idem/idemtest"
	"github.com/distlock/distlock/idem/mysqlstore"
	"github.com/distlock/distlock/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup returns a Keeper whose locks (mysqllock) and records are both in a
// new MariaDB.
func setup(t *testing.T) (*idem.Keeper, *mysqlstore.Store, *sql.DB) {
	t.Helper()
	db, err := sql.Open("mysql", testserver.MariaDBDSN(testserver.MariaDB(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b, err := mysqllock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	c := distlock.New(b)
	t.Cleanup(func() { c.Close() })
	s, err := mysqlstore.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	k, err := idem.New(c, s)
	if err != nil {
		t.Fatal(err)
	}
	return k, s, db
}

func TestSuite(t *testing.T) {
	k, s, _ := setup(t)
	idemtest.Run(t, k, s)
}

func TestDoTx(t *testing.T) {
	k, s, db := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	state := func(t *testing.T, key string) (order, record bool) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM orders WHERE id = ?)`, key).Scan(&order); err != nil {
			t.Fatal(err)
		}
		_, record, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return order, record
	}
	doTx := func(t *testing.T, key string, fail error) error {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.DoTx(ctx, k, tx, key, []byte("order"), func(ctx context.Context, tx *sql.Tx, _ uint64) ([]byte, error) {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (?)`, key); err != nil {
				return nil, err
			}
			return []byte("placed"), fail
		})
		return err
	}
	t.Run("Commit", func(t *testing.T) {
		if err := doTx(t, "a", nil); err != nil {
			t.Fatal(err)
		}
		if order, record := state(t, "a"); !order || !record {
			t.Fatalf("order %v, record %v; want both", order, record)
		}
	})
	t.Run("Rollback", func(t *testing.T) {
		busy := errors.New("upstream busy")
		if err := doTx(t, "b", busy); !errors.Is(err, busy) {
			t.Fatalf("err %v, want %v", err, busy)
		}
		if order, record := state(t, "b"); order || record {
			t.Fatalf("order %v, record %v; want neither", order, record)
		}
	})
}

func TestOpenURL(t *testing.T) {
	addr := testserver.MariaDB(t).Addr()
	for _, scheme := range []string{"mysql", "mysql+table"} {
		t.Run(scheme, func(t *testing.T) { idemtest.RunURL(t, scheme+"://root@"+addr+"/distlock") })
	}
}
