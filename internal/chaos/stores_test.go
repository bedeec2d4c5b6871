//go:build chaos

package chaos

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/dynamolock"
	"github.com/distlock/distlock/backend/natslock"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/internal/testserver"
)

// deploySQLLock is the lease table on MariaDB, its tables made once.
func deploySQLLock(t *testing.T) *deployment {
	return sqlLockOn(t, testserver.MariaDB(t, durableMariaDB))
}

// sqlLockOn is the lease table on the MariaDB server s, its tables made
// once.
func sqlLockOn(t *testing.T, s *testserver.Server) *deployment {
	url := func(addr string) string { return "mysql+table://root@" + addr + "/distlock" }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := distlock.Open(ctx, url(s.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Backend().(*sqllock.Backend).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return single(s, url)
}

// deployDynamo is dynalite (in memory: no restart applies) with the lock
// table made once; the clients take their credentials from the
// environment, as the SDK does.
func deployDynamo(t *testing.T) *deployment {
	return dynamoOn(t, testserver.Dynalite(t))
}

// dynamoOn is the lock table on the dynalite server s, as deployDynamo.
func dynamoOn(t *testing.T, s *testserver.Server) *deployment {
	t.Setenv("AWS_ACCESS_KEY_ID", "chaos")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "chaos")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	db := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String(testserver.DynamoEndpoint(s)),
		Credentials: credentials.NewStaticCredentialsProvider("chaos", "chaos", ""), HTTPClient: &http.Client{Transport: tr}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dynamolock.CreateTable(ctx, db, "locks", dynamolock.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	return single(s, func(addr string) string {
		return "dynamodb://locks?region=us-east-1&endpoint=http://" + addr
	})
}

// deployNATS is one nats-server with JetStream on file storage, and the
// bucket natslock needs made once.
func deployNATS(t *testing.T) *deployment {
	s := testserver.NATS(t)
	nc, err := nats.Connect(testserver.NATSURL(s))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := natslock.CreateBucket(ctx, js, "chaos", natslock.BucketOptions{}); err != nil {
		t.Fatal(err)
	}
	return single(s, func(addr string) string { return "nats://" + addr + "?bucket=chaos" })
}
