package zktool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/distlock/distlock/backend/zklock"
	"github.com/distlock/distlock/storetool/doctor"
)

// zkProbeLow and zkProbeHigh are session timeouts outside any server's
// bounds, asked for to learn the bounds from what the server grants.
const (
	zkProbeLow  = time.Millisecond
	zkProbeHigh = 24 * time.Hour
)

// checkZooKeeper inspects the servers of zk://HOST:PORT[,HOST:PORT...]/ROOT,
// read by zklock.ParseURL: whether they serve sessions, their mode, and the
// session timeout they grant against the one zklock asks for.
func checkZooKeeper(ctx context.Context, u *url.URL, o doctor.Options, r *doctor.Report) error {
	cfg, err := zklock.ParseURL(u)
	if err != nil {
		return doctor.Refused(u, err)
	}
	servers, asked := cfg.Servers, cfg.SessionTimeout()
	var errs []error
	for _, s := range servers {
		b, err := zkBounds(ctx, s, asked, o.Timeout)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s, err))
			continue
		}
		r.Add(b.finding(s, o.Lease))
		zkModes(ctx, servers, o.Timeout, r)
		return nil
	}
	return doctor.Unreachable("zookeeper", errors.Join(errs...))
}

// zkSessionBounds is what one server grants.
type zkSessionBounds struct {
	asked, granted, min, max time.Duration
}

// zkBounds opens three sessions on server: with the timeout zklock asks
// for, and with ones below and above any bounds, which the server clamps to
// its minimum and maximum (2 and 20 ticks unless zoo.cfg sets them).
func zkBounds(ctx context.Context, server string, asked, timeout time.Duration) (zkSessionBounds, error) {
	b := zkSessionBounds{asked: asked}
	for _, p := range []struct {
		ask time.Duration
		got *time.Duration
	}{{asked, &b.granted}, {zkProbeLow, &b.min}, {zkProbeHigh, &b.max}} {
		d, err := zkNegotiate(ctx, server, p.ask, timeout)
		if err != nil {
			return b, err
		}
		*p.got = d
	}
	return b, nil
}

// finding judges the granted timeout against the asked one. zklock reports
// its locks lost once disconnected for a sixth of the timeout it asked for;
// the server may expire the session a third of the granted timeout after
// the client notices the silence (go-zookeeper notices after two thirds of
// the granted timeout). Granting half or less of what was asked therefore
// lets another client be granted a lock before its holder is told.
func (b zkSessionBounds) finding(server string, lease time.Duration) doctor.Finding {
	f := doctor.Finding{Check: "session-timeout", Node: server, Severity: doctor.Info,
		Seen: fmt.Sprintf("session timeout asked %v, granted %v; the server grants %v to %v (tickTime about %v if the bounds are the defaults of 2 and 20 ticks); a holder that dies keeps its locks until its session expires, or for its lease (%v) once someone waits",
			b.asked, b.granted, b.min, b.max, b.max/20, lease)}
	fix := fmt.Sprintf("ask for a timeout within %v to %v (session_timeout in the URL, zklock.WithSessionTimeout), or widen minSessionTimeout/maxSessionTimeout in zoo.cfg", b.min, b.max)
	switch {
	case b.granted <= b.asked/2:
		f.Severity = doctor.Danger
		f.Consequence = fmt.Sprintf("zklock reports its locks lost %v after the client notices a disconnection (a sixth of what it asked for), but the server can expire the session, and grant its locks to others, %v after that (a third of what it granted): a second client can hold a lock before its holder is told", b.asked/6, (b.granted / 3).Round(time.Millisecond))
		f.Fix = fix
	case b.granted < b.asked:
		f.Severity = doctor.Warning
		f.Consequence = fmt.Sprintf("zklock reports its locks lost %v after the client notices a disconnection, and the server can expire the session %v after it: the margin that tells a holder before anyone else is granted is %v instead of %v", (b.asked / 6).Round(time.Millisecond), (b.granted / 3).Round(time.Millisecond), (b.granted/3 - b.asked/6).Round(time.Millisecond), (b.asked / 6).Round(time.Millisecond))
		f.Fix = fix
	}
	return f
}

// zkModes reports each server's version and mode from the four-letter
// word srvr, which the server may not allow (4lw.commands.whitelist).
func zkModes(ctx context.Context, servers []string, timeout time.Duration, r *doctor.Report) {
	for _, s := range servers {
		f := doctor.Finding{Severity: doctor.Info, Check: "mode", Node: s}
		fields, err := zkSrvr(ctx, s, timeout)
		switch mode := fields["Mode"]; {
		case err != nil || mode == "":
			f.Seen = fmt.Sprintf("srvr not answered (%v); allow it with 4lw.commands.whitelist=srvr to see the mode", errors.Join(err, errors.New("no Mode in the answer")))
		case mode == "standalone":
			f.Seen = fmt.Sprintf("ZooKeeper %s, standalone: while this server is down no lock can be taken or renewed", fields["Zookeeper version"])
		default:
			f.Seen = fmt.Sprintf("ZooKeeper %s, %s of an ensemble", fields["Zookeeper version"], mode)
		}
		r.Add(f)
	}
}

// zkSrvr sends srvr to server and returns the fields of its answer.
func zkSrvr(ctx context.Context, server string, timeout time.Duration) (map[string]string, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte("srvr")); err != nil {
		return nil, err
	}
	answer, err := io.ReadAll(io.LimitReader(c, 64<<10))
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(answer), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if len(fields) == 0 {
		return nil, fmt.Errorf("answered %q", answer)
	}
	return fields, nil
}

// zkNegotiate opens a session on server asking for timeout ask, returns
// the timeout the server granted, and closes the session. It speaks the
// connect handshake itself because go-zookeeper does not expose the
// negotiated timeout.
func zkNegotiate(ctx context.Context, server string, ask, timeout time.Duration) (time.Duration, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	// ConnectRequest: protocolVersion int32, lastZxidSeen int64, timeOut
	// int32, sessionId int64, passwd (int32 length + 16 bytes), readOnly.
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, uint32(min(ask.Milliseconds(), math.MaxInt32)))
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, 16)
	req = append(req, make([]byte, 16)...)
	req = append(req, 0)
	resp, err := zkExchange(c, req)
	if err != nil {
		return 0, fmt.Errorf("connect handshake: %w", errors.Join(err, ctx.Err()))
	}
	// ConnectResponse: protocolVersion int32, timeOut int32, sessionId int64, ...
	if len(resp) < 16 || binary.BigEndian.Uint64(resp[8:16]) == 0 {
		return 0, errors.New("connect handshake: the server granted no session (not serving yet, or out of its quorum)")
	}
	granted := time.Duration(int32(binary.BigEndian.Uint32(resp[4:8]))) * time.Millisecond
	// closeSession: xid 1, opcode -11; the answer only confirms it.
	closeReq := binary.BigEndian.AppendUint32(nil, 1)
	closeReq = binary.BigEndian.AppendUint32(closeReq, 0xFFFFFFF5) // -11 in two's complement
	_, _ = zkExchange(c, closeReq)
	return granted, nil
}

// zkExchange writes one length-prefixed packet and reads one back.
func zkExchange(c net.Conn, body []byte) ([]byte, error) {
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)); err != nil {
		return nil, err
	}
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > 1<<20 {
		return nil, fmt.Errorf("reply of %d bytes: not ZooKeeper", size)
	}
	resp := make([]byte, size)
	_, err := io.ReadFull(c, resp)
	return resp, err
}
