package cluster_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/macpd/macpd/internal/cluster"
	"github.com/macpd/macpd/internal/conformance"
	"github.com/macpd/macpd/internal/conformance/inproc"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/natstest"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/store/natsstore"
	"github.com/macpd/macpd/internal/testutil"
)

// One node on the JetStream store runs every conformance fixture, with
// mode-state and replay-equivalence checks (RFC-MACP-0003 §4; checklist
// §8, DET-7), exactly as the in-memory runtime does
// (internal/conformance): a single node on NATS behaves as a single node
// on Pebble.
func TestFixturesOnNATS(t *testing.T) {
	fixtures, err := conformance.LoadDirs(filepath.Join("..", "..", "testdata", "conformance"), testutil.ConformanceDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(fixtures) == 0 {
		t.Fatal("no fixtures")
	}
	srv := natstest.Run(t)
	ns, err := natsstore.Open(context.Background(), natsstore.Options{URL: srv.ClientURL(), Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	reg := registry.New(ns, builtin.Modes(), policy.DefaultOnly{}, registry.Options{})
	if err := reg.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	rt := runtime.New(ns, reg, reg, runtime.Options{})
	rt.EnableSharedStore()
	after, err := ns.LastPosition(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	node, err := cluster.Start(context.Background(), ns, rt, reg, after, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	target := inproc.Target{RT: rt, Reg: reg}
	for _, f := range fixtures {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			res := conformance.Run(context.Background(), f, target, uuid.NewString())
			for _, msg := range res.Failures {
				t.Error(msg)
			}
		})
	}
}
