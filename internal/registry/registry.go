package registry

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/macpd/macpd/internal/clock"
	"github.com/macpd/macpd/internal/hub"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
)

// MetaStore is the part of store.Store the registries keep their
// registrations in: PutMeta must be durable when it returns nil (a
// registration is acknowledged only then), ListMeta visits the keys under
// a prefix in key order. store.Store satisfies it.
type MetaStore interface {
	PutMeta(ctx context.Context, key string, val []byte) error
	ListMeta(ctx context.Context, prefix string, fn func(key string, val []byte) error) error
}

// Options configure a Registry. The zero value of each field selects its
// default.
type Options struct {
	// Limits bound what clients may register (limits.go); zero fields take
	// DefaultLimits' values.
	Limits Limits
	// Clock stamps registrations (registered_at_unix_ms) and change hints;
	// nil = the wall clock.
	Clock  clock.Clock
	Logger *slog.Logger
}

// Registry holds the extension modes and the policies sessions are
// started under. Create it with New and restore the stored registrations
// with Load before the runtime recovers sessions.
type Registry struct {
	opts  Options
	store MetaStore
	log   *slog.Logger

	modes   atomic.Pointer[mode.Registry]
	regMu   sync.Mutex            // serializes mode-registry changes; guards retired
	retired map[string]mode.Entry // unregistered modes that stored sessions may still need

	policies *policyRegistry // policies.go
	// polMu serializes policy registry changes; guards retiredPolicies
	// (unregistered policies, kept so their ids stay immutable).
	polMu           sync.Mutex
	retiredPolicies map[string]registeredPolicy

	// ModeChanges carries mode-registry change hints (WatchModeRegistry):
	// the time of the change, in Unix milliseconds.
	ModeChanges *hub.Hub[int64]
	// PolicyChanges carries policy-registry change hints (WatchPolicies).
	PolicyChanges *hub.Hub[int64]
}

// New builds a Registry over st with the given modes. policies are the
// built-in policies (policy.default is always one); RegisterPolicy adds
// others (policies.go).
func New(st MetaStore, modes *mode.Registry, policies policy.Lookup, opts Options) *Registry {
	opts.Limits.ensureDefaults()
	opts.Clock = clock.OrReal(opts.Clock)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Registry{
		opts:            opts,
		store:           st,
		log:             opts.Logger,
		retired:         make(map[string]mode.Entry),
		policies:        newPolicyRegistry(policies),
		retiredPolicies: make(map[string]registeredPolicy),
		ModeChanges:     hub.New[int64](16),
		PolicyChanges:   hub.New[int64](16),
	}
	r.modes.Store(modes)
	return r
}

// Load restores the durable extension-mode and policy registrations (at
// boot, before sessions are recovered: their replay may need a mode that
// was registered or retired). A stored registration that does not decode
// is an error naming its key.
func (r *Registry) Load(ctx context.Context) error {
	if err := r.loadModes(ctx); err != nil {
		return fmt.Errorf("registry: restoring extension modes: %w", err)
	}
	if err := r.loadPolicies(ctx); err != nil {
		return fmt.Errorf("registry: restoring registered policies: %w", err)
	}
	return nil
}

func (r *Registry) nowMs() int64 { return r.opts.Clock.Now().UnixMilli() }

// Modes returns the current mode registry.
func (r *Registry) Modes() *mode.Registry { return r.modes.Load() }

// SetModes swaps the mode registry and notifies registry watchers.
func (r *Registry) SetModes(reg *mode.Registry) {
	r.modes.Store(reg)
	r.ModeChanges.Publish(r.nowMs())
}

// Lookup implements session.Modes: the modes new sessions may bind to.
func (r *Registry) Lookup(id string) (mode.Entry, bool) { return r.modes.Load().Lookup(id) }

// Policy implements policy.Lookup: built-in policies first, then the
// registered ones.
func (r *Registry) Policy(id string) (policy.Descriptor, bool) { return r.policies.Policy(id) }

// ReplayModes resolves modes for replay: the registered ones, then modes
// that were unregistered but still have stored sessions. The runtime
// finds it on the lookup it is given (runtime.New) and replays with it.
func (r *Registry) ReplayModes() session.Modes { return replayModes{r} }

type replayModes struct{ r *Registry }

func (m replayModes) Lookup(id string) (e mode.Entry, ok bool) {
	if e, ok = m.r.modes.Load().Lookup(id); ok {
		return e, true
	}
	m.r.regMu.Lock()
	defer m.r.regMu.Unlock()
	e, ok = m.r.retired[id]
	return e, ok
}

// Reload reads the extension-mode and policy registrations from the store
// again (another node changed them; internal/cluster calls it):
// registrations are added or updated in place, and ones no longer active
// are dropped; built-in modes and policies stay. Registry watchers are
// notified.
func (r *Registry) Reload(ctx context.Context) error {
	activeModes := make(map[string]bool)
	if err := r.store.ListMeta(ctx, ModePrefix, func(_ string, val []byte) error {
		if state, d, err := DecodeMode(val); err == nil && state != modeRetired {
			activeModes[d.Mode] = true
		}
		return nil
	}); err != nil {
		return err
	}
	r.regMu.Lock()
	err := r.loadModes(ctx)
	if err == nil {
		reg := r.modes.Load()
		for _, id := range reg.IDs() {
			if e, ok := reg.Lookup(id); ok && !e.BuiltIn && !activeModes[id] {
				reg = reg.Without(id)
			}
		}
		r.modes.Store(reg)
	}
	r.regMu.Unlock()
	if err != nil {
		return err
	}
	r.ModeChanges.Publish(r.nowMs())

	activePolicies := make(map[string]bool)
	if err := r.store.ListMeta(ctx, policyStorePrefix, func(_ string, val []byte) error {
		if state, e, err := decodePolicy(val); err == nil && state == policyActive {
			activePolicies[e.desc.ID] = true
		}
		return nil
	}); err != nil {
		return err
	}
	if err := r.loadPolicies(ctx); err != nil {
		return err
	}
	r.polMu.Lock()
	active := maps.Clone(*r.policies.active.Load())
	for id := range active {
		if !activePolicies[id] {
			delete(active, id)
		}
	}
	r.policies.active.Store(&active)
	r.polMu.Unlock()
	r.PolicyChanges.Publish(r.nowMs())
	return nil
}
