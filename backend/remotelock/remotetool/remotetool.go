// Package remotetool is remotelock's side of distlock's store tools: it
// declares that distlock:// and distlocks://, the lock service, have
// neither doctor checks nor a bench floor nor a schema of their own, and
// why. A program
// that runs the tools imports it for its side effect:
//
//	import _ "github.com/distlock/distlock/backend/remotelock/remotetool"
package remotetool

import (
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/migrate"
)

func init() {
	for _, scheme := range []string{"distlock", "distlocks"} {
		doctor.None(scheme, "the service's locks live in its store: check the store URL the service runs with (distlock serve --backend; the embedded etcd needs no check)")
		floor.None(scheme, "the service adds its API to its store's commands: compare bench on distlock:// with bench --floor on the service's store URL")
		migrate.None(scheme, "the service's locks live in its store: migrate the store URL the service runs with (distlock serve --backend)")
	}
}
