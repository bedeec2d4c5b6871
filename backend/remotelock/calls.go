package remotelock

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock/driver"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// calls are the service's calls for one kind of hold, a lock or a
// semaphore's permit, so that one wait loop, one bookkeeping and one
// abandon serve both.
type calls interface {
	// id is what the backend keeps a hold of req under.
	id(req driver.AcquireRequest) lockID
	// acquire asks for req with the token as request id, waiting up to wait;
	// firstTry says that no earlier call for req can have been granted, and
	// resumes that a call ending without a grant will be followed by
	// another (kinds of holds whose calls have no such flag ignore it).
	acquire(ctx context.Context, req driver.AcquireRequest, wait time.Duration, firstTry, resumes bool) (*distlockv1.AcquireResponse, error)
	// renew renews the hold of key under the service's token server.
	renew(ctx context.Context, key, server string, lease time.Duration) (*distlockv1.RenewResponse, error)
	// release frees the hold of key under the service's token server.
	release(ctx context.Context, key, server string) error
}

// lockCalls are a lock's calls. Those that do not wait go through the
// backend's batchers: acquisitions through one, renewals and releases
// through another, so that a hold's renewal or release never waits behind
// acquisition attempts (a client that gives up thousands of waits at once
// makes as many).
type lockCalls struct {
	rpc   distlockv1connect.LockServiceClient
	tries *batcher // acquisitions without a wait
	holds *batcher // renewals and releases
}

func newLockCalls(rpc distlockv1connect.LockServiceClient, timeout time.Duration) lockCalls {
	return lockCalls{rpc: rpc, tries: newBatcher(rpc, timeout), holds: newBatcher(rpc, timeout)}
}

// busy reports whether the short calls are being batched.
func (l lockCalls) busy() bool { return l.tries.busy() || l.holds.busy() }

// close ends the calls in flight and waits for them.
func (l lockCalls) close() {
	l.tries.close()
	l.holds.close()
}

func (lockCalls) id(req driver.AcquireRequest) lockID { return lockID{req.Key, req.Token} }

