// Package redlocktool is redlock's side of distlock's store tools: the
// doctor checks of redlock://, which inspect every node as redistool does
// a lone Redis server and judge the quorum, and no bench floor yet. The
// backend does not import it; a program that runs the tools imports it for
// its side effect:
//
//	import _ "github.com/distlock/distlock/backend/redlock/redlocktool"
package redlocktool

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/distlock/distlock/backend/redislock/redistool"
	"github.com/distlock/distlock/backend/redlock"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/migrate"
)

func init() {
	doctor.Register("redlock", "redis", Check)
	migrate.None("redlock", "a lock is a key on each node, written as it is taken")
	floor.None("redlock", "not written yet: SET NX PX on every node in parallel, granted on a majority, and the compare-and-delete script on every node would be its floor")
}

// Check is the doctor check of
// redlock://[user:password@]host:port,host:port,host:port[/db], read by
// redlock.ParseURL: each node is inspected as one independent Redis server
// (redistool.CheckNode), and the nodes that answer are judged against the
// quorum a lock needs.
func Check(ctx context.Context, u *url.URL, o doctor.Options, r *doctor.Report) error {
	cfg, err := redlock.ParseURL(u)
	if err != nil {
		return doctor.Refused(u, err)
	}
	var errs []error
	for _, n := range cfg.Nodes {
		err := redistool.CheckNode(ctx, n, o, r)
		switch {
		case errors.Is(err, doctor.ErrUnreachable):
			errs = append(errs, err)
			r.Add(doctor.Finding{Severity: doctor.Warning, Check: "node", Node: n.Client.InitAddress[0],
				Seen:        fmt.Sprintf("the node does not answer: %v", err),
				Consequence: "Redlock runs on the remaining nodes; see quorum for how many more it can lose",
				Fix:         "bring the node back, empty or with its data; one that restarts without its data must stay down for the longest lease first, or a second client can be granted a lock its holder still holds"})
		case err != nil:
			return err
		}
	}
	if len(errs) == len(cfg.Nodes) {
		return doctor.Unreachable("redlock", errors.Join(errs...))
	}
	r.Add(quorumFinding(u.Host, len(cfg.Nodes), len(cfg.Nodes)-len(errs)))
	return nil
}

// quorumFinding judges how many of n nodes answered against the majority
// every acquire and renewal needs.
func quorumFinding(node string, n, answering int) doctor.Finding {
	quorum := n/2 + 1
	f := doctor.Finding{Severity: doctor.Info, Check: "quorum", Node: node,
		Seen: fmt.Sprintf("%d nodes, %d answering, quorum %d: tolerates %d failed nodes", n, answering, quorum, n-quorum)}
	switch {
	case answering < quorum:
		f.Severity = doctor.Danger
		f.Consequence = "fewer nodes answer than a majority: no lock can be taken or renewed; holders lose their locks at the end of their validity"
		f.Fix = "bring nodes back until a majority answers"
	case answering < n:
		f.Severity = doctor.Warning
		f.Consequence = fmt.Sprintf("%d more failed nodes stop locking", answering-quorum+1)
		f.Fix = "bring the failed nodes back"
	}
	return f
}
