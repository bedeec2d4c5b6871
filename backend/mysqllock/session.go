package mysqllock

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/pinned"
)

// session is one held lock: the connection whose session holds its named
// lock. The Hold keeps it out of the pool until RELEASE_LOCK freed the
// lock, or closes it.
type session struct {
	pinned.Hold[*session]

	b    *Backend
	conn *sql.Conn
	name string // the named lock, LockName(Key)
}

var _ pinned.Conn = (*session)(nil)

// pin registers a granted lock and schedules its keepalive.
func (b *Backend) pin(conn *sql.Conn, req driver.AcquireRequest, name string, fence uint64, sent time.Time) (driver.Grant, error) {
	p := &session{b: b, conn: conn, name: name}
	return b.holds.Pin(&p.Hold, p, req, fence, sent)
}

// Ping checks the session (COM_PING). A ping slower than the keepalive
// means a dead or unreachable session; it has at least a second, so that a
// busy machine does not end a healthy hold.
func (p *session) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(p.b.opts.Keepalive, time.Second))
	defer cancel()
	return p.conn.PingContext(ctx)
}

// Extend moves the lease in the holder record. The driver closes a
// connection whose statement is cancelled midway, so the statement has the
// request timeout whatever the caller's context.
func (p *session) Extend(ctx context.Context, _ time.Time, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, p.b.opts.RequestTimeout)
	defer cancel()
	_, err := p.conn.ExecContext(ctx, renewSQL, ttl.Microseconds(), p.name, p.Token)
	return err
}

// Free runs RELEASE_LOCK.
func (p *session) Free(ctx context.Context) (bool, error) {
	var freed sql.NullInt64
	err := p.conn.QueryRowContext(ctx, releaseSQL, p.name).Scan(&freed)
	return freed.Int64 == 1, err
}

// Bound bounds ctx by the request timeout.
func (p *session) Bound(ctx context.Context) (context.Context, func()) {
	return context.WithTimeout(ctx, p.b.opts.RequestTimeout)
}

// Lives reports whether the session survived err.
func (p *session) Lives(err error) bool { return sessionLives(err) }

// Return gives the connection back to the pool.
func (p *session) Return() { _ = p.conn.Close() }

// Destroy closes the connection, which ends the session.
func (p *session) Destroy() { destroy(p.conn) }

// destroy closes conn instead of returning it to the pool: database/sql
// discards a connection whose Raw callback reports driver.ErrBadConn, and
// the driver's close ends the session (COM_QUIT), which frees its locks.
func destroy(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
	_ = conn.Close()
}

// Server errors after which the session is gone.
var sessionEndedCodes = map[uint16]bool{
	1053: true, // ER_SERVER_SHUTDOWN
	1927: true, // ER_CONNECTION_KILLED (MariaDB)
	3169: true, // ER_SESSION_WAS_KILLED (MySQL)
	4031: true, // ER_CLIENT_INTERACTION_TIMEOUT (MySQL: wait_timeout)
}

// sessionLives reports whether the session survived err: the server
// answered with an error that does not end it. Any other error (a broken or
// closed connection, a cancelled statement, whose connection the driver
// closes) means the session, and every named lock it held, is gone or going.
func sessionLives(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && !sessionEndedCodes[me.Number]
}
