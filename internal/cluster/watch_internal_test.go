package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
	"github.com/nats-io/nats.go/jetstream"
)

// flakyMeta fails ListMeta while failing is set, as a meta bucket that
// does not answer in time under load.
type flakyMeta struct {
	store.Store
	failing atomic.Bool
	calls   atomic.Int64
}

func (f *flakyMeta) ListMeta(ctx context.Context, prefix string, fn func(string, []byte) error) error {
	f.calls.Add(1)
	if f.failing.Load() {
		return errors.New("meta bucket: deadline exceeded")
	}
	return f.Store.ListMeta(ctx, prefix, fn)
}

// update is a meta bucket update; watchRegistries only needs it non-nil.
type update struct{ jetstream.KeyValueEntry }

// docs/cluster.md (registries): a registry change made by another node is
// seen here even when the reload its update triggers fails: the reload is
// retried until it succeeds, since the update itself is not delivered
// again. RFC-MACP-0012 §7.
func TestRegistryReloadRetriedAfterFailure(t *testing.T) {
	shared := memstore.New()
	start := func(st store.Store) *registry.Registry {
		reg := registry.New(st, builtin.Modes(), policy.DefaultOnly{}, registry.Options{})
		if err := reg.Load(context.Background()); err != nil {
			t.Fatal(err)
		}
		rt := runtime.New(st, reg, reg, runtime.Options{})
		if err := rt.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close() })
		return reg
	}
	other := start(shared) // the node that registers
	flaky := &flakyMeta{Store: shared}
	here := start(flaky)

	defer func(d time.Duration) { reloadBackoff = d }(reloadBackoff)
	reloadBackoff = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates := make(chan jetstream.KeyValueEntry)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchRegistries(ctx, updates, here, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()

	admin := coord.Identity{Sender: "agent://admin", Caps: coord.Capabilities{CanManageModeRegistry: true}}
	pd := &macpv1.PolicyDescriptor{PolicyId: "policy.watch.retry", Mode: "macp.mode.decision.v1", Rules: `{"voting":{"algorithm":"majority"}}`, SchemaVersion: 1}
	flaky.failing.Store(true)
	if cerr := other.RegisterPolicy(admin, pd); cerr != nil {
		t.Fatal(cerr)
	}
	before := flaky.calls.Load()
	updates <- update{}
	// The reload fails, and is tried again while the bucket does not answer.
	for deadline := time.Now().Add(10 * time.Second); flaky.calls.Load() < before+3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d reloads after the update, want 3 or more: a failed reload is not retried", flaky.calls.Load()-before)
		}
	}
	if _, cerr := here.GetPolicy(pd.PolicyId); cerr == nil {
		t.Fatal("policy seen although every reload failed")
	}
	flaky.failing.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, cerr := here.GetPolicy(pd.PolicyId); cerr == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the registration was never seen: the failed reload was not retried")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
}
