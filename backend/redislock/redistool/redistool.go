// Package redistool is redislock's side of distlock's store tools: the
// doctor checks of redis://, rediss://, redis-sentinel:// and
// redis-cluster://, and the bench floor of one Redis server. The backend
// does not import it; a program that runs the tools imports it for its
// side effect:
//
//	import _ "github.com/distlock/distlock/backend/redislock/redistool"
package redistool

import (
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/migrate"
)

func init() {
	for _, scheme := range []string{"redis", "rediss", "redis-sentinel", "redis-cluster"} {
		doctor.Register(scheme, "redis", Check)
		migrate.None(scheme, "a lock is a key, written as it is taken")
	}
	floor.Register("redis", openRedisFloor)
	floor.Register("rediss", openRedisFloor)
	const notYet = "not written yet: SET NX PX and the compare-and-delete script through a client that follows the "
	floor.None("redis-sentinel", notYet+"primary the sentinels name would be its floor; measure the primary with redis://")
	floor.None("redis-cluster", notYet+"slot map would be its floor; measure one master with redis://")
}
