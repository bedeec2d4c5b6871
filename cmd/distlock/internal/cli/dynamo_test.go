package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/distlock/distlock/backend/dynamolock"
	"github.com/distlock/distlock/internal/testserver"
)

// distlock run --backend dynamodb://... runs its command under the lock:
// while it runs the key's item has a holder and another run is refused;
// after it, the item is released.
func TestRunDynamoDB(t *testing.T) {
	bin := buildDistlock(t)
	s := testserver.Dynalite(t)
	db := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(testserver.DynamoEndpoint(s)),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dynamolock.CreateTable(ctx, db, "locks", dynamolock.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	backend := "dynamodb://locks?region=us-east-1&endpoint=" + testserver.DynamoEndpoint(s)
	env := []string{"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true"}
	holder := func() string {
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("locks"), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{dynamolock.KeyAttribute: &types.AttributeValueMemberS{Value: "nightly"}}})
		if err != nil {
			t.Fatal(err)
		}
		token, _ := out.Item["token"].(*types.AttributeValueMemberS)
		if token == nil {
			return ""
		}
		return token.Value
	}

	dir := t.TempDir()
	fence := filepath.Join(dir, "fence")
	p := startDistlock(t, bin, env, "", "run", "--backend", backend, "--key", "nightly", "--owner", "job@web-1", "--",
		"sh", "-c", waitingJob(dir, `echo "$DISTLOCK_FENCE" > `+fence))
	awaitStart(t, dir)
	if holder() == "" {
		t.Error("the command runs and the item has no holder")
	}
	r := runDistlock(t, bin, env, "run", "--backend", backend, "--key", "nightly", "--", "false")
	if r.code != ExitNotAcquired {
		t.Errorf("a second run while the first holds: exit %d, want %d; stderr: %s", r.code, ExitNotAcquired, r.stderr)
	}
	wantOneLine(t, r, `"nightly" is held by job@web-1 (fence `)
	letGo(t, dir)
	if r := p.mustWait(t, processTimeout); r.code != 0 || r.stderr != "" {
		t.Fatalf("distlock run exited %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	if f := strings.TrimSpace(readFile(t, fence)); f == "" || f == "0" {
		t.Errorf("DISTLOCK_FENCE %q, want the grant's fence", f)
	}
	if h := holder(); h != "" {
		t.Errorf("after the run the item is still held by %q", h)
	}
}
