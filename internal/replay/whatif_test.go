package replay_test

import (
	"fmt"
	"testing"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/replay"
	"github.com/macpd/macpd/internal/session"
)

// drive starts a decision session under profile with the participants
// given and returns a function that feeds it one step at a time.
type drive struct {
	t    *testing.T
	s    *session.Session
	recs []session.Record
	now  int64
	n    int
	lim  session.Limits
}

func driveAs(t *testing.T, profile string, participants ...string) *drive {
	t.Helper()
	d := &drive{t: t, now: baseMs, lim: session.DefaultLimits()}
	d.lim.Profile = profile
	start := &macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion, Mode: decision.ModeID, MessageType: coord.TypeSessionStart,
		MessageId: "m0", SessionId: sid, Sender: "coord", TimestampUnixMs: d.now,
		Payload: pb(t, &macpv1.SessionStartPayload{
			Intent: "choose", Participants: participants, ModeVersion: decision.New().Descriptor().ModeVersion,
			ConfigurationVersion: "cfg-1", TtlMs: 600_000,
		}),
	}
	s, rec, err := session.Start(start, d.now, session.Deps{Modes: modes(), Policies: policy.DefaultOnly{}, Limits: d.lim})
	if err != nil {
		t.Fatalf("SessionStart: %v", err)
	}
	d.s, d.recs = s, []session.Record{rec}
	return d
}

func (d *drive) add(out session.Outcome) *drive {
	d.t.Helper()
	if out.Err != nil || len(out.Records) == 0 {
		d.t.Fatalf("refused: %v", out.Err)
	}
	d.recs = append(d.recs, out.Records...)
	return d
}

func (d *drive) send(sender, typ string, payload []byte) *drive {
	d.t.Helper()
	d.now += 7
	d.n++
	return d.add(d.s.Step(&macpv1.Envelope{MacpVersion: coord.ProtocolVersion, Mode: decision.ModeID, MessageType: typ,
		MessageId: fmt.Sprintf("m%d", d.n), SessionId: sid, Sender: sender, TimestampUnixMs: d.now, Payload: payload}, d.now, d.lim))
}

func (d *drive) propose(who string) *drive {
	return d.send(who, "Proposal", pb(d.t, &decisionv1.ProposalPayload{ProposalId: "p1", Option: "postgres"}))
}

func (d *drive) vote(who string) *drive {
	return d.send(who, "Vote", pb(d.t, &decisionv1.VotePayload{ProposalId: "p1", Vote: "APPROVE"}))
}

func (d *drive) commit(ref *macpv1.CommitmentRef) *drive {
	b := d.s.Binding
	return d.send("coord", coord.TypeCommitment, pb(d.t, &macpv1.CommitmentPayload{
		CommitmentId: "c1", Action: "decision.selected", AuthorityScope: "team", Reason: "ok",
		ModeVersion: b.ModeVersion, ConfigurationVersion: b.ConfigurationVersion, PolicyVersion: b.PolicyVersion,
		OutcomePositive: true, Supersedes: ref,
	}))
}

func (d *drive) cancel() *drive {
	d.now += 7
	return d.add(d.s.Cancel("coord", "stop", "cancel-1", d.now))
}

func redecide(t *testing.T, recs []session.Record, profile string) *replay.WhatIf {
	t.Helper()
	w, err := replay.Redecide(recs, modes(), session.DefaultLimits(), replay.Rebind{Profile: profile})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Issue 31: a what-if under the other protocol profile re-decides the
// same envelopes under that profile's rules and reports the first
// diverging sequence number: a refused envelope, or an accepted one that
// leaves the session in another state than the stored one.
func TestRedecideUnderAnotherProfile(t *testing.T) {
	// 2026-04 -> latest: a cancel ends the session CANCELLED, not EXPIRED
	// (accepted either way: a state divergence at the cancel's seq).
	w := redecide(t, driveAs(t, "", "alice", "bob").propose("alice").cancel().recs, "latest")
	if w.FirstDivergence != 3 || w.Session.Status != session.Cancelled || w.Session.Binding.Profile != coord.ProfileLatest {
		t.Fatalf("cancel under latest: first %d, %s, %q, %+v", w.FirstDivergence, w.Session.Status, w.Session.Binding.Profile, w.Decisions)
	}
	if d := w.Decisions[2]; !d.Accepted || d.Code != "" || d.State != session.Cancelled || d.Stored != session.Expired || !d.StateDiverged() {
		t.Errorf("cancel decision %+v", d)
	}
	// The same with the initiator's Proposal: April admits it, the newest
	// Decision rules only a declared participant's (FORBIDDEN at 2).
	w = redecide(t, driveAs(t, "", "alice", "bob").propose("coord").cancel().recs, "latest")
	if w.FirstDivergence != 2 || w.Decisions[1].Code != string(coord.CodeForbidden) {
		t.Fatalf("initiator's proposal under latest: first %d, %+v", w.FirstDivergence, w.Decisions)
	}
	// ... and back: latest -> 2026-04.
	w = redecide(t, driveAs(t, "latest", "alice", "bob").propose("alice").cancel().recs, "2026-04")
	if w.FirstDivergence != 3 || w.Session.Status != session.Expired {
		t.Fatalf("cancel under 2026-04: first %d, %s", w.FirstDivergence, w.Session.Status)
	}

	// 2026-04 -> latest: a superseding Commitment whose commitment_hash is
	// not canonical was accepted under 2026-04 and is refused under
	// RFC-MACP-0013 §9 (INVALID_ENVELOPE); the session stays OPEN.
	recs := driveAs(t, "", "alice", "bob").propose("alice").vote("alice").
		commit(&macpv1.CommitmentRef{SessionId: "old", CommitmentHash: "not-a-hash"}).recs
	w = redecide(t, recs, "latest")
	if w.FirstDivergence != 4 || w.Decisions[3].Code != string(coord.CodeInvalidEnvelope) || w.Session.Status != session.Open || len(w.Accepted) != 3 {
		t.Fatalf("supersedes under latest: first %d, %+v, %s", w.FirstDivergence, w.Decisions, w.Session.Status)
	}

	// latest -> 2026-04: a Decision session with no declared participant
	// is a newest-spec session; the April rules refuse its SessionStart.
	w = redecide(t, driveAs(t, "latest").recs, "2026-04")
	if w.FirstDivergence != 1 || w.Session != nil || w.Decisions[0].Code == "" {
		t.Fatalf("zero participants under 2026-04: first %d, %+v", w.FirstDivergence, w.Decisions)
	}

	// Additive features diverge nowhere: suspend and resume under either
	// profile, and a what-if under the stored profile.
	_, both := history(t, "")
	for _, p := range []string{"latest", "2026-09", "2026-04"} {
		if w := redecide(t, both, p); w.FirstDivergence != 0 || w.Session.Status != session.Resolved || len(w.Accepted) != len(both) {
			t.Errorf("suspend/resume history under %s: first %d, %s, %+v", p, w.FirstDivergence, w.Session.Status, w.Decisions)
		}
	}
	if _, err := replay.Redecide(both, modes(), session.DefaultLimits(), replay.Rebind{Profile: "2031-01"}); err == nil {
		t.Error("an unknown profile was accepted")
	}
}
