package testserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TestDynalite: the server answers DynamoDB's API at once after CreateTable,
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