func (l lockCalls) acquire(ctx context.Context, req driver.AcquireRequest, wait time.Duration, firstTry, resumes bool) (*distlockv1.AcquireResponse, error) {
	m := acquireMsg(req, wait, firstTry)
	if wait <= 0 {
		res, err := l.tries.do(ctx, &distlockv1.BatchCall{Call: &distlockv1.BatchCall_Acquire{Acquire: m}})
		return res.GetAcquire(), err
	}
	m.Resumes = resumes
	resp, err := l.rpc.Acquire(ctx, connect.NewRequest(m))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func (l lockCalls) renew(ctx context.Context, key, server string, lease time.Duration) (*distlockv1.RenewResponse, error) {
	res, err := l.holds.do(ctx, &distlockv1.BatchCall{Call: &distlockv1.BatchCall_Renew{Renew: &distlockv1.RenewRequest{Key: key, Token: server, Lease: durationpb.New(lease)}}})
	return res.GetRenew(), err
}

func (l lockCalls) release(ctx context.Context, key, server string) error {
	_, err := l.holds.do(ctx, &distlockv1.BatchCall{Call: &distlockv1.BatchCall_Release{Release: &distlockv1.ReleaseRequest{Key: key, Token: server}}})
	return err
}

// permitCalls are the calls of a permit of a semaphore of limit permits.
type permitCalls struct {
	rpc   distlockv1connect.LockServiceClient
	limit int
}

// permitID keys a permit of name apart from any lock: no lock key has a
// control character.
func permitID(name, token string) lockID { return lockID{"\x00permit\x00" + name, token} }

func (permitCalls) id(req driver.AcquireRequest) lockID { return permitID(req.Key, req.Token) }

func (p permitCalls) acquire(ctx context.Context, req driver.AcquireRequest, wait time.Duration, firstTry, _ bool) (*distlockv1.AcquireResponse, error) {
	m := &distlockv1.AcquirePermitRequest{
		Name:       req.Key,
		Permits:    int32(min(p.limit, 1<<31-1)),
		Lease:      durationpb.New(req.TTL),
		Owner:      req.Meta.Owner,
		BusinessId: req.Meta.BusinessID,
		Labels:     req.Meta.Labels,
		RequestId:  req.Token,
		FirstTry:   firstTry,
	}
	if req.Permits > 1 {
		m.Count, m.Intent = int32(min(req.Permits, 1<<31-1)), req.Intent
	}
	if wait > 0 {
		m.Wait = durationpb.New(wait)
	}
	resp, err := p.rpc.AcquirePermit(ctx, connect.NewRequest(m))
	if err != nil {
		return nil, err
	}
	r := resp.Msg
	return &distlockv1.AcquireResponse{Token: r.GetToken(), Fence: r.GetFence(), Lease: r.GetLease(), ExpiresAt: r.GetExpiresAt()}, nil
}

func (p permitCalls) renew(ctx context.Context, name, server string, lease time.Duration) (*distlockv1.RenewResponse, error) {
	resp, err := p.rpc.RenewPermit(ctx, connect.NewRequest(&distlockv1.RenewPermitRequest{Name: name, Token: server, Lease: durationpb.New(lease)}))
	if err != nil {
		return nil, err
	}
	return &distlockv1.RenewResponse{Lease: resp.Msg.GetLease(), ExpiresAt: resp.Msg.GetExpiresAt()}, nil
}

func (p permitCalls) release(ctx context.Context, name, server string) error {
	_, err := p.rpc.ReleasePermit(ctx, connect.NewRequest(&distlockv1.ReleasePermitRequest{Name: name, Token: server}))
	return err
}

// rwCalls are the calls of a read-write lock's hold in mode.
type rwCalls struct {
	rpc  distlockv1connect.LockServiceClient
	mode driver.Mode
}

// rwID keys a read-write lock's hold of name apart from any lock and
// permit.
func rwID(name, token string) lockID { return lockID{"\x00rw\x00" + name, token} }

func (rwCalls) id(req driver.AcquireRequest) lockID { return rwID(req.Key, req.Token) }

func (r rwCalls) acquire(ctx context.Context, req driver.AcquireRequest, wait time.Duration, firstTry, _ bool) (*distlockv1.AcquireResponse, error) {
	m := &distlockv1.AcquireRWRequest{
		Name:       req.Key,
		Write:      r.mode == driver.Exclusive,
		Lease:      durationpb.New(req.TTL),
		Owner:      req.Meta.Owner,
		BusinessId: req.Meta.BusinessID,
		Labels:     req.Meta.Labels,
		RequestId:  req.Token,
		FirstTry:   firstTry,
		Intent:     req.Intent,
	}
	if wait > 0 {
		m.Wait = durationpb.New(wait)
	}
	resp, err := r.rpc.AcquireRW(ctx, connect.NewRequest(m))
	if err != nil {
		return nil, err
	}
	g := resp.Msg
	return &distlockv1.AcquireResponse{Token: g.GetToken(), Fence: g.GetFence(), Lease: g.GetLease(), ExpiresAt: g.GetExpiresAt()}, nil
}

func (r rwCalls) renew(ctx context.Context, name, server string, lease time.Duration) (*distlockv1.RenewResponse, error) {
	resp, err := r.rpc.RenewRW(ctx, connect.NewRequest(&distlockv1.RenewRWRequest{Name: name, Token: server, Lease: durationpb.New(lease)}))
	if err != nil {
		return nil, err
	}
	return &distlockv1.RenewResponse{Lease: resp.Msg.GetLease(), ExpiresAt: resp.Msg.GetExpiresAt()}, nil
}

func (r rwCalls) release(ctx context.Context, name, server string) error {
	_, err := r.rpc.ReleaseRW(ctx, connect.NewRequest(&distlockv1.ReleaseRWRequest{Name: name, Token: server}))
	return err
}
