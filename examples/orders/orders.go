package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/occ"
)

// Schema is the orders database: an order's state machine with a version
// for optimistic updates and the last fence that wrote it, and the charges,
// at most one per order by the primary key on the business id.
const Schema = `
CREATE TABLE IF NOT EXISTS orders (
	id      text PRIMARY KEY,
	amount  bigint NOT NULL,
	state   text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'charging', 'charged')),
	version bigint NOT NULL DEFAULT 0,
	fence   bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS charges (
	order_id text PRIMARY KEY REFERENCES orders (id),
	replica  text NOT NULL,
	fence    bigint NOT NULL,
	amount   bigint NOT NULL
);`

// Outcomes of Process.
var (
	ErrBusy    = errors.New("orders: another replica holds the order")
	ErrStale   = errors.New("orders: this replica's lock was overtaken; nothing written")
	ErrCharged = errors.New("orders: the order is already charged")
)

// Service is one replica of the payment service.
type Service struct {
	Replica string
	Locks   *distlock.Client
	DB      *sql.DB
	// Lease is the lock's lease, without renewal: the charge must finish
	// within it or be refused. The default is 5s.
	Lease time.Duration
	// BeforeCharge, when set, runs after the replica decided to charge and
	// before the charge reaches the database: where a GC pause or a frozen
	// VM would hurt most.
	BeforeCharge func()
}

// Process charges an order once, whatever the other replicas do. Four
// layers, each enough for what the previous one cannot promise:
//
//  1. the lock keeps replicas from doing the work twice in the normal case;
//  2. the fence, checked by the database write, refuses a replica whose
//     lock ran out (a pause, a partition) once a newer holder wrote;
//  3. the primary key of charges on the order id refuses a second charge
//     even if the lock and its fences both failed (a store that lost them);
//  4. the order's state machine, moved with versioned (occ) updates, makes
//     every step happen once and in order.
func (s *Service) Process(ctx context.Context, orderID string) error {
	lease := s.Lease
	if lease == 0 {
		lease = 5 * time.Second
	}
	l, err := s.Locks.TryLock(ctx, "order:"+orderID, distlock.WithLease(lease))
	if errors.Is(err, distlock.ErrNotAcquired) {
		return ErrBusy
	}
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = l.Release(rctx)
	}()
	fc := int64(l.Fence())

	var state string
	var version, amount int64
	if err := s.DB.QueryRowContext(ctx, `SELECT state, version, amount FROM orders WHERE id = $1`, orderID).
		Scan(&state, &version, &amount); err != nil {
		return fmt.Errorf("orders: read %s: %w", orderID, err)
	}
	if state == "charged" {
		return ErrCharged
	}
	// pending -> charging (or a charging left by a replica that died).
	if err := advance(ctx, s.DB, orderID, "charging", version, fc); err != nil {
		return err
	}
	version++
	if err := l.Err(); err != nil {
		return errors.Join(ErrStale, err)
	}
	if s.BeforeCharge != nil {
		s.BeforeCharge()
	}

	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	// charging -> charged, fenced and versioned, then the charge itself: both
	// or neither.
	if err := advance(ctx, tx, orderID, "charged", version, fc); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO charges (order_id, replica, fence, amount) VALUES ($1, $2, $3, $4)`,
		orderID, s.Replica, fc, amount); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return ErrCharged
		}
		return fmt.Errorf("orders: charge %s: %w", orderID, err)
	}
	return tx.Commit()
}

// advance moves the order to state if its version is still version and no
// newer fence wrote it.
func advance(ctx context.Context, db occ.Execer, orderID, state string, version, fc int64) error {
	err := fence.Write(ctx, occ.SQL(db), `UPDATE orders SET state = $2, version = version + 1, fence = $4
WHERE id = $1 AND version = $3 AND fence <= $4 AND state <> 'charged'`, orderID, state, version, fc)
	if errors.Is(err, fence.ErrStale) {
		// A newer fence, a moved version or a charged order: in every case
		// another replica got here first.
		return errors.Join(ErrStale, err)
	}
	return err
}
