package dynamolock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/dynamolock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/faultproxy"
)

// TestOpenURL: a dynamodb:// URL opens a working client; the URL's
// parameters reach the backend.
func TestOpenURL(t *testing.T) {
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	c, err := distlock.Open(ctx, "dynamodb://"+st.table+"?region="+region+"&endpoint=http://"+st.s.Addr()+
		"&connect_timeout=2s&request_timeout=3s&retention=48h")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if name := c.Backend().(driver.Namer).Name(); name != "dynamodb" {
		t.Fatalf("Name() = %q", name)
	}
}

// TestInvalidInput: every bad URL, Config and option value is an error
// matching driver.ErrInvalidOption that says what is wrong, before any
// request (the endpoints here are never dialled).
func TestInvalidInput(t *testing.T) {
	ctx := testContext(t, time.Minute)
	urls := map[string]string{
		"dynamodb://locks?endpoint=http://127.0.0.1:1":                 "no region",
		"dynamodb://locks?region=us-east-1&color=blue":                 "parameter color: distlock: invalid option: unknown",
		"dynamodb://locks?region=us-east-1&region=eu-west-1":           "given 2 times",
		"dynamodb://locks?region=us-east-1&request_timeout=0s":         "WithRequestTimeout",
		"dynamodb://locks?region=us-east-1&request_timeout=soon":       "request_timeout",
		"dynamodb://locks?region=us-east-1&connect_timeout=-1s":        "connect_timeout",
		"dynamodb://locks?region=us-east-1&retention=1m":               "WithRetention",
		"dynamodb://locks?region=us-east-1&endpoint=127.0.0.1:1":       "endpoint",
		"dynamodb://locks?region=us-east-1&endpoint=ftp://127.0.0.1:1": "endpoint",
		"dynamodb://lo?region=us-east-1":                               "table name",
		"dynamodb://locks/extra?region=us-east-1":                      "want dynamodb://TABLE",
		"dynamodb://user@locks?region=us-east-1":                       "want dynamodb://TABLE",
		"dynamodb://locks:80?region=us-east-1":                         "want dynamodb://TABLE",
		"dynamodb://?region=us-east-1":                                 "table name",
		"dynamodb://" + strings.Repeat("t", 256) + "?region=us-east-1": "table name",
	}
	for u, want := range urls {
		_, err := distlock.Open(ctx, u)
		if !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want ErrInvalidOption saying %q", u, err, want)
		}
	}
	c := clientAt(t, "http://127.0.0.1:1")
	opts := map[string]dynamolock.Option{
		"WithRequestTimeout": dynamolock.WithRequestTimeout(-time.Second),
		"WithRetention":      dynamolock.WithRetention(59 * time.Minute),
	}
	for name, o := range opts {
		if b, err := dynamolock.New(c, "locks", o); b != nil || !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), name) {
			t.Errorf("New with a bad %s: %v, %v", name, b, err)
		}
		if _, err := dynamolock.Open(ctx, "dynamodb://locks?region="+region+"&endpoint=http://127.0.0.1:1", o); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("Open with a bad %s: %v", name, err)
		}
	}
	if _, err := dynamolock.New(nil, "locks"); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("New with a nil client: %v", err)
	}
	if _, _, err := dynamolock.NewClient(ctx, dynamolock.Config{Table: "locks", Region: region, ConnectTimeout: -time.Second}); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("NewClient with a negative connect timeout: %v", err)
	}
	if err := dynamolock.CreateTable(ctx, c, "x", dynamolock.TableOptions{}); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("CreateTable with a bad name: %v", err)
	}
}

// TestUnreachable: Open of an endpoint where nothing listens fails at once
// with the dial error, with a context without deadline.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	start := time.Now()
	_, err = distlock.Open(context.Background(), "dynamodb://locks?region="+region+"&endpoint=http://"+addr)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("open of an address where nothing listens: %v; want the dial error", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("open of an address where nothing listens took %v", took)
	}
}

