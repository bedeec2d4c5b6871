// Package sqltest holds what the tests of the SQL stores share: the rows of
// a query as text, to read a plan from EXPLAIN, and the keys of a prefix
// read page by page.
package sqltest

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/distlock/distlock/driver"
)

// Querier runs a query: a *sql.DB, a *sql.Conn or a *sql.Tx.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Rows returns the rows of query, one a line, each column written as
// "name=value" and followed by a tab (NULL as the empty string). It fails
// t on any error.
func Rows(ctx context.Context, t testing.TB, q Querier, query string, args ...any) string {
	t.Helper()
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			out.WriteString(cols[i] + "=" + v.String + "\t")
		}
		out.WriteString("\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// PageLister lists keys a page at a time: a *distlock.Client.
type PageLister interface {
	ListPage(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error)
}

// PageKeys returns the keys under prefix, without it, in the order of l's
// pages of size keys each, asking for the next page after the last key of a
// full one. It fails t on any error.
func PageKeys(ctx context.Context, t testing.TB, l PageLister, prefix string, size int) []string {
	t.Helper()
	var keys []string
	for after := ""; ; {
		infos, err := l.ListPage(ctx, prefix, after, size)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			keys = append(keys, strings.TrimPrefix(in.Key, prefix))
		}
		if len(infos) < size {
			return keys
		}
		after = infos[len(infos)-1].Key
	}
}
