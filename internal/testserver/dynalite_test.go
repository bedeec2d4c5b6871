package testserver

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TestDynalite: the server answers DynamoDB's API once a new table is active,
// keeps nothing across a restart (it runs in memory), and answers nothing
// while paused.
func TestDynalite(t *testing.T) {
	t.Parallel()
	s := Dynalite(t)
	db := dynamodb.New(dynamodb.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(DynamoEndpoint(s)),
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		RetryMaxAttempts: 1,
	})
	ctx := ctxTimeout(t, 30_000)
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("tbl"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("k"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("k"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}); err != nil {
		t.Fatal(err)
	}
	// As with DynamoDB, a table is usable once ACTIVE: dynalite makes it so
	// on its next turn, which a request sent at once may come before.
	if err := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
	}).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("tbl")}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	put := &dynamodb.PutItemInput{
		TableName:           aws.String("tbl"),
		Item:                map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: "a"}},
		ConditionExpression: aws.String("attribute_not_exists(k)"),
	}
	if _, err := db.PutItem(ctx, put); err != nil {
		t.Fatalf("a write right after CreateTable: %v", err)
	}
	var refused *types.ConditionalCheckFailedException
	if _, err := db.PutItem(ctx, put); !errors.As(err, &refused) {
		t.Fatalf("a write whose condition fails: %v; want ConditionalCheckFailedException", err)
	}
	s.Restart()
	out, err := db.ListTables(ctx, &dynamodb.ListTablesInput{})
	if err != nil || len(out.TableNames) != 0 {
		t.Fatalf("tables after a restart: %v, %v; want none", out, err)
	}
	s.Pause()
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := db.ListTables(pctx, &dynamodb.ListTablesInput{}); err == nil {
		t.Fatal("a paused server answered")
	}
	s.Resume()
	if _, err := db.ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Fatal(err)
	}
}

// TestDynaliteSurvivesAbortedRequest: a client that hangs up in the middle
// of sending a request, as an SDK does when its context ends, leaves the
// server up for the next one.
func TestDynaliteSurvivesAbortedRequest(t *testing.T) {
	t.Parallel()
	s := Dynalite(t)
	for range 3 {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"Table")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // not synchronisation: let the server start reading the body
		if err := conn.Close(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // not synchronisation: a crash would take this long at most
	if s.crashed() {
		t.Fatalf("dynalite exited after an aborted request; log:\n%s", s.logTail())
	}
	if err := exchange(ctxTimeout(t, 5_000), s.Addr(), []byte("GET / HTTP/1.0\r\n\r\n"), []byte(" 200 OK")); err != nil {
		t.Fatalf("after aborted requests: %v", err)
	}
}
