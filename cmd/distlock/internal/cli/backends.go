package cli

// Every backend registers its URL schemes, so --backend takes any of them;
// every backend's tool package registers its doctor checks, bench floor
// and migration (or says why it has none) for the same schemes.
import (
	_ "github.com/distlock/distlock/backend/dynamolock"            // dynamodb://
	_ "github.com/distlock/distlock/backend/dynamolock/dynamotool" // its doctor checks and migration
	_ "github.com/distlock/distlock/backend/etcdlock"              // etcd://
	_ "github.com/distlock/distlock/backend/etcdlock/etcdtool"     // its doctor checks and floor
	_ "github.com/distlock/distlock/backend/memlock"               // mem://
	_ "github.com/distlock/distlock/backend/memlock/memtool"       // its floor
	_ "github.com/distlock/distlock/backend/mysqllock"             // mysql:// (named locks)
	_ "github.com/distlock/distlock/backend/mysqllock/mysqltool"   // its doctor checks and migration
	_ "github.com/distlock/distlock/backend/natslock"              // nats://
	_ "github.com/distlock/distlock/backend/natslock/natstool"     // its doctor checks, migration and floor
	_ "github.com/distlock/distlock/backend/pglock"                // postgres://, postgresql://
	_ "github.com/distlock/distlock/backend/pglock/pgtool"         // their doctor checks, floor and migration
	_ "github.com/distlock/distlock/backend/redislock"             // redis://, rediss://, redis-sentinel://, redis-cluster://
	_ "github.com/distlock/distlock/backend/redislock/redistool"   // their doctor checks, the floor of one server
	_ "github.com/distlock/distlock/backend/redlock"               // redlock://
	_ "github.com/distlock/distlock/backend/redlock/redlocktool"   // its doctor checks
	_ "github.com/distlock/distlock/backend/remotelock"            // distlock://, distlocks:// (the lock service)
	_ "github.com/distlock/distlock/backend/remotelock/remotetool" // why they have neither
	_ "github.com/distlock/distlock/backend/sqllock"               // mysql+table:// (the lease table)
	_ "github.com/distlock/distlock/backend/sqllock/sqltool"       // its doctor checks and migration
	_ "github.com/distlock/distlock/backend/zklock"                // zk://
	_ "github.com/distlock/distlock/backend/zklock/zktool"         // its doctor checks and floor
)
