// Package dynamotool is dynamolock's side of distlock's store tools: the
// doctor checks and the migration (the table) of dynamodb://, and no bench
// floor yet. The backend does
// not import it; a program that runs the tools imports it for its side
// effect:
//
//	import _ "github.com/distlock/distlock/backend/dynamolock/dynamotool"
package dynamotool

import (
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/migrate"
)

func init() {
	doctor.Register("dynamodb", "dynamodb", checkDynamoDB)
	migrate.Register("dynamodb", migrateDynamoDB)
	floor.None("dynamodb", "not written yet: a conditional PutItem (attribute_not_exists) and a conditional DeleteItem on the token would be its floor")
}
