// Package etcdtool is etcdlock's side of distlock's store tools: the
// doctor checks and the bench floor of etcd://. The backend does not
// import it; a program that runs the tools imports it for its side effect:
//
//	import _ "github.com/distlock/distlock/backend/etcdlock/etcdtool"
package etcdtool

import (
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/migrate"
)

func init() {
	doctor.Register("etcd", "etcd", checkEtcd)
	migrate.None("etcd", "a lock is a key under its prefix, written as it is taken")
	floor.Register("etcd", openEtcdFloor)
}
