package testserver

import (
	"context"
	"testing"
	"time"
)

func TestEtcdAddRemoveMember(t *testing.T) {
	members := EtcdCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	added := EtcdAddMember(t, members)
	list, err := EtcdMembers(ctx, added)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 4 {
		t.Fatalf("after member add the cluster lists %d members, want 4: %+v", len(list), list)
	}

	EtcdRemoveMember(t, append(members, added), members[0])
	list, err = EtcdMembers(ctx, added)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("after member remove the cluster lists %d members, want 3: %+v", len(list), list)
	}
	for _, m := range list {
		if len(m.ClientURLs) == 1 && m.ClientURLs[0] == EtcdEndpoint(members[0]) {
			t.Fatalf("the removed member is still listed: %+v", list)
		}
	}
	// A removed leader leaves the others to elect another first.
	for {
		err := etcdHealthy(ctx, EtcdEndpoint(members[1]))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the cluster is not healthy after the removal: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
