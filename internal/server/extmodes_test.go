package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/server"
)

const extMode = "ext.example.notes.v1"

func extDescriptor() *macpv1.ModeDescriptor {
	return &macpv1.ModeDescriptor{Mode: extMode, ModeVersion: "1.0.0", Title: "Notes", Description: "notes",
		MessageTypes: []string{"Note"}}
}

func modeIDs(ds []*macpv1.ModeDescriptor) []string {
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.Mode)
	}
	return ids
}

// RFC-MACP-0006 §3.6, RFC-MACP-0002 §12, checklist RPC-11..14, OBS-5,
// DISC-4, ERR-22: the extension-mode lifecycle over gRPC. A registered
// mode is listed by ListExtModes (not ListModes), announced to
// WatchModeRegistry, offered by Initialize and the manifest, and usable for
// new sessions; PromoteMode moves it to ListModes; UnregisterExtMode
// removes it for new sessions while started ones keep their binding.
// Failures are ok=false with a free-text error that starts with the MACP
// code.
func TestExtModeLifecycle(t *testing.T) {
	e := startApp(t, testConfig())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := e.c.WatchModeRegistry(ctx, &macpv1.WatchModeRegistryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	hints := recvAsync(w)
	next(t, hints) // initial hint

	r, err := e.c.RegisterExtMode(as("admin"), &macpv1.RegisterExtModeRequest{ModeDescriptor: extDescriptor()})
	if err != nil || !r.Ok {
		t.Fatalf("register: %v %v", r, err)
	}
	if h := next(t, hints).Change; h.GetRegistry() != "modes" {
		t.Fatalf("hint %v", h)
	}
	ext, err := e.c.ListExtModes(context.Background(), &macpv1.ListExtModesRequest{})
	if err != nil || !slices.Contains(modeIDs(ext.Modes), extMode) {
		t.Fatalf("ListExtModes %v %v", ext, err)
	}
	for _, id := range modeIDs(ext.Modes) {
		if strings.HasPrefix(id, "macp.mode.") {
			t.Errorf("ListExtModes lists standards-track %s", id)
		}
	}
	std, err := e.c.ListModes(context.Background(), &macpv1.ListModesRequest{})
	if err != nil || slices.Contains(modeIDs(std.Modes), extMode) {
		t.Fatalf("ListModes lists an extension mode: %v %v", std, err)
	}
	ir, err := e.c.Initialize(context.Background(), &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"}})
	if err != nil || !slices.Contains(ir.SupportedModes, extMode) || !slices.Contains(ir.SupportedModes, decisionMode) {
		t.Fatalf("Initialize supported_modes %v %v", ir.GetSupportedModes(), err)
	}
	man, err := e.c.GetManifest(context.Background(), &macpv1.GetManifestRequest{})
	if err != nil || !slices.Contains(man.Manifest.SupportedModes, extMode) {
		t.Fatalf("manifest supported_modes %v %v", man.GetManifest().GetSupportedModes(), err)
	}

	// A session in the new mode.
	sid := uuid.NewString()
	start := envelope(sid, "SessionStart", "m0", startPayload(t, "alice", "bob"))
	start.Mode = extMode
	e.mustAccept(t, "alice", start)
	note := envelope(sid, "Note", "m1", []byte("free-form"))
	note.Mode = extMode
	e.mustAccept(t, "bob", note)

	// Failures.
	for name, call := range map[string]func() (bool, string){
		"register twice": func() (bool, string) {
			r, err := e.c.RegisterExtMode(as("admin"), &macpv1.RegisterExtModeRequest{ModeDescriptor: extDescriptor()})
			must(t, err)
			return r.Ok, r.Error
		},
		"register reserved namespace": func() (bool, string) {
			d := extDescriptor()
			d.Mode = "macp.mode.mine.v1"
			r, err := e.c.RegisterExtMode(as("admin"), &macpv1.RegisterExtModeRequest{ModeDescriptor: d})
			must(t, err)
			return r.Ok, r.Error
		},
		"register without descriptor": func() (bool, string) {
			r, err := e.c.RegisterExtMode(as("admin"), &macpv1.RegisterExtModeRequest{})
			must(t, err)
			return r.Ok, r.Error
		},
		"unregister built-in": func() (bool, string) {
			r, err := e.c.UnregisterExtMode(as("admin"), &macpv1.UnregisterExtModeRequest{Mode: decisionMode})
			must(t, err)
			return r.Ok, r.Error
		},
		"unregister unknown": func() (bool, string) {
			r, err := e.c.UnregisterExtMode(as("admin"), &macpv1.UnregisterExtModeRequest{Mode: "ext.none.v1"})
			must(t, err)
			return r.Ok, r.Error
		},
		"promote into macp.mode.*": func() (bool, string) {
			r, err := e.c.PromoteMode(as("admin"), &macpv1.PromoteModeRequest{Mode: extMode, PromotedModeName: "macp.mode.notes.v1"})
			must(t, err)
			return r.Ok, r.Error
		},
	} {
		ok, msg := call()
		if ok || msg == "" || !strings.Contains(msg, ": ") || strings.ToUpper(msg[:strings.Index(msg, ":")]) != msg[:strings.Index(msg, ":")] {
			t.Errorf("%s: ok=%v error=%q, want ok=false and an error starting with a MACP code", name, ok, msg)
		}
	}

	// Unregistering stops new sessions; the started one keeps its mode.
	u, err := e.c.UnregisterExtMode(as("admin"), &macpv1.UnregisterExtModeRequest{Mode: extMode})
	if err != nil || !u.Ok {
		t.Fatalf("unregister: %v %v", u, err)
	}
	next(t, hints)
	again := envelope(uuid.NewString(), "SessionStart", "m0", startPayload(t, "alice"))
	again.Mode = extMode
	wantNack(t, e.send(t, "alice", again), "MODE_NOT_SUPPORTED")
	note = envelope(sid, "Note", "m2", []byte("still bound"))
	note.Mode = extMode
	e.mustAccept(t, "alice", note)

	// Promotion moves a mode from ListExtModes to ListModes.
	if r, err := e.c.RegisterExtMode(as("admin"), &macpv1.RegisterExtModeRequest{ModeDescriptor: extDescriptor()}); err != nil || !r.Ok {
		t.Fatalf("re-register: %v %v", r, err)
	}
	p, err := e.c.PromoteMode(as("admin"), &macpv1.PromoteModeRequest{Mode: extMode})
	if err != nil || !p.Ok || p.Mode != extMode {
		t.Fatalf("promote: %v %v", p, err)
	}
	std, _ = e.c.ListModes(context.Background(), &macpv1.ListModesRequest{})
	ext, _ = e.c.ListExtModes(context.Background(), &macpv1.ListExtModesRequest{})
	if !slices.Contains(modeIDs(std.Modes), extMode) || slices.Contains(modeIDs(ext.Modes), extMode) {
		t.Fatalf("after promotion: ListModes %v, ListExtModes %v", modeIDs(std.Modes), modeIDs(ext.Modes))
	}
}

// checklist SEC-10 / ERR-2: registry mutations need the
// CanManageModeRegistry grant; without it they are FORBIDDEN.
func TestExtModeMutationsNeedGrant(t *testing.T) {
	e, _, _ := startService(t, server.Options{}) // auth.Dev{} without grants
	r, err := e.c.RegisterExtMode(as("alice"), &macpv1.RegisterExtModeRequest{ModeDescriptor: extDescriptor()})
	if err != nil || r.Ok || !strings.HasPrefix(r.Error, "FORBIDDEN") {
		t.Fatalf("register: %v %v", r, err)
	}
	u, err := e.c.UnregisterExtMode(as("alice"), &macpv1.UnregisterExtModeRequest{Mode: decisionMode})
	if err != nil || u.Ok || !strings.HasPrefix(u.Error, "FORBIDDEN") {
		t.Fatalf("unregister: %v %v", u, err)
	}
	p, err := e.c.PromoteMode(as("alice"), &macpv1.PromoteModeRequest{Mode: decisionMode})
	if err != nil || p.Ok || !strings.HasPrefix(p.Error, "FORBIDDEN") {
		t.Fatalf("promote: %v %v", p, err)
	}
	ext, err := e.c.ListExtModes(context.Background(), &macpv1.ListExtModesRequest{})
	if err != nil || slices.Contains(modeIDs(ext.Modes), extMode) {
		t.Fatalf("ListExtModes %v %v", ext, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// RFC-MACP-0003 §5 names the determinism classes: RegisterExtMode refuses
// any other (before: "banana" was registered) and registers nothing;
// each named class, and an empty one (structural-only), is accepted.
func TestExtModeDeterminismClass(t *testing.T) {
	e := startApp(t, testConfig())
	d := extDescriptor()
	d.DeterminismClass = "banana"
	r, err := e.c.RegisterExtMode(as("admin"), &macpv1.RegisterExtModeRequest{ModeDescriptor: d})
	if err != nil || r.Ok || !strings.HasPrefix(r.Error, "INVALID_ENVELOPE") {
		t.Fatalf("banana: %v %v", r, err)
	}
	ext, _ := e.c.ListExtModes(context.Background(), &macpv1.ListExtModesRequest{})
	if slices.Contains(modeIDs(ext.GetModes()), extMode) {
		t.Fatal("a refused mode was registered")
	}
	for i, c := range []string{"", "structural-only", "semantic-deterministic", "context-frozen", "non-deterministic"} {
		d := extDescriptor()
		d.Mode = fmt.Sprintf("%s.c%d", extMode, i)
		d.DeterminismClass = c
		if r, err := e.c.RegisterExtMode(as("admin"), &macpv1.RegisterExtModeRequest{ModeDescriptor: d}); err != nil || !r.Ok {
			t.Fatalf("%q: %v %v", c, r, err)
		}
	}
}
