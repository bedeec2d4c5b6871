package server

import (
	"maps"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// lockOf is what a caller may see of info, a lock on key (a client key):
// never its token. tenant is set in cross-tenant answers only.
func lockOf(key, tenant string, info distlock.Info) *distlockv1.Lock {
	l := &distlockv1.Lock{
		Key:    key,
		Held:   info.Held,
		Fence:  info.Fence,
		Tenant: tenant,
	}
	if info.Permits > 1 {
		l.Permits = int32(min(info.Permits, 1<<31-1))
	}
	if info.Held {
		l.Ttl = durationpb.New(info.TTL)
		l.Owner = info.Meta.Owner
		l.BusinessId = info.Meta.BusinessID
		l.Labels = maps.Clone(info.Meta.Labels)
	}
	return l
}

// expiry is the lease and the end of a grant or renewal sent at sent.
func expiry(lease time.Duration, sent time.Time) (*durationpb.Duration, *timestamppb.Timestamp) {
	return durationpb.New(lease), timestamppb.New(sent.Add(lease))
}
