package cluster

import (
	"context"
	"sync/atomic"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/memstore"
	"github.com/macpd/macpd/internal/testutil"
)

// ownsFlag is a runtime.Forwarder that never forwards and owns every
// session while owned is set.
type ownsFlag struct{ owned atomic.Bool }

func (f *ownsFlag) Forward(context.Context, coord.Identity, runtime.ForwardCall) (*macpv1.Ack, *coord.Error, bool) {
	return nil, nil, false
}
func (f *ownsFlag) Owns(string) bool { return f.owned.Load() }

// docs/cluster.md "Ownership": only a session's owner holds it in memory.
// A node that loses a partition drops that partition's idle sessions at
// its next step; otherwise the release scan (which holds the runtime's
// session map while it visits every resident session) runs only every
// releaseEvery steps, not on each one.
func TestReleaseScansWhenAPartitionIsLost(t *testing.T) {
	fwd := &ownsFlag{}
	fwd.owned.Store(true)
	rt := runtime.New(memstore.New(), builtin.Modes(), policy.DefaultOnly{}, runtime.Options{Forwarder: fwd})
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	init := coord.Identity{Sender: "agent://init"}
	for i := range 5 {
		sid := newSessionID(i)
		if ack := rt.Send(context.Background(), init, testutil.DecisionStart(sid, "m0", 600_000, "agent://alice")); !ack.Ok {
			t.Fatalf("start %d: %v", i, ack.Error)
		}
	}
	w := &Ownership{rt: rt, mine: make([]atomic.Bool, 2)}
	w.mine[0].Store(true)
	w.mine[1].Store(true)
	if n := w.release(); n != 5 {
		t.Fatalf("first step: %d resident, want 5", n)
	}
	// Another node takes the sessions (the flag) but this node still
	// holds both partitions: no scan, the sessions stay.
	fwd.owned.Store(false)
	for step := 2; step < releaseEvery; step++ {
		if n := w.release(); n != 5 {
			t.Fatalf("step %d without a lost partition: %d resident, want 5 (no scan)", step, n)
		}
	}
	// Partition 1 is lost: the next step scans and drops them.
	w.mine[1].Store(false)
	if n := w.release(); n != 0 {
		t.Fatalf("step after a lost partition: %d resident, want 0", n)
	}

	// Sessions loaded while not owned (a read on this node) go at the
	// periodic scan, releaseEvery steps after the last one.
	for i := range 3 {
		if cerr := rt.Inspect(context.Background(), newSessionID(i), func(*session.Session) {}); cerr != nil {
			t.Fatal(cerr)
		}
	}
	for step := 1; step < releaseEvery; step++ {
		if n := w.release(); n != 3 {
			t.Fatalf("step %d after the reads: %d resident, want 3", step, n)
		}
	}
	if n := w.release(); n != 0 {
		t.Fatalf("periodic scan: %d resident, want 0", n)
	}
}

func newSessionID(i int) string { return "00000000-0000-4000-8000-00000000000" + string(rune('0'+i)) }
