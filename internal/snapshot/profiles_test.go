package snapshot_test

import (
	"errors"
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/cmthash"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/snapshot"
	"google.golang.org/protobuf/proto"
)

// suspended: a session suspended while open (not ended).
func suspended(t *testing.T, id, profile string) *hist {
	return newHist(t, startOpts{id: id, profile: profile}).propose("x").suspend("lunch", "susp-1", 11)
}

// resumedResolved: proposal, suspension wait ms later, resume, vote,
// commitment. wait changes the recorded banked_ms (the deadline minus the
// suspension's time) and nothing else the payload holds.
func resumedResolved(t *testing.T, id, profile string, wait int64) *hist {
	return newHist(t, startOpts{id: id, profile: profile}).propose("boring and solid").
		suspend("lunch", "susp-1", wait).resume("back", "res-1", 50).
		vote("alice", "fine").commit("decision.selected", "approved")
}

// superseding: a session resolved by a Commitment that supersedes the
// Commitment of resolved(sidA) by its RFC-MACP-0013 hash.
func superseding(t *testing.T, id, profile string) *hist {
	t.Helper()
	old := resolved(t, sidA)
	var c macpv1.CommitmentPayload
	if err := proto.Unmarshal(old.recs[len(old.recs)-1].Envelope.Payload, &c); err != nil {
		t.Fatal(err)
	}
	h, err := cmthash.Hash(&c)
	if err != nil {
		t.Fatal(err)
	}
	return newHist(t, startOpts{id: id, profile: profile}).propose("boring and solid").vote("alice", "fine").
		commitRef("decision.selected", "approved", &macpv1.CommitmentRef{SessionId: sidA, CommitmentHash: h})
}

func build(t *testing.T, in snapshot.Input, o snapshot.Options) (*snapshot.Payload, error) {
	t.Helper()
	return snapshot.Build(in, o)
}

// Issue 31: the protocol profile is part of what the id is derived from,
// and only when it is not 2026-04: the same envelopes bound to 2026-09
// give a payload that differs by "protocol_profile":"2026-09" alone, and a
// 2026-04 payload has no such key (so every 2026-04 id is unchanged; the
// golden ids pin it).
func TestProtocolProfileInDerivation(t *testing.T) {
	april := seal(t, newHist(t, startOpts{id: sidA, proposer: "alice"}).propose("boring and solid").vote("alice", "fine").commit("decision.selected", "approved").recs, keyOpts)
	latestH := newHist(t, startOpts{id: sidA, profile: "latest"}).propose("boring and solid").vote("alice", "fine").commit("decision.selected", "approved")
	latest := seal(t, latestH.recs, keyOpts)
	if april.ID == latest.ID {
		t.Fatal("the protocol profile does not reach the id")
	}
	if strings.Contains(string(april.Bytes), "protocol_profile") {
		t.Errorf("a 2026-04 payload names its profile: %s", april.Bytes)
	}
	if got := strings.Replace(string(latest.Bytes), `"protocol_profile":"2026-09",`, "", 1); got != string(april.Bytes) {
		t.Errorf("2026-09 payload differs beyond protocol_profile:\n%s\n%s", latest.Bytes, april.Bytes)
	}
	// A start record without a profile (written before profiles existed)
	// is 2026-04.
	recs := append([]session.Record(nil), newHist(t, startOpts{id: sidA, proposer: "alice"}).propose("boring and solid").vote("alice", "fine").commit("decision.selected", "approved").recs...)
	info := *recs[0].Start
	info.Profile = ""
	recs[0].Start = &info
	in, err := snapshot.InputFromHistory(recs)
	if err != nil {
		t.Fatal(err)
	}
	p, err := build(t, in, keyOpts)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := snapshot.Seal(p); s.ID != april.ID {
		t.Errorf("a profile-less start record changed the id")
	}
	// A profile this build does not serve is refused, not guessed.
	in.Profile = "2031-01"
	if _, err := build(t, in, keyOpts); !errors.Is(err, snapshot.ErrInput) {
		t.Errorf("unknown protocol profile: %v", err)
	}
}

