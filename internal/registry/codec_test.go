package registry_test

import (
	"context"
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/multiround"
	"github.com/macpd/macpd/internal/mode/passthrough"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/store/memstore"
)

// The stored registration format round-trips and rejects damage
// (registered extension modes survive restarts; RFC-MACP-0002 §12).
func TestRoundTrip(t *testing.T) {
	d, _ := passthrough.Validate(&macpv1.ModeDescriptor{Mode: "ext.vote.v1", ModeVersion: "1.0.0", MessageTypes: []string{"Ballot"}})
	for _, st := range []registry.ModeState{registry.ModeActive, registry.ModeStandard, registry.ModeRetired} {
		b, err := registry.EncodeMode(st, d)
		if err != nil {
			t.Fatal(err)
		}
		got, gd, err := registry.DecodeMode(b)
		if err != nil || got != st || gd.Mode != d.Mode || len(gd.MessageTypes) != len(d.MessageTypes) {
			t.Fatalf("state %c: %c %v %v", st, got, gd, err)
		}
	}
	for _, bad := range [][]byte{nil, {'X', 1}, {byte(registry.ModeActive), 0xff, 0xff}} {
		if _, _, err := registry.DecodeMode(bad); err == nil {
			t.Fatalf("accepted %v", bad)
		}
	}
	if registry.ModeKey("ext.vote.v1") != "mode/ext.vote.v1" {
		t.Fatal(registry.ModeKey("ext.vote.v1"))
	}
}

// Load: active and promoted registrations join the registry with their
// kinds, retired ones come back apart, a built-in mode is never replaced,
// and a damaged value fails the load naming its key.
func TestLoad(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	put := func(state registry.ModeState, id string, types ...string) {
		t.Helper()
		d, err := passthrough.Validate(&macpv1.ModeDescriptor{Mode: id, ModeVersion: "1.0.0", MessageTypes: types})
		if err != nil {
			t.Fatal(err)
		}
		b, err := registry.EncodeMode(state, d)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutMeta(ctx, registry.ModeKey(id), b); err != nil {
			t.Fatal(err)
		}
	}
	put(registry.ModeActive, "ext.a.v1", "A")
	put(registry.ModeStandard, "ext.s.v1", "S")
	put(registry.ModeRetired, "ext.r.v1", "R")
	builtin := multiround.New() // an extension mode that a later build ships built in
	put(registry.ModeActive, multiround.ModeID, "Fake")
	base := mode.NewRegistry(mode.Entry{Mode: builtin, Kind: mode.Extension, BuiltIn: true})

	reg, retired, err := registry.LoadModes(ctx, st, base)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := reg.Lookup("ext.a.v1"); !ok || e.Kind != mode.Extension {
		t.Fatalf("ext.a.v1: %v %v", e, ok)
	}
	if e, ok := reg.Lookup("ext.s.v1"); !ok || e.Kind != mode.Standard {
		t.Fatalf("ext.s.v1: %v %v", e, ok)
	}
	if _, ok := reg.Lookup("ext.r.v1"); ok {
		t.Fatal("a retired mode joined the registry")
	}
	if e, ok := retired["ext.r.v1"]; !ok || e.Mode.Descriptor().Mode != "ext.r.v1" || len(retired) != 1 {
		t.Fatalf("retired %v", retired)
	}
	if e, _ := reg.Lookup(multiround.ModeID); e.Mode != builtin {
		t.Fatal("a stored registration replaced a built-in mode")
	}

	if err := st.PutMeta(ctx, registry.ModeKey("ext.bad.v1"), []byte{'Q'}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := registry.LoadModes(ctx, st, base); err == nil || !strings.Contains(err.Error(), "mode/ext.bad.v1") {
		t.Fatalf("damaged value: %v", err)
	}
}
