package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/distlock/distlock/driver"
)

var _ driver.MultiAcquirer = (*Backend)(nil)

// AcquireAll takes every key of reqs in one script (acquire_all.lua), or
// none if another token holds one. It needs the keys on one server: on a
// Cluster or a Ring, and with WithReplicaAck (whose refusal of an
// unacknowledged grant is per key), it refuses every set as
// errors.ErrUnsupported, and AcquiresTogether says so.
func (b *Backend) AcquireAll(ctx context.Context, reqs []driver.AcquireRequest) ([]driver.Grant, error) {
	if err := driver.ValidateAcquireAll(reqs); err != nil {
		return nil, err
	}
	if !b.AcquiresTogether(nil) {
		return nil, fmt.Errorf("redislock: a set of keys on a Cluster or with replica acknowledgement: %w", errors.ErrUnsupported)
	}
	keys, args := make([]string, 0, 3*len(reqs)), make([]string, 0, 3*len(reqs))
	for _, req := range reqs {
		if err := validRequest(req.Key, req.Token, &req.TTL); err != nil {
			return nil, fmt.Errorf("%w (key %q)", err, req.Key)
		}
		meta, err := encodeMeta(req.Meta)
		if err != nil {
			return nil, driver.Wrap("redislock", err)
		}
		lock, fence, metaName := b.lockNames(req.Key)
		keys = append(keys, lock, fence, metaName)
		args = append(args, req.Token, millis(req.TTL), meta)
	}
	reply, err := b.evalStrings(ctx, scriptAcquireAll, keys, args...)
	if err != nil {
		return nil, driver.Wrap("redislock", err)
	}
	if len(reply) == 2 && reply[0] == "0" {
		i, err := strconv.Atoi(reply[1])
		if err != nil || i < 1 || i > len(reqs) {
			return nil, fmt.Errorf("redislock: acquire all: reply %q", reply)
		}
		return nil, &driver.HeldError{Key: reqs[i-1].Key}
	}
	if len(reply) != len(reqs) {
		return nil, fmt.Errorf("redislock: acquire all: %d fences for %d keys", len(reply), len(reqs))
	}
	grants := make([]driver.Grant, len(reqs))
	for i, f := range reply {
		fence, err := strconv.ParseUint(f, 10, 64)
		if err != nil || fence == 0 {
			return nil, fmt.Errorf("redislock: acquire all: fence %q", f)
		}
		grants[i], _ = b.granted(driver.Grant{Fence: fence}, nil, reqs[i])
	}
	return grants, nil
}

// AcquiresTogether reports whether one script can take keys: on one
// server without replica acknowledgement, any keys; else none.
func (b *Backend) AcquiresTogether([]string) bool { return !b.st.sharded() && !b.acks() }
