package doctor

import (
	"context"
	"fmt"
	"time"
)

// ClockTolerance is the clock offset between a server and this machine,
// beyond the measurement's own uncertainty, above which the clock check is
// a Warning: synchronised clocks agree within milliseconds.
const ClockTolerance = 500 * time.Millisecond

// clockReading is a server's clock against this machine's.
type clockReading struct {
	offset      time.Duration // server minus local; positive: the server is ahead
	uncertainty time.Duration // half the round trip plus the server clock's resolution
}

// readClock asks the server for its time with read and compares it with
// the local clock at the middle of the round trip. resolution is the
// precision of the server's answer.
func readClock(ctx context.Context, resolution time.Duration, read func(context.Context) (time.Time, error)) (clockReading, error) {
	start := time.Now()
	server, err := read(ctx)
	if err != nil {
		return clockReading{}, err
	}
	rtt := time.Since(start)
	mid := start.Add(rtt / 2)
	return clockReading{offset: server.Sub(mid), uncertainty: rtt/2 + resolution}, nil
}

// skewed reports whether the offset is beyond the tolerance even at the
// most favourable end of the uncertainty.
func (c clockReading) skewed() bool {
	return c.offset.Abs()-c.uncertainty > ClockTolerance
}

// String says how far and which way the server's clock is off.
func (c clockReading) String() string {
	way := "ahead of"
	if c.offset < 0 {
		way = "behind"
	}
	return fmt.Sprintf("server clock %v %s this machine's (±%v)", c.offset.Abs().Round(time.Microsecond), way, c.uncertainty.Round(time.Microsecond))
}

// ClockFinding measures the clock of the server node with read, which
// returns the server's time to within resolution, and returns the finding:
// Info within ClockTolerance, else a Warning with the store's consequence.
// A clock that cannot be read is a Warning too.
func ClockFinding(ctx context.Context, node string, resolution time.Duration, read func(context.Context) (time.Time, error), consequence string) Finding {
	c, err := readClock(ctx, resolution, read)
	if err != nil {
		return Unread("clock", node, err, "compare the server's clock with a reference by hand (chronyc tracking, timedatectl)")
	}
	f := Finding{Severity: Info, Check: "clock", Node: node, Seen: c.String()}
	if c.skewed() {
		f.Severity = Warning
		f.Consequence = consequence
		f.Fix = "synchronise the server's clock (chrony or systemd-timesyncd with a reachable NTP source), slewing rather than stepping it"
	}
	return f
}
