package dynamolock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/dynamolock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

func TestMain(m *testing.M) {
	// Open takes credentials from the SDK's environment chain: dynalite
	// accepts any, and with these set no file and no instance metadata
	// service is ever read. The region comes from each URL or Config.
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_EC2_METADATA_DISABLED": "true",
		"AWS_CONFIG_FILE": os.DevNull, "AWS_SHARED_CREDENTIALS_FILE": os.DevNull, "AWS_REGION": "", "AWS_DEFAULT_REGION": "",
	} {
		_ = os.Setenv(k, v)
	}
	goleak.VerifyTestMain(m)
}

const region = "us-east-1"

// store is one dynalite server with a lock table.
type store struct {
	s     *testserver.Server
	table string
}

func newStore(t testing.TB) store {
	t.Helper()
	st := store{s: testserver.Dynalite(t), table: "locks"}
	if err := dynamolock.CreateTable(testContext(t, 30*time.Second), st.client(t), st.table, dynamolock.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	return st
}

// client returns a DynamoDB client of the test's own, on a transport whose
// idle connections close when the test ends.
func (st store) client(t testing.TB, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	return clientAt(t, testserver.DynamoEndpoint(st.s), opts...)
}

func clientAt(t testing.TB, endpoint string, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	tr := awshttp.NewBuildableClient().GetTransport()
	t.Cleanup(tr.CloseIdleConnections)
	return dynamodb.New(dynamodb.Options{
		Region:       region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   &http.Client{Transport: tr},
	}, opts...)
}

// open returns a backend that Open built, closed when the test ends.
func (st store) open(t testing.TB, opts ...dynamolock.Option) *dynamolock.Backend {
	return st.openAt(t, st.s.Addr(), opts...)
}

func (st store) openAt(t testing.TB, addr string, opts ...dynamolock.Option) *dynamolock.Backend {
	t.Helper()
	b, err := dynamolock.Open(testContext(t, 10*time.Second),
		"dynamodb://"+st.table+"?region="+region+"&endpoint=http://"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// over returns a backend over the caller's client c.
func (st store) over(t testing.TB, c *dynamodb.Client, opts ...dynamolock.Option) *dynamolock.Backend {
	t.Helper()
	b, err := dynamolock.New(c, st.table, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// deleteItem deletes key's item behind its holder's back.
func (st store) deleteItem(t testing.TB, key string) {
	t.Helper()
	_, err := st.client(t).DeleteItem(testContext(t, 10*time.Second), &dynamodb.DeleteItemInput{
		TableName: aws.String(st.table), Key: itemKey(key),
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestConformance(t *testing.T) {
	st := newStore(t)
	locktest.Run(t, locktest.Harness{
		NewBackend: func(t testing.TB) driver.Backend { return st.open(t) },
		DeleteKey:  st.deleteItem,
		// No notifications: a waiter polls, with the client's backoff
		// capped at 50ms, and a poll that finds the key held costs a write
		// and a read.
		NotifyLatency: 150 * time.Millisecond,
		// Waiters poll an emulator whose every conditional write is a
		// JavaScript round trip: 20 rounds per goroutine, where the
		// default 50 took 40s of a full run.
		Iterations:   20,
		StoreAddr:    st.s.Addr(),
		NewBackendAt: func(t testing.TB, addr string) driver.Backend { return st.openAt(t, addr) },
	})
}

func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var seq atomic.Int64

func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("test/%s/%d-%d", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano(), seq.Add(1))
}

// token returns a fresh 128-bit hex token.
func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
