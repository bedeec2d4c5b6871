package dynamotool

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/dynamolock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/doctor/doctortest"
	"github.com/distlock/distlock/storetool/migrate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// dynamoEnv gives the SDK's credential chain keys that dynalite accepts, so
// that it asks no instance metadata service.
func dynamoEnv(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// dynalite starts dynalite and returns a client of it and the dynamodb://
// URL of table there.
func dynalite(t *testing.T, table string) (*dynamodb.Client, string) {
	t.Helper()
	dynamoEnv(t)
	s := testserver.Dynalite(t)
	db := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(testserver.DynamoEndpoint(s)),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	return db, "dynamodb://" + table + "?region=us-east-1&endpoint=" + testserver.DynamoEndpoint(s)
}

// createTable makes a table keyed by the given attributes (name, type S or
// N; the first the partition key, a second the sort key) and waits until it
// is active.
func createTable(t *testing.T, db *dynamodb.Client, in *dynamodb.CreateTableInput, keys ...string) {
	t.Helper()
	for i := 0; i < len(keys); i += 2 {
		kt := types.KeyTypeHash
		if i > 0 {
			kt = types.KeyTypeRange
		}
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String(keys[i]), AttributeType: types.ScalarAttributeType(keys[i+1])})
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{AttributeName: aws.String(keys[i]), KeyType: kt})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.CreateTable(ctx, in); err != nil {
		t.Fatal(err)
	}
	// A new table is usable once ACTIVE, on dynalite's next turn.
	if err := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
	}).Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestDynamoDBGoodTable(t *testing.T) {
	db, u := dynalite(t, "locks")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dynamolock.CreateTable(ctx, db, "locks", dynamolock.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	r := doctortest.Run(t, u+"&request_timeout=2s", doctor.Options{})
	doctortest.Clean(t, r)
	if r.Store != "dynamodb" {
		t.Errorf("store %q, want dynamodb", r.Store)
	}
	doctortest.Want(t, r, "key-schema", doctor.Info, "key schema lock_key (HASH, S): as dynamolock needs")
	doctortest.Want(t, r, "table-status", doctor.Info, "status ACTIVE")
	doctortest.Want(t, r, "capacity", doctor.Info, "PAY_PER_REQUEST")
	// dynalite answers DescribeTimeToLive with DISABLED, always.
	doctortest.Want(t, r, "time-to-live", doctor.Info, "Time to Live DISABLED: released and abandoned items stay")
}

func TestDynamoDBLowWriteCapacity(t *testing.T) {
	db, u := dynalite(t, "small")
	createTable(t, db, &dynamodb.CreateTableInput{TableName: aws.String("small"),
		ProvisionedThroughput: &types.ProvisionedThroughput{ReadCapacityUnits: aws.Int64(10), WriteCapacityUnits: aws.Int64(2)}},
		dynamolock.KeyAttribute, "S")
	f := doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "capacity", doctor.Warning, "PROVISIONED, 10 read and 2 write capacity units")
	if !strings.Contains(f.Consequence, "past the lease loses its lock") {
		t.Errorf("consequence: %s", f.Consequence)
	}

	createTable(t, db, &dynamodb.CreateTableInput{TableName: aws.String("big"),
		ProvisionedThroughput: &types.ProvisionedThroughput{ReadCapacityUnits: aws.Int64(5), WriteCapacityUnits: aws.Int64(5)}},
		dynamolock.KeyAttribute, "S")
	doctortest.Want(t, doctortest.Run(t, strings.Replace(u, "small", "big", 1), doctor.Options{}), "capacity", doctor.Info, "PROVISIONED, 5 read and 5 write capacity units")
}

func TestDynamoDBMissingTable(t *testing.T) {
	_, u := dynalite(t, "nosuch")
	r := doctortest.Run(t, u, doctor.Options{})
	f := doctortest.Want(t, r, "table", doctor.Danger, `no table "nosuch"`)
	if !strings.Contains(f.Fix, migrate.Command(u)) || !strings.Contains(f.Fix, "dynamolock.CreateTable") || !strings.Contains(f.Fix, "aws dynamodb create-table --table-name nosuch") {
		t.Errorf("fix: %s", f.Fix)
	}
	if len(r.Findings) != 1 {
		t.Errorf("findings beyond the missing table:\n%s", doctortest.Dump(r))
	}
}

