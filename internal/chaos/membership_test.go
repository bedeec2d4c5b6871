//go:build chaos

package chaos

import (
	"slices"
	"testing"

	"github.com/distlock/distlock/internal/testserver"
)

// membership changes the members of the etcd cluster while clients hold
// and wait, twice: once a holder is inside, a new member is added
// (member add, then started) and, a lease after it is healthy, the leader
// is removed (member remove, then stopped). The clients know only the
// first three members' addresses.
func membership(t *testing.T, r *run) {
	members := slices.Clone(r.dep.servers)
	r.repeat(2, func() {
		if r.occupant() < 0 {
			return
		}
		added := testserver.EtcdAddMember(t, members)
		members = append(members, added)
		r.hold(lease)
		leader := etcdLeader(t, members)
		if leader == nil {
			return
		}
		testserver.EtcdRemoveMember(t, members, leader)
		members = slices.DeleteFunc(members, func(m *testserver.Server) bool { return m == leader })
		t.Logf("added %s, removed the leader %s", added.Name, leader.Name)
	})
}
