package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// List reports the held locks under a prefix in key order, a page at a
// time: of the caller's tenant, or of every tenant for an admin who asks
// (ordered by tenant, then key). A page token is the last store key of the
// page before, base64-encoded: opaque to callers, and useless across
// tenants, since a page never leaves the listed namespace.
func (h *service) List(ctx context.Context, req *connect.Request[distlockv1.ListRequest]) (*connect.Response[distlockv1.ListResponse], error) {
	s := h.s
	c := callOf(ctx)
	prefix := req.Msg.GetPrefix()
	noteKey(ctx, short(prefix))
	if err := s.limits.checkPrefix(prefix); err != nil {
		return nil, err
	}
	size := int(req.Msg.GetPageSize())
	switch {
	case size < 0:
		return nil, invalid("list %q: page_size %d is negative", prefix, size)
	case size == 0:
		size = s.limits.PageSize
	case size > s.limits.MaxPageSize:
		size = s.limits.MaxPageSize
	}
	root := namespace(c.id.Tenant)
	if req.Msg.GetAllTenants() {
		if !c.id.Role.Allows(auth.Administer) {
			return nil, connect.NewError(connect.CodePermissionDenied,
				fmt.Errorf("list: all_tenants: role %s of tenant %q may not %s", c.id.Role, c.id.Tenant, auth.Administer))
		}
		root = tenantsRoot
	}
	after, err := decodePageToken(req.Msg.GetPageToken(), root)
	if err != nil {
		return nil, err
	}
	storePrefix := root + prefix
	if req.Msg.GetAllTenants() {
		storePrefix = root
	}
	// The page and one lock more, to know whether another page follows,
	// from pages of the store (client.ListPage: on most stores about a page
	// of reads, not the namespace). Across tenants the prefix is each
	// tenant's, which the store cannot match: its pages may keep few locks,
	// and the next begins after the last lock of the one before.
	var infos []distlock.Info
	for from := after; len(infos) <= size; {
		page, err := s.store.ListPage(ctx, storePrefix, from, size+1)
		if err != nil {
			return nil, s.storeError(ctx, "list", prefix, storePrefix, err)
		}
		for _, i := range page {
			if _, key, ok := splitStoreKey(i.Key); ok && strings.HasPrefix(key, prefix) && i.Key > after && strings.HasPrefix(i.Key, root) {
				infos = append(infos, i)
			}
		}
		if len(page) <= size || page[len(page)-1].Key <= from {
			break // the last page, or a store that does not move on
		}
		from = page[len(page)-1].Key
	}
	slices.SortFunc(infos, func(a, b distlock.Info) int { return strings.Compare(a.Key, b.Key) })
	res := &distlockv1.ListResponse{}
	if len(infos) > size {
		infos = infos[:size]
		res.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(infos[size-1].Key))
	}
	res.Locks = make([]*distlockv1.Lock, 0, len(infos))
	for _, i := range infos {
		tenant, key, _ := splitStoreKey(i.Key)
		if !req.Msg.GetAllTenants() {
			tenant = ""
		}
		res.Locks = append(res.Locks, lockOf(key, tenant, i))
	}
	return connect.NewResponse(res), nil
}

// decodePageToken returns the store key a page token says the page starts
// after; "" for the first page. A token from another listing is refused.
func decodePageToken(token, root string) (string, error) {
	if token == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || !strings.HasPrefix(string(b), root) {
		return "", invalid("list: page_token is not one from this listing's previous page")
	}
	return string(b), nil
}
