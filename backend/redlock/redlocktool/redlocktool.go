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
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/distlock/distlock/backend/redislock/redistool"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
)

func init() {
	doctor.Register("redlock", "redis", Check)
	floor.None("redlock", "not written yet: SET NX PX on every node in parallel, granted on a majority, and the compare-and-delete script on every node would be its floor")
}

// Check is the doctor check of
// redlock://[user:password@]host:port,host:port,host:port[/db]: each node
// is inspected as one independent Redis server (redistool.CheckNode), and
// the nodes that answer are judged against the quorum a lock needs.
func Check(ctx context.Context, u *url.URL, o doctor.Options, r *doctor.Report) error {
	nodes, err := nodeURLs(u)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range nodes {
		err := redistool.CheckNode(ctx, n, o, r)
		switch {
		case errors.Is(err, doctor.ErrUnreachable):
			errs = append(errs, err)
			r.Add(doctor.Finding{Severity: doctor.Warning, Check: "node", Node: n.Host,
				Seen:        fmt.Sprintf("the node does not answer: %v", err),
				Consequence: "Redlock runs on the remaining nodes; see quorum for how many more it can lose",
				Fix:         "bring the node back, empty or with its data; one that restarts without its data must stay down for the longest lease first, or a second client can be granted a lock its holder still holds"})
		case err != nil:
			return err
		}
	}
	if len(errs) == len(nodes) {
		return doctor.Unreachable("redlock", errors.Join(errs...))
	}
	r.Add(quorumFinding(u.Host, len(nodes), len(nodes)-len(errs)))
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

// nodeURLs returns a redis:// URL of each node of a redlock URL, with the
// URL's credentials and database, as redlock.Open builds them; the query
// parameters are the backend's and its client's, and change nothing
// checked. It refuses the URLs redlock.Open refuses: a node without a
// port, a node given twice, an even number of nodes or fewer than three.
func nodeURLs(u *url.URL) ([]*url.URL, error) {
	addrs := strings.Split(u.Host, ",")
	for i, a := range addrs {
		if h, p, err := net.SplitHostPort(a); err != nil || h == "" || p == "" {
			return nil, doctor.Invalid(u, "node %q: want host:port", a)
		}
		if slices.Contains(addrs[:i], a) {
			return nil, doctor.Invalid(u, "node %s given twice: the nodes must be independent", a)
		}
	}
	if n := len(addrs); n < 3 || n%2 == 0 {
		return nil, doctor.Invalid(u, "%d nodes: want an odd number, at least 3", n)
	}
	db := strings.Trim(u.Path, "/")
	if _, err := strconv.Atoi(db); db != "" && err != nil {
		return nil, doctor.Invalid(u, "database %q is not a number", db)
	}
	nodes := make([]*url.URL, len(addrs))
	for i, a := range addrs {
		nodes[i] = &url.URL{Scheme: "redis", User: u.User, Host: a}
		if db != "" {
			nodes[i].Path = "/" + db
		}
	}
	return nodes, nil
}
