package sqllock

import (
	"io/fs"
	"path"
	"regexp"
	"testing"
)

// notInBoth matches SQL that one of MySQL 8 and MariaDB lacks: sequences and
// RETURNING (MariaDB only), the row alias of INSERT ... AS new and
// FOR SHARE (MySQL only).
var notInBoth = regexp.MustCompile(`(?i)\b(RETURNING|NEXTVAL|LASTVAL|SETVAL|NEXT\s+VALUE\s+FOR|CREATE\s+SEQUENCE|FOR\s+SHARE)\b|\)\s+AS\s+\w+\s+ON\s+DUPLICATE`)

// comment matches a comment line, which may name what the SQL avoids.
var comment = regexp.MustCompile(`(?m)^\s*--.*$`)

// TestMariaDBDialectIsMySQLSubset keeps the MariaDB dialect to SQL that MySQL
// 8 runs too. MySQL is not installed where the tests run, so this is the
// guard: only the upgrade from an earlier MariaDB schema, which runs only
// where its sequence exists, may name one.
func TestMariaDBDialectIsMySQLSubset(t *testing.T) {
	upgrade := map[string]bool{"has_fence_sequence.sql": true, "migrate_from_sequence.sql": true}
	files, err := fs.Glob(sqlFiles, "sql/mariadb/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no MariaDB SQL files: %v", err)
	}
	for _, f := range files {
		if upgrade[path.Base(f)] {
			continue
		}
		b, err := sqlFiles.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := notInBoth.Find(comment.ReplaceAll(b, nil)); m != nil {
			t.Errorf("%s uses %q, which MySQL 8 or MariaDB lacks", f, m)
		}
	}
}
