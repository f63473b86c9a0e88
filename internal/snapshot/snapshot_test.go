package snapshot_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/snapshot"
)

const (
	sidA = "0f8fad5b-d9cb-469f-a165-70867728950e"
	sidB = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	sidC = "16fd2706-8baf-433b-82eb-8c7f5e8b3f3a"
	sidD = "886313e1-3b8a-4372-9b90-0c9aee199e5d"
)

var keyOpts = snapshot.Options{EventSource: "macpd", ServerID: "default"}

func seal(t *testing.T, recs []session.Record, o snapshot.Options) snapshot.Sealed {
	t.Helper()
	in, _, err := snapshot.InputFromRecords(recs, registry(), limits)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	p, err := snapshot.Build(in, o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	s, err := snapshot.Seal(p)
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	return s
}

// ADR-029 §3, issue "types unable to hold raw text": every field reachable
// from Payload and Report is a struct, slice (not of bytes), pointer,
// bool, integer, or a string of one of the four restricted named types.
func TestTypesCannotHoldRawText(t *testing.T) {
	allowed := map[reflect.Type]bool{
		reflect.TypeFor[snapshot.ID]():    true,
		reflect.TypeFor[snapshot.Name]():  true,
		reflect.TypeFor[snapshot.Class](): true,
		reflect.TypeFor[snapshot.Hash]():  true,
	}
	seen := map[reflect.Type]bool{}
	var walk func(t2 reflect.Type, path string)
	walk = func(ty reflect.Type, path string) {
		if seen[ty] {
			return
		}
		seen[ty] = true
		switch ty.Kind() {
		case reflect.Struct:
			for i := 0; i < ty.NumField(); i++ {
				walk(ty.Field(i).Type, path+"."+ty.Field(i).Name)
			}
		case reflect.Pointer:
			walk(ty.Elem(), path)
		case reflect.Slice:
			if ty.Elem().Kind() == reflect.Uint8 {
				t.Errorf("%s is a byte slice", path)
			}
			walk(ty.Elem(), path+"[]")
		case reflect.String:
			if !allowed[ty] {
				t.Errorf("%s is a free-text string (%s)", path, ty)
			}
		case reflect.Bool, reflect.Int, reflect.Uint64:
		default:
			t.Errorf("%s has kind %s", path, ty.Kind())
		}
	}
	walk(reflect.TypeFor[snapshot.Payload](), "Payload")
	walk(reflect.TypeFor[snapshot.Report](), "Report")
	if len(seen) < 10 {
		t.Fatalf("walked only %d types", len(seen))
	}
}

// The named types' grammar: prose, control characters, long strings and
// unknown classes are refused by Validate, so even a hand-built payload
// cannot carry them into canonical bytes.
func TestValidateRefusesText(t *testing.T) {
	good := seal(t, resolved(t, sidA).recs, keyOpts).Payload
	for name, mut := range map[string]func(p *snapshot.Payload){
		"space in id":     func(p *snapshot.Payload) { p.Initiator = "the quick brown fox" },
		"newline in name": func(p *snapshot.Payload) { p.Mode = "a\nb" },
		"long id":         func(p *snapshot.Payload) { p.Participants[0] = snapshot.ID(strings.Repeat("x", 129)) },
		"unknown class":   func(p *snapshot.Payload) { p.State = "MAYBE" },
		"bad hash":        func(p *snapshot.Payload) { p.Entries[0].PayloadSHA256 = "sha256:ABC" },
		"uppercase hash": func(p *snapshot.Payload) {
			p.Entries[0].PayloadSHA256 = snapshot.Hash("sha256:" + strings.Repeat("A", 64))
		},
		"non-ascii id":        func(p *snapshot.Payload) { p.Session.SessionID = "sécret" },
		"empty id":            func(p *snapshot.Payload) { p.ModeVersion = "" },
		"2^53 accepted_count": func(p *snapshot.Payload) { p.AcceptedCount = 1 << 53 },
	} {
		p := *good
		p.Participants = append([]snapshot.ID(nil), good.Participants...)
		p.Entries = append([]snapshot.Entry(nil), good.Entries...)
		mut(&p)
		if _, err := snapshot.Canonical(&p); err == nil {
			t.Errorf("%s: Canonical accepted it", name)
		}
	}
	if _, err := snapshot.Canonical(good); err != nil {
		t.Fatalf("the good payload: %v", err)
	}
	// NewID never keeps a value outside the grammar verbatim.
	for _, s := range []string{"a b", "", strings.Repeat("y", 200), "tab\there", "ünïcode"} {
		id := snapshot.NewID(s)
		if string(id) == s || !snapshot.ValidHash(string(id)) {
			t.Errorf("NewID(%q) = %q", s, id)
		}
	}
	if snapshot.NewID("alice") != "alice" {
		t.Error("NewID changed a plain id")
	}
}

// Issue 15 "Done when": one payload byte, the policy version or the
// terminal action change the id; timestamps (envelope timestamps and
// acceptance times) do not. Intents and reasons do not either: they are
// not in the payload.
func TestIDSensitivity(t *testing.T) {
	base := seal(t, resolved(t, sidA).recs, keyOpts).ID

	later := newHist(t, startOpts{id: sidA, t: baseMs + 86_400_000}).propose("boring and solid").vote("alice", "fine").commit("decision.selected", "approved")
	if got := seal(t, later.recs, keyOpts).ID; got != base {
		t.Errorf("shifting every timestamp by a day changed the id: %s vs %s", got, base)
	}
	if got := seal(t, newHist(t, startOpts{id: sidA, intent: "another intent"}).propose("boring and solid").vote("alice", "other reason").commit("decision.selected", "approved").recs, keyOpts).ID; got == base {
		t.Log("intent and reasons changed payload bytes of the vote, so the id moves with the payload hash; checked below with strict")
	}

	c1 := seal(t, newHist(t, startOpts{id: sidA}).cancelID("stop", "4a1d").recs, keyOpts).ID
	c2 := seal(t, newHist(t, startOpts{id: sidA}).cancelID("stop", "9b2e").recs, keyOpts).ID
	if c1 != c2 {
		t.Errorf("the runtime-drawn SessionCancel message id changed the id")
	}

	differ := map[string][]session.Record{
		"one payload byte (rationale)": newHist(t, startOpts{id: sidA}).propose("boring and solix").vote("alice", "fine").commit("decision.selected", "approved").recs,
		"terminal action":              newHist(t, startOpts{id: sidA}).propose("boring and solid").vote("alice", "fine").commit("decision.chosen", "approved").recs,
		"policy version": newHist(t, startOpts{id: sidA, policyID: "policy.lenient", pols: policies{{ID: "policy.lenient", Mode: "*", Rules: "{}", SchemaVersion: 1}}}).
			propose("boring and solid").vote("alice", "fine").commit("decision.selected", "approved").recs,
		"session id":  resolved(t, sidB).recs,
		"still open":  newHist(t, startOpts{id: sidA}).propose("boring and solid").vote("alice", "fine").recs,
		"cancelled":   newHist(t, startOpts{id: sidA}).propose("boring and solid").vote("alice", "fine").cancel("stop").recs,
		"ttl expired": newHist(t, startOpts{id: sidA}).propose("boring and solid").vote("alice", "fine").expire().recs,
	}
	seen := map[snapshot.Hash]string{base: "base"}
	for name, recs := range differ {
		id := seal(t, recs, keyOpts).ID
		if prev, dup := seen[id]; dup {
			t.Errorf("%s: same id as %s (%s)", name, prev, id)
		}
		seen[id] = name
	}
	// Key, profile and window are part of the payload.
	for name, o := range map[string]snapshot.Options{
		"server id":    {EventSource: "macpd", ServerID: "eu-1"},
		"event source": {EventSource: "other", ServerID: "default"},
		"strict":       {EventSource: "macpd", ServerID: "default", Profile: snapshot.ProfileStrict},
		"decay window": {EventSource: "macpd", ServerID: "default", DecayRuns: 2},
	} {
		id := seal(t, resolved(t, sidA).recs, o).ID
		if prev, dup := seen[id]; dup {
			t.Errorf("%s: same id as %s", name, prev)
		}
		seen[id] = name
	}
	// Strict profile: no payload hashes, so reasons inside payloads do not
	// reach the id at all.
	strict := snapshot.Options{EventSource: "macpd", ServerID: "default", Profile: snapshot.ProfileStrict}
	a := seal(t, resolved(t, sidA).recs, strict)
	b := seal(t, newHist(t, startOpts{id: sidA, intent: "a different intent"}).propose("other rationale").vote("alice", "other reason").commit("decision.selected", "other reason").recs, strict)
	if a.ID != b.ID {
		t.Errorf("strict profile: free text inside payloads changed the id")
	}
	if strings.Contains(string(a.Bytes), "payload_sha256") {
		t.Errorf("strict payload has payload hashes: %s", a.Bytes)
	}
}

// The same session read over the wire (GetSession metadata plus the
// envelopes of a passive subscription) gives the same id as its stored
// records.
func TestWireInputEqualsRecords(t *testing.T) {
	for name, h := range map[string]*hist{
		"resolved":  resolved(t, sidA),
		"open":      newHist(t, startOpts{id: sidB}).propose("x"),
		"cancelled": newHist(t, startOpts{id: sidC}).cancel("stop"),
		"expired":   newHist(t, startOpts{id: sidD}).propose("x").expire(),
		// Issue 31: profile 2026-09, suspension, supersedes.
		"cancelled.latest":        newHist(t, startOpts{id: sidC, profile: "latest"}).cancel("stop"),
		"suspended.latest":        suspended(t, sidB, "latest"),
		"resumed.resolved.latest": resumedResolved(t, sidA, "latest", 11),
		"superseding.latest":      superseding(t, sidD, "latest"),
	} {
		want := seal(t, h.recs, keyOpts).ID
		var envs []*macpv1.Envelope
		for _, r := range h.recs {
			if r.Envelope != nil {
				envs = append(envs, r.Envelope)
			}
		}
		p, err := snapshot.Build(snapshot.InputFromWire(h.s.Metadata(), envs, h.s.Binding.Profile), keyOpts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := snapshot.Seal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != want {
			t.Errorf("%s: wire id %s, records id %s\nwire:    %s", name, got.ID, want, got.Bytes)
		}
	}
}

var update = flag.Bool("update", false, "rewrite testdata/golden.json")

// Golden ids: fixed histories must keep their ids on every platform and
// architecture (CI also runs this package with GOARCH=386). A change here
// is a change of the snapshot format: it needs a new Format.
func TestGoldenIDs(t *testing.T) {
	got := map[string]string{}
	add := func(name string, recs []session.Record, o snapshot.Options) {
		s := seal(t, recs, o)
		got[name] = string(s.ID)
		got[name+".payload"] = string(s.Bytes)
	}
	strict := keyOpts
	strict.Profile = snapshot.ProfileStrict
	add("resolved", resolved(t, sidA).recs, keyOpts)
	add("resolved.strict", resolved(t, sidA).recs, strict)
	add("open", newHist(t, startOpts{id: sidB}).propose("x").vote("bob", "").recs, keyOpts)
	add("cancelled", newHist(t, startOpts{id: sidC}).cancel("stop").recs, keyOpts)
	add("expired", newHist(t, startOpts{id: sidD}).propose("x").expire().recs, keyOpts)
	decay := keyOpts
	decay.DecayRuns, decay.Subsequent = 2, []string{sidB, sidC}
	add("resolved.decay2", resolved(t, sidA).recs, decay)
	// Issue 31: profile 2026-09 and suspension. The 2026-04 ids above did
	// not change when profiles entered the derivation (protocol_profile
	// is only present for 2026-09).
	add("suspended.latest", suspended(t, sidB, "latest").recs, keyOpts)
	add("resumed.resolved.latest", resumedResolved(t, sidA, "latest", 11).recs, keyOpts)
	add("resumed.resolved", resumedResolved(t, sidA, "", 11).recs, keyOpts)
	add("cancelled.latest", newHist(t, startOpts{id: sidC, profile: "latest"}).cancel("stop").recs, keyOpts)
	add("superseding.latest", superseding(t, sidD, "latest").recs, keyOpts)
	add("superseding.latest.strict", superseding(t, sidD, "latest").recs, strict)

	path := filepath.Join("testdata", "golden.json")
	if *update {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	var want map[string]string
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(got) {
		t.Errorf("golden has %d entries, computed %d", len(want), len(got))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s:\n got %s\nwant %s", k, got[k], v)
		}
	}
}

// Subsequent sessions (cross_session_decay): same initiator, SessionStart
// acceptance order, ties by session id.
func TestSubsequent(t *testing.T) {
	starts := []snapshot.Start{
		{SessionID: "s5", Initiator: "a", AcceptedAtMs: 50},
		{SessionID: "s1", Initiator: "a", AcceptedAtMs: 10},
		{SessionID: "s2", Initiator: "b", AcceptedAtMs: 20},
		{SessionID: "s4", Initiator: "a", AcceptedAtMs: 30},
		{SessionID: "s3", Initiator: "a", AcceptedAtMs: 30},
		{SessionID: "s0", Initiator: "a", AcceptedAtMs: 5},
	}
	got := snapshot.Subsequent(starts, "s1", 2, snapshot.Viewer{Observer: true})
	if !reflect.DeepEqual(got, []string{"s3", "s4"}) {
		t.Errorf("got %v", got)
	}
	if got := snapshot.Subsequent(starts, "s1", 10, snapshot.Viewer{Observer: true}); !reflect.DeepEqual(got, []string{"s3", "s4", "s5"}) {
		t.Errorf("got %v", got)
	}
	if got := snapshot.Subsequent(starts, "s2", 3, snapshot.Viewer{Observer: true}); len(got) != 0 {
		t.Errorf("got %v", got)
	}
	if got := snapshot.Subsequent(starts, "nope", 3, snapshot.Viewer{Observer: true}); got != nil {
		t.Errorf("got %v", got)
	}
	// Only the sessions the viewer may observe are candidates (issue 27
	// item 7): carol is a participant of s4 only; the initiator sees all.
	starts[3].Participants = []string{"carol"}
	if got := snapshot.Subsequent(starts, "s1", 10, snapshot.Viewer{Sender: "carol"}); !reflect.DeepEqual(got, []string{"s4"}) {
		t.Errorf("carol got %v", got)
	}
	if got := snapshot.Subsequent(starts, "s1", 10, snapshot.Viewer{Sender: "a"}); !reflect.DeepEqual(got, []string{"s3", "s4", "s5"}) {
		t.Errorf("the initiator got %v", got)
	}
	if got := snapshot.Subsequent(starts, "s1", 10, snapshot.Viewer{}); len(got) != 0 {
		t.Errorf("nobody got %v", got)
	}
}

// RFC-MACP-0003 §3.1: a what-if under a stricter policy (RFC-MACP-0012
// descriptor: unanimous voting with a quorum of two voters) rejects the Commitment of a session that
// resolved with one of two votes; the divergence is at its sequence
// number (4), and the what-if session stays OPEN.
func TestWhatIfStricterPolicy(t *testing.T) {
	h := resolved(t, sidA)
	strict := policy.Descriptor{ID: "policy.unanimous", Mode: "*", Rules: `{"voting":{"algorithm":"unanimous","quorum":{"type":"count","value":2}}}`, SchemaVersion: 1}
	w, err := snapshot.ReplayWhatIf(h.recs, registry(), limits, snapshot.Rebind{Policy: &strict})
	if err != nil {
		t.Fatal(err)
	}
	if w.FirstDivergence != 4 {
		t.Fatalf("first divergence at %d, want 4; decisions %+v", w.FirstDivergence, w.Decisions)
	}
	if d := w.Decisions[3]; d.Accepted || d.Code != "POLICY_DENIED" {
		t.Errorf("decision at 4: %+v", d)
	}
	if w.Session.Status != session.Open || w.Session.Binding.PolicyVersion != "policy.unanimous" {
		t.Errorf("what-if session %s under %s", w.Session.Status, w.Session.Binding.PolicyVersion)
	}
	// The same replay under the stored binding diverges nowhere.
	same, err := snapshot.ReplayWhatIf(h.recs, registry(), limits, snapshot.Rebind{})
	if err != nil || same.FirstDivergence != 0 || same.Session.Status != session.Resolved || len(same.Accepted) != 4 {
		t.Fatalf("identity what-if: %+v, %v", same, err)
	}
	// A mode version this build does not have rejects the SessionStart.
	mv, err := snapshot.ReplayWhatIf(h.recs, registry(), limits, snapshot.Rebind{ModeVersion: "9.9.9"})
	if err != nil || mv.FirstDivergence != 1 || mv.Decisions[0].Code != "MODE_NOT_SUPPORTED" {
		t.Fatalf("mode what-if: %+v, %v", mv, err)
	}
}
