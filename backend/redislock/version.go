package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MinVersion is the oldest Redis the backend runs on: 5.0 is the first
// release that replicates a script's writes rather than the script by
// default, which lets the acquire script read TIME before it writes.
const MinVersion = "5.0.0"

// checkVersion asks every node that st reaches for its version (INFO server)
// and fails, naming the version found, if one is older than MinVersion. A
// user that may not run INFO (NOPERM) skips the check.
func checkVersion(ctx context.Context, st store) error {
	infos, err := st.serverInfo(ctx)
	switch {
	case err != nil && strings.Contains(err.Error(), "NOPERM"):
		return nil
	case err != nil:
		return fmt.Errorf("redislock: check the server version: %w", err)
	}
	for _, info := range infos {
		v, err := versionFromInfo(info)
		if err == nil {
			err = needVersion(v, MinVersion)
		}
		if err != nil {
			return fmt.Errorf("redislock: %w", err)
		}
	}
	return nil
}

// versionFromInfo returns the redis_version field of an INFO server reply.
func versionFromInfo(info string) (string, error) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", errors.New("INFO server reports no redis_version")
}

// needVersion returns an error naming both versions if version is older
// than minimum; both are dotted numbers such as "7.0.15".
func needVersion(version, minimum string) error {
	have, err := versionNumbers(version)
	if err != nil {
		return err
	}
	want, err := versionNumbers(minimum)
	if err != nil {
		return err
	}
	if slices.Compare(have, want) < 0 {
		return fmt.Errorf("found Redis %s, too old: the backend needs Redis %s or later", version, minimum)
	}
	return nil
}

// versionNumbers parses "major.minor.patch" (missing parts are 0).
func versionNumbers(v string) ([]int, error) {
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		return nil, fmt.Errorf("server version %q: want major.minor.patch", v)
	}
	n := make([]int, 3)
	for i, p := range parts {
		var err error
		if n[i], err = strconv.Atoi(p); err != nil || n[i] < 0 {
			return nil, fmt.Errorf("server version %q: want major.minor.patch", v)
		}
	}
	return n, nil
}
