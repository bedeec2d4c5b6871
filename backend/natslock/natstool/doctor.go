package natstool

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/distlock/distlock/backend/natslock"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/migrate"
)

// checkNATS inspects nats://...?bucket=B: that JetStream is on and new
// enough for per-key time to live, and the bucket's stream: there at
// all, per-key time to live and roll-ups on, storage, replicas and
// history.
func checkNATS(ctx context.Context, u *url.URL, o doctor.Options, r *doctor.Report) error {
	cfg, err := natslock.ParseURL(u)
	if err != nil {
		return doctor.Refused(u, err)
	}
	cfg.ConnectTimeout = o.Timeout
	nc, err := natslock.Connect(ctx, cfg)
	if err != nil {
		return doctor.Unreachable("nats "+u.Host, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return doctor.Unreachable("nats "+u.Host, err)
	}
	node := nc.ConnectedServerName()
	actx, cancel := context.WithTimeout(ctx, o.Timeout)
	info, err := js.AccountInfo(actx)
	cancel()
	f, ok := jetStreamFinding(node, info, err)
	r.Add(f)
	if !ok {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, o.Timeout)
	s, err := js.Stream(sctx, "KV_"+cfg.Bucket)
	cancel()
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		r.Add(doctor.Finding{Severity: doctor.Danger, Check: "bucket", Node: node,
			Seen:        fmt.Sprintf("no Key-Value bucket %q", cfg.Bucket),
			Consequence: "every lock operation fails, and distlock cannot open the store",
			Fix:         fmt.Sprintf("create it: %s, or natslock.CreateBucket", migrate.Command(r.URL))})
		return nil
	case err != nil:
		r.Add(doctor.Unread("bucket", node, err, "nats kv info "+cfg.Bucket))
		return nil
	}
	for _, f := range bucketFindings(cfg.Bucket, s.CachedInfo().Config, o) {
		r.Add(f)
	}
	return nil
}

// jetStreamFinding judges the account's JetStream: on, and of API level 1
// or more (nats-server 2.11), which per-key time to live needs. It reports
// false if the bucket cannot be checked further.
func jetStreamFinding(node string, info *jetstream.AccountInfo, err error) (doctor.Finding, bool) {
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return doctor.Finding{Severity: doctor.Danger, Check: "jetstream", Node: node, Seen: err.Error(),
			Consequence: "natslock keeps its locks in a JetStream Key-Value bucket: every lock operation fails",
			Fix:         "enable JetStream on the servers (jetstream { store_dir: ... }) and for the account"}, false
	case err != nil:
		return doctor.Unread("jetstream", node, err, "nats account info"), false
	case info.API.Level < 1:
		return doctor.Finding{Severity: doctor.Danger, Check: "jetstream", Node: node,
			Seen:        fmt.Sprintf("JetStream API level %d: a server older than 2.11", info.API.Level),
			Consequence: "no per-key time to live: a bucket for natslock cannot be made, and an abandoned lock would never expire",
			Fix:         "upgrade every server to nats-server 2.11 or later"}, false
	}
	return doctor.Finding{Severity: doctor.Info, Check: "jetstream", Node: node,
		Seen: fmt.Sprintf("JetStream on, API level %d: per-key time to live supported", info.API.Level)}, true
}

// bucketFindings judges the bucket's stream.
func bucketFindings(bucket string, c jetstream.StreamConfig, o doctor.Options) []doctor.Finding {
	node := "bucket " + bucket
	var fs []doctor.Finding
	if c.AllowMsgTTL {
		fs = append(fs, doctor.Finding{Severity: doctor.Info, Check: "ttl", Node: node,
			Seen: fmt.Sprintf("per-key time to live on, expiry markers kept %v", c.SubjectDeleteMarkerTTL)})
	} else {
		fs = append(fs, doctor.Finding{Severity: doctor.Danger, Check: "ttl", Node: node,
			Seen:        "per-key time to live off (made without LimitMarkerTTL)",
			Consequence: "natslock refuses the bucket: a hold could not expire in the store, so an abandoned lock would be held for ever",
			Fix:         "make another bucket with natslock.CreateBucket (the setting cannot be turned on in place by the Key-Value API), and point the URL at it"})
	}
	if !c.AllowRollup {
		fs = append(fs, doctor.Finding{Severity: doctor.Danger, Check: "rollup", Node: node,
			Seen:        "roll-ups denied",
			Consequence: "natslock refuses the bucket: a release purges its key with a roll-up",
			Fix:         "make another bucket with natslock.CreateBucket"})
	}
	storage := doctor.Finding{Severity: doctor.Info, Check: "storage", Node: node, Seen: "file storage: holds and fences survive a restart"}
	if c.Storage == jetstream.MemoryStorage {
		storage = doctor.Finding{Severity: doctor.Warning, Check: "storage", Node: node, Seen: "memory storage",
			Consequence: "a restart of every replica forgets every lock, which another client can then take while its holder works on, and fences start again from 1",
			Fix:         "make the bucket with file storage (natslock.CreateBucket's default)"}
	}
	fs = append(fs, storage)
	replicas := doctor.Finding{Severity: doctor.Info, Check: "replicas", Node: node,
		Seen: fmt.Sprintf("%d replicas: a minority of servers may be lost", c.Replicas)}
	if c.Replicas < 3 {
		replicas = doctor.Finding{Severity: doctor.Warning, Check: "replicas", Node: node,
			Seen:        fmt.Sprintf("%d replica(s)", max(c.Replicas, 1)),
			Consequence: "while a server that keeps the bucket is down, no lock can be taken, renewed or released (with 2, no quorum); held locks then run out",
			Fix:         "on a cluster, make the bucket with natslock.CreateBucket and BucketOptions{Replicas: 3}"}
	}
	fs = append(fs, replicas)
	if c.MaxMsgsPerSubject != 1 && c.SubjectDeleteMarkerTTL > o.Lease {
		fs = append(fs, doctor.Finding{Severity: doctor.Warning, Check: "history", Node: node,
			Seen:        fmt.Sprintf("history %d with expiry markers kept %v", c.MaxMsgsPerSubject, c.SubjectDeleteMarkerTTL),
			Consequence: fmt.Sprintf("the server keeps every hold at least as long as its markers (%v), not the lease (%v): an abandoned lock blocks the key that long", c.SubjectDeleteMarkerTTL, o.Lease),
			Fix:         "make the bucket with history 1 (natslock.CreateBucket)"})
	}
	return fs
}
