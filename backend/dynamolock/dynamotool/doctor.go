package dynamotool

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/distlock/distlock/backend/dynamolock"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/migrate"
)

// dynamoLowWCU is the provisioned write capacity under which throttling of
// acquires and renewals is likely: one lock's acquire, renewals, release and
// each waiter's polls are all writes.
const dynamoLowWCU = 5

// dynamoCreateTable is the AWS CLI command that makes the table dynamolock
// needs, with %s for the table's name.
const dynamoCreateTable = "aws dynamodb create-table --table-name %s --attribute-definitions AttributeName=" + dynamolock.KeyAttribute +
	",AttributeType=S --key-schema AttributeName=" + dynamolock.KeyAttribute + ",KeyType=HASH --billing-mode PAY_PER_REQUEST"

// checkDynamoDB inspects the lock table of dynamodb://TABLE?region=R&endpoint=E:
// that it exists with the key schema dynamolock needs, its status, its
// billing mode and write capacity, and its Time to Live.
func checkDynamoDB(ctx context.Context, u *url.URL, o doctor.Options, r *doctor.Report) error {
	cfg, err := dynamolock.ParseURL(u)
	if err != nil {
		return doctor.Refused(u, err)
	}
	cfg.ConnectTimeout = o.Timeout
	db, tr, err := dynamolock.NewClient(ctx, cfg)
	if err != nil {
		return doctor.Invalid(u, "%v", err)
	}
	defer tr.CloseIdleConnections()
	table, region, endpoint := cfg.Table, cfg.Region, cfg.Endpoint
	node := table
	dctx, cancel := context.WithTimeout(ctx, o.Timeout)
	out, err := db.DescribeTable(dctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, once)
	cancel()
	var missing *types.ResourceNotFoundException
	switch {
	case errors.As(err, &missing):
		r.Add(doctor.Finding{Severity: doctor.Danger, Check: "table", Node: node,
			Seen:        fmt.Sprintf("no table %q in %s: %v", table, dynamoWhere(region, endpoint), err),
			Consequence: "every lock operation fails, and distlock cannot open the store",
			Fix:         fmt.Sprintf("create it: %s, or dynamolock.CreateTable, or: "+dynamoCreateTable, migrate.Command(r.URL), table)})
		return nil
	case err != nil:
		return doctor.Unreachable("dynamodb "+dynamoWhere(region, endpoint)+": describe table "+table, err)
	}
	t := out.Table
	r.Add(dynamoKeySchemaFinding(node, t))
	r.Add(dynamoStatusFinding(node, t.TableStatus))
	r.Add(dynamoCapacityFinding(node, t))
	tctx, cancel := context.WithTimeout(ctx, o.Timeout)
	ttl, err := db.DescribeTimeToLive(tctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)}, once)
	cancel()
	if err != nil {
		r.Add(doctor.Unread("time-to-live", node, fmt.Errorf("could not check Time to Live: %w", err),
			"aws dynamodb describe-time-to-live --table-name "+table+": Time to Live may be on for "+dynamolock.ExpiresAttribute+" only"))
		return nil
	}
	r.Add(dynamoTTLFinding(node, ttl.TimeToLiveDescription, time.Now()))
	return nil
}

// once makes a request without retries: a refused connection is named at
// once.
func once(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }

// dynamoWhere names where the table was looked for.
func dynamoWhere(region, endpoint string) string {
	if endpoint != "" {
		return endpoint
	}
	if region != "" {
		return "region " + region
	}
	return "the default region"
}

// dynamoKeySchemaFinding judges the key schema: dynamolock reads and writes
// items by a string partition key named dynamolock.KeyAttribute, and no
// sort key.
func dynamoKeySchemaFinding(node string, t *types.TableDescription) doctor.Finding {
	attrType := map[string]string{}
	for _, a := range t.AttributeDefinitions {
		attrType[aws.ToString(a.AttributeName)] = string(a.AttributeType)
	}
	var keys []string
	for _, k := range t.KeySchema {
		name := aws.ToString(k.AttributeName)
		keys = append(keys, fmt.Sprintf("%s (%s, %s)", name, k.KeyType, attrType[name]))
	}
	seen := "key schema " + strings.Join(keys, ", ")
	if len(t.KeySchema) == 1 && aws.ToString(t.KeySchema[0].AttributeName) == dynamolock.KeyAttribute &&
		t.KeySchema[0].KeyType == types.KeyTypeHash && attrType[dynamolock.KeyAttribute] == string(types.ScalarAttributeTypeS) {
		return doctor.Finding{Severity: doctor.Info, Check: "key-schema", Node: node, Seen: seen + ": as dynamolock needs"}
	}
	return doctor.Finding{Severity: doctor.Danger, Check: "key-schema", Node: node,
		Seen:        fmt.Sprintf("%s: dynamolock needs a string partition key named %q and no sort key", seen, dynamolock.KeyAttribute),
		Consequence: "every lock operation fails (DynamoDB refuses items keyed otherwise), and distlock cannot open the store",
		Fix: fmt.Sprintf("a key schema cannot be changed: create another table with dynamolock.CreateTable, or: "+dynamoCreateTable+
			", and point the URL at it", "NEW_TABLE")}
}

