package dynamotool

import (
	"context"
	"fmt"
	"net/url"

	"github.com/distlock/distlock/backend/dynamolock"
)

// migrateDynamoDB is the migration of a dynamodb:// URL, read by
// dynamolock's ParseURL: dynamolock.CreateTable of its table, with
// on-demand billing and Time to Live left as it is.
func migrateDynamoDB(ctx context.Context, u *url.URL) (string, error) {
	cfg, err := dynamolock.ParseURL(u)
	if err != nil {
		return "", err
	}
	db, tr, err := dynamolock.NewClient(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer tr.CloseIdleConnections()
	if err := dynamolock.CreateTable(ctx, db, cfg.Table, dynamolock.TableOptions{}); err != nil {
		return "", err
	}
	return fmt.Sprintf("the table %s, keyed by the string %q", cfg.Table, dynamolock.KeyAttribute), nil
}
