package dynamolock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/distlock/distlock/driver"
)

// TableOptions says how CreateTable makes the lock table.
type TableOptions struct {
	// TimeToLive turns DynamoDB's Time to Live on for ExpiresAttribute, so
	// that DynamoDB deletes items long released or abandoned (WithRetention
	// after the fact, then within DynamoDB's own delay of up to days). It
	// collects garbage only: no lock depends on it. The default is off: the
	// table keeps one small item per key ever locked.
	TimeToLive bool
}

// CreateTable creates table with the key schema the backend needs (a
// string partition key named KeyAttribute, no sort key), on-demand billing,
// and waits until it is active, within ctx. A table of that name that
// already exists is kept if its key schema is right, else an error says what
// is wrong. With o.TimeToLive it then turns Time to Live on for
// ExpiresAttribute, unless it is on already.
func CreateTable(ctx context.Context, db *dynamodb.Client, table string, o TableOptions) error {
	if err := validTable(table); err != nil {
		return err
	}
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(KeyAttribute), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(KeyAttribute), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var exists *types.ResourceInUseException
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("dynamolock: create table %s: %w", table, err)
	}
	if err := dynamodb.NewTableExistsWaiter(db, func(w *dynamodb.TableExistsWaiterOptions) {
		w.MinDelay, w.MaxDelay = time.Second, 5*time.Second
	}).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 10*time.Minute); err != nil {
		return fmt.Errorf("dynamolock: create table %s: waiting until active: %w", table, err)
	}
	st, err := CheckTable(ctx, db, table)
	if err != nil || !o.TimeToLive || st.TimeToLive {
		return err
	}
	if _, err := db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(ExpiresAttribute), Enabled: aws.Bool(true)},
	}); err != nil {
		return fmt.Errorf("dynamolock: table %s: turn Time to Live on for %s: %w", table, ExpiresAttribute, err)
	}
	return nil
}

// TableState is what CheckTable found.
type TableState struct {
	// TimeToLive is true if DynamoDB's Time to Live is on (or being turned
	// on) for ExpiresAttribute.
	TimeToLive bool
}

// CheckTable checks, within ctx, that table exists and is active with the
// key schema the backend needs, and whether Time to Live is on for
// ExpiresAttribute. Time to Live on for another attribute is an error: it
// would delete lock items by a clock the backend does not write.
func CheckTable(ctx context.Context, db *dynamodb.Client, table string) (TableState, error) {
	if err := describe(ctx, db, table); err != nil {
		return TableState{}, fmt.Errorf("dynamolock: table %s: %w", table, err)
	}
	out, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		return TableState{}, fmt.Errorf("dynamolock: table %s: %w", table, err)
	}
	d := out.TimeToLiveDescription
	if d == nil || d.TimeToLiveStatus == types.TimeToLiveStatusDisabled || d.TimeToLiveStatus == types.TimeToLiveStatusDisabling {
		return TableState{}, nil
	}
	if name := aws.ToString(d.AttributeName); name != ExpiresAttribute {
		return TableState{}, fmt.Errorf("dynamolock: table %s: Time to Live is on for attribute %q; the backend writes %q", table, name, ExpiresAttribute)
	}
	return TableState{TimeToLive: true}, nil
}

// describe reads table's description and checks that it is active with a
// string partition key named KeyAttribute and no sort key.
func describe(ctx context.Context, db *dynamodb.Client, table string, opts ...func(*dynamodb.Options)) error {
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, opts...)
	if err != nil {
		return noSchema(err)
	}
	t := out.Table
	keyType := ""
	for _, a := range t.AttributeDefinitions {
		if aws.ToString(a.AttributeName) == KeyAttribute {
			keyType = string(a.AttributeType)
		}
	}
	if len(t.KeySchema) != 1 || aws.ToString(t.KeySchema[0].AttributeName) != KeyAttribute || t.KeySchema[0].KeyType != types.KeyTypeHash || keyType != string(types.ScalarAttributeTypeS) {
		return fmt.Errorf("key schema %v: want a string partition key named %q and no sort key", keySchema(t), KeyAttribute)
	}
	if t.TableStatus != types.TableStatusActive && t.TableStatus != types.TableStatusUpdating {
		return fmt.Errorf("status %s, not active", t.TableStatus)
	}
	return nil
}

// noSchema returns err, DynamoDB's, matching driver.ErrNoSchema too if it
// says that the table does not exist (ResourceNotFoundException, which
// DynamoDB returns for a missing table only).
func noSchema(err error) error {
	var missing *types.ResourceNotFoundException
	if errors.As(err, &missing) {
		return fmt.Errorf("%w: %w (create it with dynamolock.CreateTable)", driver.ErrNoSchema, err)
	}
	return err
}

// keySchema describes a table's key schema for an error.
func keySchema(t *types.TableDescription) []string {
	var ks []string
	for _, k := range t.KeySchema {
		ks = append(ks, fmt.Sprintf("%s (%s)", aws.ToString(k.AttributeName), k.KeyType))
	}
	return ks
}
