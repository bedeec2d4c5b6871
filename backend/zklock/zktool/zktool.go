// Package zktool is zklock's side of distlock's store tools: the doctor
// checks and the bench floor of zk://. The backend does not import it; a
// program that runs the tools imports it for its side effect:
//
//	import _ "github.com/distlock/distlock/backend/zklock/zktool"
package zktool

import (
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/migrate"
)

func init() {
	doctor.Register("zk", "zookeeper", checkZooKeeper)
	migrate.None("zk", "a lock is a node under its root, made as it is taken")
	floor.Register("zk", openZooKeeperFloor)
}
