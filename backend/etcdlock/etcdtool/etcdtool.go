// Package etcdtool is etcdlock's side of distlock's store tools: the
// doctor checks and the bench floor of etcd://. The backend does not
// import it; a program that runs the tools imports it for its side effect:
//
//	import _ "github.com/distlock/distlock/backend/etcdlock/etcdtool"
package etcdtool

import (
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
)

func init() {
	doctor.Register("etcd", "etcd", checkEtcd)
	floor.Register("etcd", openEtcdFloor)
}
