package dynamolock_test

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/distlock/distlock/backend/dynamolock"
)

func itemKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{dynamolock.KeyAttribute: &types.AttributeValueMemberS{Value: key}}
}