func TestDynamoDBWrongKeySchema(t *testing.T) {
	db, u := dynalite(t, "numbers")
	pay := func(name string) *dynamodb.CreateTableInput {
		return &dynamodb.CreateTableInput{TableName: aws.String(name), BillingMode: types.BillingModePayPerRequest}
	}
	createTable(t, db, pay("numbers"), dynamolock.KeyAttribute, "N")
	createTable(t, db, pay("renamed"), "id", "S")
	createTable(t, db, pay("sorted"), dynamolock.KeyAttribute, "S", "at", "N")
	for table, seen := range map[string]string{
		"numbers": "key schema lock_key (HASH, N)",
		"renamed": "key schema id (HASH, S)",
		"sorted":  "key schema lock_key (HASH, S), at (RANGE, N)",
	} {
		f := doctortest.Want(t, doctortest.Run(t, strings.Replace(u, "numbers", table, 1), doctor.Options{}), "key-schema", doctor.Danger, seen)
		if !strings.Contains(f.Consequence, "every lock operation fails") {
			t.Errorf("%s: consequence: %s", table, f.Consequence)
		}
	}
}

// TestDynamoDBTimeToLive judges each Time to Live a table can have
// (dynalite has no UpdateTimeToLive, so the descriptions are built here).
func TestDynamoDBTimeToLive(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		d    *types.TimeToLiveDescription
		sev  doctor.Severity
		says string
	}{
		{nil, doctor.Info, "Time to Live DISABLED"},
		{&types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusDisabled}, doctor.Info, "released and abandoned items stay"},
		{&types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusEnabled, AttributeName: aws.String(dynamolock.ExpiresAttribute)}, doctor.Info, "garbage collection only"},
		{&types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusEnabling, AttributeName: aws.String(dynamolock.ExpiresAttribute)}, doctor.Info, "garbage collection only"},
		{&types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusEnabled, AttributeName: aws.String("lease_ms")}, doctor.Danger, `on attribute "lease_ms"`},
		{&types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusEnabled, AttributeName: aws.String("fence")}, doctor.Warning, `on attribute "fence"`},
		{&types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusEnabled, AttributeName: aws.String("token")}, doctor.Warning, `on attribute "token"`},
		{&types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusEnabled, AttributeName: aws.String("ttl")}, doctor.Warning, `on attribute "ttl"`},
	} {
		f := dynamoTTLFinding("t", c.d, now)
		if f.Severity != c.sev || !strings.Contains(f.Seen, c.says) || (c.sev != doctor.Info && (f.Consequence == "" || !strings.Contains(f.Fix, dynamolock.ExpiresAttribute))) {
			t.Errorf("%+v: %+v, want %s saying %q with a consequence and a fix", c.d, f, c.sev, c.says)
		}
	}
	// A 20-day lease in milliseconds reads, as Unix seconds, as a time in
	// 2024, which the consequence's range of leases covers.
	f := dynamoTTLFinding("t", &types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusEnabled, AttributeName: aws.String("lease_ms")}, now)
	if !strings.Contains(f.Consequence, "lease of 19.0 to 20.8 days") {
		t.Errorf("lease_ms consequence: %s", f.Consequence)
	}
}

func TestInvalidURLs(t *testing.T) {
	doctortest.InvalidURLs(t, func(a string) []string {
		return []string{"dynamodb://", "dynamodb://tbl:8000", "dynamodb://tbl/x", "dynamodb://tbl?region=us-east-1&endpoint=" + a,
			"dynamodb://tbl?region=us-east-1&timeout=1s", "dynamodb://tbl?region=us-east-1&region=eu-west-1",
			"dynamodb://tbl?region=us-east-1&retention=soon", "dynamodb://ab?region=us-east-1"}
	})
}

// TestRefusedAsOpen: a URL dynamolock refuses, doctor refuses in its
// words.
func TestRefusedAsOpen(t *testing.T) {
	doctortest.Refused(t, dynamolock.ParseURL, "dynamodb://tbl?region=us-east-1&colour=red", "dynamodb://tbl?region=us-east-1&retention=soon")
}

func TestUnreachable(t *testing.T) {
	dynamoEnv(t)
	doctortest.Unreachable(t, func(a string) []string { return []string{"dynamodb://tbl?region=us-east-1&endpoint=http://" + a} })
}