// Issue 31: CANCELLED is the end of a cancel under 2026-09 only, EXPIRED
// by SessionCancel under 2026-04 only; a SUSPENDED session is snapshotted
// (not ended: no outcome) and its history ends with its SessionSuspend.
func TestSuspendedAndCancelledStates(t *testing.T) {
	c := seal(t, newHist(t, startOpts{id: sidC, profile: "latest"}).cancel("stop").recs, keyOpts).Payload
	if c.State != snapshot.StateCancelled || c.Outcome == nil || c.Outcome.EndedBy != snapshot.EndedByCancel || c.ProtocolProfile != snapshot.ProtocolLatest {
		t.Errorf("cancelled under latest: %+v %+v", c, c.Outcome)
	}
	if last := c.Entries[len(c.Entries)-1]; last.MessageType != coord.TypeSessionCancel || last.MessageID != "" || last.Sender != coord.RuntimeSender {
		t.Errorf("cancel entry %+v", last)
	}
	s := seal(t, suspended(t, sidB, "latest").recs, keyOpts).Payload
	if s.State != snapshot.StateSuspended || s.Outcome != nil || s.AcceptedCount != 3 {
		t.Errorf("suspended: %+v", s)
	}
	if last := s.Entries[2]; last.MessageType != coord.TypeSessionSuspend || last.MessageID != "" || last.Sender != coord.RuntimeSender {
		t.Errorf("suspend entry %+v", last)
	}
	// Inconsistent inputs are refused.
	aprilCancel, err := snapshot.InputFromHistory(newHist(t, startOpts{id: sidC}).cancel("stop").recs)
	if err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(in *snapshot.Input){
		"CANCELLED under 2026-04": func(in *snapshot.Input) { in.State = macpv1.SessionState_SESSION_STATE_CANCELLED },
		"EXPIRED by cancel under 2026-09": func(in *snapshot.Input) {
			in.Profile = coord.ProfileLatest
		},
		"SUSPENDED without its SessionSuspend": func(in *snapshot.Input) { in.State = macpv1.SessionState_SESSION_STATE_SUSPENDED },
	} {
		in := aprilCancel
		mut(&in)
		if _, err := build(t, in, keyOpts); !errors.Is(err, snapshot.ErrInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := build(t, aprilCancel, keyOpts); err != nil {
		t.Fatalf("the consistent input: %v", err)
	}
}

// The runtime's SessionResume records banked_ms, derived from acceptance
// times; it does not reach the id (a longer suspension gives the same
// id), its reason does (default profile).
func TestResumeBankedMsIsNotInTheID(t *testing.T) {
	a := resumedResolved(t, sidA, "latest", 11)
	b := resumedResolved(t, sidA, "latest", 5_011)
	var ra, rb macpv1.SessionResumePayload
	_ = proto.Unmarshal(a.recs[3].Envelope.Payload, &ra)
	_ = proto.Unmarshal(b.recs[3].Envelope.Payload, &rb)
	if a.recs[3].Kind != session.KindResume || ra.BankedMs == rb.BankedMs {
		t.Fatalf("the histories do not differ in banked_ms: %d %d (kind %v)", ra.BankedMs, rb.BankedMs, a.recs[3].Kind)
	}
	if x, y := seal(t, a.recs, keyOpts).ID, seal(t, b.recs, keyOpts).ID; x != y {
		t.Errorf("banked_ms changed the id: %s %s", x, y)
	}
	c := newHist(t, startOpts{id: sidA, profile: "latest"}).propose("boring and solid").
		suspend("lunch", "susp-1", 11).resume("another reason", "res-1", 50).vote("alice", "fine").commit("decision.selected", "approved")
	if seal(t, a.recs, keyOpts).ID == seal(t, c.recs, keyOpts).ID {
		t.Error("the resume reason does not reach the id")
	}
	// The runtime-drawn suspend and resume message ids do not either.
	d := newHist(t, startOpts{id: sidA, profile: "latest"}).propose("boring and solid").
		suspend("lunch", "susp-other", 11).resume("back", "res-other", 50).vote("alice", "fine").commit("decision.selected", "approved")
	if seal(t, a.recs, keyOpts).ID != seal(t, d.recs, keyOpts).ID {
		t.Error("runtime-drawn suspend/resume message ids changed the id")
	}
}

// Issue 31: a superseding Commitment's reference enters the outcome as
// hashes only: the referenced session id as its Opaque digest (equal to
// that session's own session.session_id), a canonical commitment hash as
// it is, anything else (profile 2026-04 accepted any non-empty string)
// as its Opaque digest. No raw reference text reaches payload or report.
func TestSupersedesAsHashes(t *testing.T) {
	sup := seal(t, superseding(t, sidD, "latest").recs, keyOpts)
	ref := sup.Payload.Outcome.Supersedes
	if ref == nil {
		t.Fatalf("no supersedes in %s", sup.Bytes)
	}
	old := seal(t, resolved(t, sidA).recs, keyOpts)
	if ref.SessionID != old.Payload.Session.SessionID {
		t.Errorf("supersedes.session_id %s, the superseded session's own %s", ref.SessionID, old.Payload.Session.SessionID)
	}
	var c macpv1.CommitmentPayload
	recs := resolved(t, sidA).recs
	_ = proto.Unmarshal(recs[len(recs)-1].Envelope.Payload, &c)
	if h, _ := cmthash.Hash(&c); string(ref.CommitmentHash) != h {
		t.Errorf("commitment_hash %s, want %s", ref.CommitmentHash, h)
	}
	if strings.Contains(string(sup.Bytes), sidA) {
		t.Errorf("the raw superseded session id is in the payload: %s", sup.Bytes)
	}
	// Strict keeps the reference (hashes, no payload hashes).
	strict := keyOpts
	strict.Profile = snapshot.ProfileStrict
	if s := seal(t, superseding(t, sidD, "latest").recs, strict); s.Payload.Outcome.Supersedes == nil || *s.Payload.Outcome.Supersedes != *ref {
		t.Errorf("strict supersedes %+v", s.Payload.Outcome.Supersedes)
	}
	// 2026-04: a free-form commitment hash and a revealing session id.
	const rawSID, rawHash = "alice-ssn-123-45-6789-merger", "CANARY-supersede-hash-Q9w8E7"
	h := newHist(t, startOpts{id: sidD}).propose("boring and solid").vote("alice", "fine").
		commitRef("decision.selected", "approved", &macpv1.CommitmentRef{SessionId: rawSID, CommitmentHash: rawHash})
	for _, o := range []snapshot.Options{keyOpts, strict} {
		s := seal(t, h.recs, o)
		rep, err := snapshot.NewReport(s).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{string(s.Bytes), string(rep)} {
			if strings.Contains(text, rawSID) || strings.Contains(text, rawHash) || strings.Contains(text, "Q9w8E7") {
				t.Errorf("raw reference in %s", text)
			}
		}
		r := s.Payload.Outcome.Supersedes
		if r == nil || r.CommitmentHash != snapshot.Hash(snapshot.Opaque("macpd", "default", rawHash)) || r.SessionID != snapshot.Opaque("macpd", "default", rawSID) {
			t.Errorf("2026-04 reference %+v", r)
		}
	}
	// A reference changes the id.
	if sup.ID == seal(t, newHist(t, startOpts{id: sidD, profile: "latest"}).propose("boring and solid").vote("alice", "fine").commit("decision.selected", "approved").recs, strict).ID {
		t.Error("supersedes does not reach the id")
	}
}

// WireProfile: what a client can tell of a session's profile.
func TestWireProfile(t *testing.T) {
	envs := func(h *hist) []*macpv1.Envelope {
		var out []*macpv1.Envelope
		for _, r := range h.recs {
			if r.Envelope != nil {
				out = append(out, r.Envelope)
			}
		}
		return out
	}
	lc := newHist(t, startOpts{id: sidC, profile: "latest"}).cancel("stop")
	ac := newHist(t, startOpts{id: sidC}).cancel("stop")
	op := newHist(t, startOpts{id: sidB}).propose("x")
	for _, c := range []struct {
		name   string
		h      *hist
		server string
		want   string
	}{
		{"cancelled: 2026-09 whatever the server binds now", lc, "", coord.ProfileLatest},
		{"expired by cancel: 2026-04 whatever the server binds now", ac, "latest", coord.ProfileApril},
		{"open: the server's", op, "latest", coord.ProfileLatest},
		{"open: the server's (none named)", op, "", coord.ProfileApril},
	} {
		if got := snapshot.WireProfile(c.h.s.Metadata(), envs(c.h), c.server); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
