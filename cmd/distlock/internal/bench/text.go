package bench

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"
)

// WriteText writes rep as the tables a person reads: the counts of each
// side, the latency percentiles, the outcomes by kind, and with a floor
// how distlock compares with it.
func (rep *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	fmt.Fprintf(w, "%s  concurrency %d  clients %d  keys %d  contention %g  lease %s  wait %s  hold %s  think %s\n",
		rep.Backend, rep.Workers, rep.Clients, rep.Keys, rep.Contention, rep.Lease, rep.Wait, rep.Hold, rep.Think)
	if rep.Interrupted {
		fmt.Fprintln(w, "interrupted: the figures cover what ran until then")
	}
	if rep.CloseTimedOut {
		fmt.Fprintf(w, "closing the clients took longer than %v: what they still hold expires at its lease (%s)\n", ReleaseGrace, rep.Lease)
	}
	if rep.Stalled {
		fmt.Fprintf(w, "stopped: the store answered nothing for %v; the figures cover what ran until then\n", StallLimit)
	}
	p("\n\telapsed\tattempts\tacquired\tnot acquired\terrors\tops/s\t\n")
	for _, s := range rep.Sides {
		p("%s\t%s\t%d\t%d\t%d\t%d\t%.0f\t\n", s.Name, roundSig(time.Duration(s.ElapsedSeconds*1e9)),
			s.Attempts, s.Acquired, s.NotAcquired, s.Errors, s.OpsPerSecond)
	}
	p("\nlatency\tp50\tp90\tp99\tp999\tmax\tcount\t\n")
	for _, s := range rep.Sides {
		for _, m := range []struct {
			name string
			l    Latency
		}{{"acquire", s.Acquire}, {"wait", s.Wait}, {"release", s.Release}} {
			if s.Name == "floor" && m.name == "wait" {
				continue // the floor tries once: it never waits
			}
			p("%s %s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", s.Name, m.name, us(m.l.P50), us(m.l.P90), us(m.l.P99), us(m.l.P999), us(m.l.Max), m.l.Count)
		}
	}
	rep.writeKinds(p)
	if err := tw.Flush(); err != nil {
		return err
	}
	return rep.writeTail(w)
}

// writeKinds writes the outcomes other than a clean acquire and release.
func (rep *Report) writeKinds(p func(string, ...any)) {
	p("\noutcome\t")
	for _, s := range rep.Sides {
		p("%s\t", s.Name)
	}
	p("\n")
	row := func(name string, v func(Side) int64) {
		p("%s\t", name)
		for _, s := range rep.Sides {
			p("%d\t", v(s))
		}
		p("\n")
	}
	row("not acquired", func(s Side) int64 { return s.NotAcquired })
	kinds := map[string]int64{KindStore: 0, KindCanceled: 0}
	for _, s := range rep.Sides {
		for k, n := range s.ErrorsByKind {
			kinds[k] += n
		}
	}
	for _, k := range sortedKinds(kinds) {
		row("error: "+k, func(s Side) int64 { return s.ErrorsByKind[k] })
	}
	row("lost after acquire", func(s Side) int64 { return s.Lost })
	row("release failed", func(s Side) int64 { return s.ReleaseErrors })
}

// writeTail writes the first error of each kind and the ratio.
func (rep *Report) writeTail(w io.Writer) error {
	for _, s := range rep.Sides {
		for _, k := range sortedKinds(countsOf(s.FirstErrors)) {
			fmt.Fprintf(w, "first %s error (%s): %s\n", k, s.Name, s.FirstErrors[k])
		}
	}
	if r := rep.Ratio; r != nil {
		fmt.Fprintf(w, "\ndistlock/floor: throughput %s, p50 acquire latency %s\n", times(r.Throughput), times(r.AcquireP50))
	}
	_, err := fmt.Fprintln(w)
	return err
}

// times formats a ratio; 0 means a side measured nothing to compare.
func times(r float64) string {
	if r == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", r)
}

// countsOf returns the keys of m as a count map, for sortedKinds.
func countsOf(m map[string]string) map[string]int64 {
	c := make(map[string]int64, len(m))
	for k := range m {
		c[k] = 0
	}
	return c
}

// us formats microseconds as a duration of three significant digits.
func us(v float64) string {
	return roundSig(time.Duration(v * 1e3))
}

// roundSig formats d with three significant digits.
func roundSig(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	unit := time.Duration(math.Pow10(max(0, int(math.Floor(math.Log10(float64(d))))-2)))
	return (d.Round(unit)).String()
}
