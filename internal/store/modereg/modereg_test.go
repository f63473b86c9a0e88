package modereg_test

import (
	"context"
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/multiround"
	"github.com/macpd/macpd/internal/mode/passthrough"
	"github.com/macpd/macpd/internal/store/memstore"
	"github.com/macpd/macpd/internal/store/modereg"
)

// The stored registration format round-trips and rejects damage
// (registered extension modes survive restarts; RFC-MACP-0002 §12).
func TestRoundTrip(t *testing.T) {
	d, _ := passthrough.Validate(&macpv1.ModeDescriptor{Mode: "ext.vote.v1", ModeVersion: "1.0.0", MessageTypes: []string{"Ballot"}})
	for _, st := range []modereg.State{modereg.Active, modereg.Standard, modereg.Retired} {
		b, err := modereg.Encode(st, d)
		if err != nil {
			t.Fatal(err)
		}
		got, gd, err := modereg.Decode(b)
		if err != nil || got != st || gd.Mode != d.Mode || len(gd.MessageTypes) != len(d.MessageTypes) {
			t.Fatalf("state %c: %c %v %v", st, got, gd, err)
		}
	}
	for _, bad := range [][]byte{nil, {'X', 1}, {byte(modereg.Active), 0xff, 0xff}} {
		if _, _, err := modereg.Decode(bad); err == nil {
			t.Fatalf("accepted %v", bad)
		}
	}
	if modereg.Key("ext.vote.v1") != "mode/ext.vote.v1" {
		t.Fatal(modereg.Key("ext.vote.v1"))
	}
}

// Load: active and promoted registrations join the registry with their
// kinds, retired ones come back apart, a built-in mode is never replaced,
// and a damaged value fails the load naming its key.
func TestLoad(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	put := func(state modereg.State, id string, types ...string) {
		t.Helper()
		d, err := passthrough.Validate(&macpv1.ModeDescriptor{Mode: id, ModeVersion: "1.0.0", MessageTypes: types})
		if err != nil {
			t.Fatal(err)
		}
		b, err := modereg.Encode(state, d)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutMeta(ctx, modereg.Key(id), b); err != nil {
			t.Fatal(err)
		}
	}
	put(modereg.Active, "ext.a.v1", "A")
	put(modereg.Standard, "ext.s.v1", "S")
	put(modereg.Retired, "ext.r.v1", "R")
	builtin := multiround.New() // an extension mode that a later build ships built in
	put(modereg.Active, multiround.ModeID, "Fake")
	base := mode.NewRegistry(mode.Entry{Mode: builtin, Kind: mode.Extension, BuiltIn: true})

	reg, retired, err := modereg.Load(ctx, st, base)
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

	if err := st.PutMeta(ctx, modereg.Key("ext.bad.v1"), []byte{'Q'}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := modereg.Load(ctx, st, base); err == nil || !strings.Contains(err.Error(), "mode/ext.bad.v1") {
		t.Fatalf("damaged value: %v", err)
	}
}
