package pglock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/driver"
)

// ForceRelease frees key whoever holds it, for operators. An advisory lock
// belongs to its session and only ending that session frees it, so
// ForceRelease ends every session holding key's lock with
// pg_terminate_backend, waits for them to exit, and returns what the holder
// row said of the hold (fence, time to live, metadata; only Held for a lock
// taken outside pglock). Everything else those sessions did ends with them.
// A pglock holder notices at once that its connection closed and reports the
// lock lost; its Renew and Release then return driver.ErrNotHeld.
//
// It needs WithTerminateOnForceRelease(true) and PostgreSQL 14 or later
// (pg_terminate_backend with a timeout), else it returns an error matching
// errors.ErrUnsupported that says why. If no session holds key it returns an
// error matching driver.ErrNotHeld and ends nothing.
func (b *Backend) ForceRelease(ctx context.Context, key string, _ driver.ForceOptions) (driver.Info, error) {
	if err := b.holds.ClosedError(); err != nil {
		return driver.Info{}, err
	}
	if err := driver.ValidateKey(key); err != nil {
		return driver.Info{}, err
	}
	if !b.opts.forceTerminate {
		return driver.Info{}, fmt.Errorf("pglock: %w: an advisory lock belongs to the session holding it and only ending that session frees it; allow that with WithTerminateOnForceRelease(true) (URL parameter terminate_on_force_release=true)",
			errors.ErrUnsupported)
	}
	if err := b.ensureSchema(ctx); err != nil {
		return driver.Info{}, err
	}
	conn, qctx, done, err := b.pooled(ctx)
	if err != nil {
		return driver.Info{}, driver.Wrap("pglock", err)
	}
	defer done()
	if v := conn.Conn().PgConn().ParameterStatus("server_version"); majorVersion(v) < 14 {
		return driver.Info{}, fmt.Errorf("pglock: %w: needs PostgreSQL 14 or later (pg_terminate_backend with a timeout), the server is %s",
			errors.ErrUnsupported, v)
	}
	rows, err := conn.Query(qctx, forceReleaseSQL, b.ID(key), key, (b.opts.RequestTimeout / 2).Milliseconds())
	if err != nil {
		return driver.Info{}, driver.Wrap("pglock", err)
	}
	ended, err := pgx.CollectRows(rows, pgx.RowToStructByPos[endedSession])
	if err != nil {
		return driver.Info{}, driver.Wrap("pglock", err)
	}
	return holdInfo(key, ended)
}

// endedSession is one session ForceRelease ended.
type endedSession struct {
	PID    int32
	Exited bool
	Fence  int64
	Meta   []byte
	TTLUS  int64
}

// holdInfo is what the ended sessions held of key.
func holdInfo(key string, ended []endedSession) (driver.Info, error) {
	if len(ended) == 0 {
		return driver.Info{}, driver.ErrNotHeld
	}
	info := driver.Info{Key: key, Held: true}
	for _, e := range ended {
		if !e.Exited {
			return driver.Info{}, fmt.Errorf("pglock: the session of backend pid %d was told to end but had not exited in time", e.PID)
		}
		if e.Fence == 0 {
			continue // not a pglock holder row
		}
		info.Fence, info.TTL = uint64(e.Fence), max(time.Duration(e.TTLUS)*time.Microsecond, 0)
		if err := json.Unmarshal(e.Meta, &info.Meta); err != nil {
			return driver.Info{}, fmt.Errorf("pglock: metadata: %w", err)
		}
	}
	return info, nil
}

// majorVersion is the major version in a server_version such as "15.4
// (Debian 15.4-1)", or 0.
func majorVersion(v string) int {
	n, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	return n
}
