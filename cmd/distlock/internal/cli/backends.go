package cli

// Every backend registers its URL schemes, so --backend takes any of them.
import (
	_ "github.com/distlock/distlock/backend/dynamolock" // dynamodb://
	_ "github.com/distlock/distlock/backend/etcdlock"   // etcd://
	_ "github.com/distlock/distlock/backend/memlock"    // mem://
	_ "github.com/distlock/distlock/backend/mysqllock"  // mysql:// (named locks)
	_ "github.com/distlock/distlock/backend/pglock"     // postgres://, postgresql://
	_ "github.com/distlock/distlock/backend/redislock"  // redis://, rediss://, redis-sentinel://, redis-cluster://
	_ "github.com/distlock/distlock/backend/redlock"    // redlock://
	_ "github.com/distlock/distlock/backend/remotelock" // distlock://, distlocks:// (the lock service)
	_ "github.com/distlock/distlock/backend/sqllock"    // mysql+table:// (the lease table)
	_ "github.com/distlock/distlock/backend/zklock"     // zk://
)