// dynamoStatusFinding judges the table's status: only an active table
// takes every write.
func dynamoStatusFinding(node string, st types.TableStatus) doctor.Finding {
	f := doctor.Finding{Severity: doctor.Info, Check: "table-status", Node: node, Seen: "status " + string(st)}
	if st == types.TableStatusActive {
		return f
	}
	f.Severity = doctor.Warning
	f.Consequence = "while the table is not ACTIVE lock operations may fail (CREATING, DELETING, ARCHIVING, INACCESSIBLE_ENCRYPTION_CREDENTIALS) or be throttled while its capacity changes (UPDATING)"
	f.Fix = "wait until it is ACTIVE (aws dynamodb wait table-exists), or restore access to its encryption key"
	return f
}

// dynamoCapacityFinding reports the billing mode and, when provisioned, the
// write capacity: every acquire, renewal, release and waiter's poll is a
// write, and one that stays throttled through the SDK's retries fails.
func dynamoCapacityFinding(node string, t *types.TableDescription) doctor.Finding {
	f := doctor.Finding{Severity: doctor.Info, Check: "capacity", Node: node}
	if t.BillingModeSummary != nil && t.BillingModeSummary.BillingMode == types.BillingModePayPerRequest {
		f.Seen = "billing mode PAY_PER_REQUEST (on demand): no capacity to run out of, until the account's or table's on-demand limits"
		return f
	}
	var rcu, wcu int64
	if p := t.ProvisionedThroughput; p != nil {
		rcu, wcu = aws.ToInt64(p.ReadCapacityUnits), aws.ToInt64(p.WriteCapacityUnits)
	}
	f.Seen = fmt.Sprintf("billing mode PROVISIONED, %d read and %d write capacity units", rcu, wcu)
	if wcu >= dynamoLowWCU {
		return f
	}
	f.Severity = doctor.Warning
	f.Consequence = fmt.Sprintf("under %d write capacity units, throttling delays acquires and renewals (every acquire, renewal, release and each waiter's poll is a write); a renewal still throttled after the SDK's retries fails, and one that stays throttled past the lease loses its lock", dynamoLowWCU)
	f.Fix = "switch to on-demand (aws dynamodb update-table --table-name " + aws.ToString(t.TableName) +
		" --billing-mode PAY_PER_REQUEST), or raise the write capacity or turn on auto scaling"
	return f
}

// dynamoTTLFinding judges DynamoDB's Time to Live. On for
// dynamolock.ExpiresAttribute it collects garbage only. On for an attribute
// dynamolock writes with another meaning, it deletes an item whose value,
// a number read as Unix seconds, is in the past but not more than five
// years (DynamoDB ignores strings and older times): of those, only lease_ms
// can be, for leases of about 18 to 20 days (the fence, in microseconds,
// reads as a time far ahead).
func dynamoTTLFinding(node string, d *types.TimeToLiveDescription, now time.Time) doctor.Finding {
	f := doctor.Finding{Severity: doctor.Info, Check: "time-to-live", Node: node}
	status, attr := types.TimeToLiveStatusDisabled, ""
	if d != nil {
		status, attr = d.TimeToLiveStatus, aws.ToString(d.AttributeName)
	}
	if status == types.TimeToLiveStatusDisabled || status == types.TimeToLiveStatusDisabling || status == "" {
		f.Seen = fmt.Sprintf("Time to Live %s: released and abandoned items stay (about 100 bytes per key ever locked) until deleted by hand; that is only storage, no lock depends on it", status)
		return f
	}
	f.Seen = fmt.Sprintf("Time to Live %s on attribute %q", status, attr)
	if attr == dynamolock.ExpiresAttribute {
		f.Seen += ": garbage collection only (DynamoDB deletes an item after its release or lease plus the retention); no lock decision reads it"
		return f
	}
	fix := "turn Time to Live off (aws dynamodb update-time-to-live --time-to-live-specification Enabled=false,AttributeName=" + attr +
		"), then on for " + dynamolock.ExpiresAttribute + " (dynamolock.CreateTable with TableOptions{TimeToLive: true}, or Enabled=true,AttributeName=" + dynamolock.ExpiresAttribute + ")"
	kind, written := dynamolock.LockAttributes()[attr]
	switch {
	case attr == dynamolock.LeaseAttribute:
		day := float64(24 * time.Hour / time.Millisecond)
		from, to := float64(now.AddDate(-5, 0, 0).Unix())/day, float64(now.Unix())/day
		f.Severity = doctor.Danger
		f.Consequence = fmt.Sprintf("lease_ms is a lease in milliseconds, which DynamoDB reads as Unix seconds: a lock taken with a lease of %.1f to %.1f days reads as a time in the past five years, and DynamoDB deletes its item while it is held; the next acquirer is then granted the key with a fence that starts again from its own clock", from, to)
		f.Fix = fix
	case written:
		f.Severity = doctor.Warning
		f.Consequence = fmt.Sprintf("dynamolock writes %s as a %s with another meaning: DynamoDB deletes no item by it today, but collects no garbage either, and dynamolock.CheckTable refuses the table", attr, kind)
		f.Fix = fix
	default:
		f.Severity = doctor.Warning
		f.Consequence = "dynamolock never writes " + attr + ": Time to Live deletes only items something else marks, collects no garbage, and dynamolock.CheckTable refuses the table"
		f.Fix = fix
	}
	return f
}