// TestMissingTableOrWrongSchema: Open fails, saying how to create the table
// or what is wrong with its key schema.
func TestMissingTableOrWrongSchema(t *testing.T) {
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	at := "?region=" + region + "&endpoint=http://" + st.s.Addr()
	if _, err := dynamolock.Open(ctx, "dynamodb://absent"+at); err == nil || !strings.Contains(err.Error(), "CreateTable") {
		t.Fatalf("open of a missing table: %v", err)
	}
	c := st.client(t)
	if _, err := c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("other"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := dynamolock.Open(ctx, "dynamodb://other"+at); err == nil || !strings.Contains(err.Error(), "key schema") {
		t.Fatalf("open of a table with another key: %v", err)
	}
	if err := dynamolock.CreateTable(ctx, c, "other", dynamolock.TableOptions{}); err == nil || !strings.Contains(err.Error(), "key schema") {
		t.Fatalf("CreateTable over a table with another key: %v", err)
	}
	// CreateTable over the right table keeps it, and says what Time to
	// Live is.
	if err := dynamolock.CreateTable(ctx, c, st.table, dynamolock.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if s, err := dynamolock.CheckTable(ctx, c, st.table); err != nil || s.TimeToLive {
		t.Fatalf("CheckTable: %+v, %v; want the table without Time to Live", s, err)
	}
	// dynalite has no UpdateTimeToLive: the error must say what failed.
	if err := dynamolock.CreateTable(ctx, c, st.table, dynamolock.TableOptions{TimeToLive: true}); err == nil || !strings.Contains(err.Error(), "Time to Live") {
		t.Fatalf("CreateTable with Time to Live on dynalite: %v; want the refusal of UpdateTimeToLive named", err)
	}
}

// TestClosed: every call after Close fails at once with driver.ErrClosed.
func TestClosed(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	b := st.open(t)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	key, tok := uniqueKey(t), token()
	calls := map[string]func() error{
		"Acquire": func() error {
			_, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: tok, TTL: time.Minute})
			return err
		},
		"Renew":        func() error { return b.Renew(ctx, key, tok, time.Minute) },
		"Release":      func() error { return b.Release(ctx, key, tok) },
		"Inspect":      func() error { _, err := b.Inspect(ctx, key); return err },
		"List":         func() error { _, err := b.List(ctx, key); return err },
		"ForceRelease": func() error { _, err := b.ForceRelease(ctx, key, driver.ForceOptions{}); return err },
	}
	for name, call := range calls {
		start := time.Now()
		if err := call(); !errors.Is(err, driver.ErrClosed) {
			t.Errorf("%s when closed: %v; want ErrClosed", name, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s when closed took %v", name, took)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestRequestTimeout: through a blackholed link every call fails within
// the request timeout although the caller's context has no deadline.
func TestRequestTimeout(t *testing.T) {
	st := newStore(t)
	const timeout = 300 * time.Millisecond
	p := faultproxy.Start(t, st.s.Addr())
	b := st.openAt(t, p.Addr(), dynamolock.WithRequestTimeout(timeout))
	t.Cleanup(func() { p.Restore(); _ = b.Close() })
	ctx := testContext(t, time.Minute)
	req := driver.AcquireRequest{Key: uniqueKey(t), Token: token(), TTL: time.Minute}
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	calls := map[string]func(context.Context) error{
		"Acquire": func(ctx context.Context) error {
			_, err := b.Acquire(ctx, driver.AcquireRequest{Key: uniqueKey(t), Token: token(), TTL: time.Minute})
			return err
		},
		"Renew":   func(ctx context.Context) error { return b.Renew(ctx, req.Key, req.Token, time.Minute) },
		"Release": func(ctx context.Context) error { return b.Release(ctx, req.Key, req.Token) },
		"Inspect": func(ctx context.Context) error { _, err := b.Inspect(ctx, req.Key); return err },
		"List":    func(ctx context.Context) error { _, err := b.List(ctx, "x"); return err },
		"ForceRelease": func(ctx context.Context) error {
			_, err := b.ForceRelease(ctx, req.Key, driver.ForceOptions{})
			return err
		},
	}
	for name, call := range calls {
		start := time.Now()
		err := call(context.Background())
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s through a blackholed link: %v; want the request timeout", name, err)
		}
		if took > timeout+time.Second {
			t.Errorf("%s through a blackholed link took %v, request timeout %v", name, took, timeout)
		}
	}
}

// TestListPages: List reads every page of a table larger than one Scan
// page (1 MB) and returns the held keys under the prefix, sorted.
func TestListPages(t *testing.T) {
	st := newStore(t)
	ctx := testContext(t, 2*time.Minute)
	b := st.open(t)
	prefix := uniqueKey(t) + "/"
	const n = 300 // of about 4 KB each
	big := driver.Meta{BusinessID: strings.Repeat("x", 4000)}
	var want []string
	for i := range n {
		key := fmt.Sprintf("%s%03d", prefix, n-i) // written out of order
		if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: token(), TTL: time.Minute, Meta: big}); err != nil {
			t.Fatal(err)
		}
		want = append(want, key)
	}
	released := driver.AcquireRequest{Key: prefix + "released", Token: token(), TTL: time.Minute}
	if _, err := b.Acquire(ctx, released); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, released.Key, released.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "elsewhere/" + uniqueKey(t), Token: token(), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	infos, err := b.List(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	if len(infos) != n {
		t.Fatalf("List returned %d locks, want %d", len(infos), n)
	}
	for i, info := range infos {
		if info.Key != want[i] || !info.Held || info.Meta.BusinessID != big.BusinessID {
			t.Fatalf("List[%d] = %q (held %v), want %q held with its metadata", i, info.Key, info.Held, want[i])
		}
	}
	all, err := b.List(ctx, "")
	if err != nil || len(all) != n+1 {
		t.Fatalf("List of every prefix: %d locks, %v; want %d", len(all), err, n+1)
	}
}
