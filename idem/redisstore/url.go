package redisstore

import (
	"context"
	"net/url"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/idem"
)

func init() {
	for _, scheme := range []string{"redis", "rediss", "redis-sentinel", "redis-cluster"} {
		idem.RegisterURL(scheme, openURL)
	}
}

// openURL is idem.OpenURL's way in: a Store over a client of its own on a
// Redis URL as redislock reads it (one node, a Sentinel master or a
// Cluster), with the same addresses, credentials, database and TLS.
func openURL(_ context.Context, u *url.URL) (idem.Store, func(), error) {
	cfg, err := redislock.ParseURL(u)
	if err != nil {
		return nil, nil, err
	}
	o := cfg.Client
	client := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:            o.InitAddress,
		Username:         o.Username,
		Password:         o.Password,
		DB:               o.SelectDB,
		TLSConfig:        o.TLSConfig,
		MasterName:       o.Sentinel.MasterSet,
		SentinelUsername: o.Sentinel.Username,
		SentinelPassword: o.Sentinel.Password,
		IsClusterMode:    u.Scheme == "redis-cluster",
		DialTimeout:      cfg.DialTimeout(),
	})
	s, err := New(client)
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return s, func() { _ = client.Close() }, nil
}
