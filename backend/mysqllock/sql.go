package mysqllock

import (
	_ "embed"
	"strings"
)

var (
	//go:embed sql/migrate.sql
	migrateSQL string
	//go:embed sql/token_width.sql
	tokenWidthSQL string
	//go:embed sql/widen_token.sql
	widenTokenSQL string
	//go:embed sql/acquire.sql
	acquireSQL string
	//go:embed sql/renew.sql
	renewSQL string
	//go:embed sql/release.sql
	releaseSQL string
	//go:embed sql/inspect.sql
	inspectSQL string
	//go:embed sql/list.sql
	listSQL string
	//go:embed sql/list_page.sql
	listPageSQL string
	//go:embed sql/cleanup.sql
	cleanupSQL string
)

func init() {
	for _, q := range []*string{&migrateSQL, &tokenWidthSQL, &widenTokenSQL, &acquireSQL, &renewSQL, &releaseSQL, &inspectSQL, &listSQL, &listPageSQL, &cleanupSQL} {
		*q = stripComments(*q)
	}
}

// stripComments drops the comment lines of a statement, which would
// otherwise travel to the server with every call.
func stripComments(q string) string {
	var b strings.Builder
	for line := range strings.Lines(q) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	return strings.TrimSpace(b.String())
}
