package cli

import (
	"io"
	"log"

	"github.com/go-sql-driver/mysql"
)

// quietDrivers keeps the store drivers' own loggers off stderr. The MySQL
// driver prints what it cannot hand back to its caller (a connection the
// server closed, say) with a logger of its own; distlock's errors report the
// same cause in words a CLI user can act on.
func quietDrivers() { _ = mysql.SetLogger(log.New(io.Discard, "", 0)) }
