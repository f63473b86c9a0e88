package sdk_test

import (
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/sdk"
)

// Suspend, resume and cancel through the session helpers, under both
// profiles: the Ack, GetSession and a projection fed by a subscription
// agree on the state reached (RFC-MACP-0001 §7.2-7.5; docs/spec-decisions.md
// "Profiles": a cancel ends CANCELLED under 2026-09, EXPIRED under 2026-04).
func TestSuspendResumeCancelBothProfiles(t *testing.T) {
	for _, tc := range []struct {
		profile   string // the runtime's setting
		want      string // Client.Profile
		cancelled macpv1.SessionState
	}{
		{"", sdk.ProfileApril, macpv1.SessionState_SESSION_STATE_EXPIRED},
		{"2026-04", sdk.ProfileApril, macpv1.SessionState_SESSION_STATE_EXPIRED},
		{"latest", sdk.ProfileLatest, macpv1.SessionState_SESSION_STATE_CANCELLED},
	} {
		t.Run("profile="+tc.profile, func(t *testing.T) {
			a := startApp(t, func(c *config.Config) {
				if tc.profile != "" {
					c.Profile = tc.profile
				}
			})
			ctx := ctxT(t)
			coord, alice := dial(t, a.Addr(), "coord"), dial(t, a.Addr(), "alice")
			if p, err := coord.Profile(ctx); err != nil || p != tc.want {
				t.Fatalf("Profile() = %q, %v; want %q", p, err, tc.want)
			}
			d := startDecision(t, coord, "coord", "alice")
			state := func(want macpv1.SessionState) {
				t.Helper()
				md, err := coord.GetSession(ctx, d.ID)
				if err != nil || md.State != want {
					t.Fatalf("GetSession: %v %v; want %s", md.GetState(), err, want)
				}
			}
			_, err := alice.Decision(d.ID).Suspend(ctx, "not mine")
			wantCode(t, err, sdk.CodeForbidden)
			_, err = d.Resume(ctx, "not suspended")
			wantCode(t, err, sdk.CodeSessionNotOpen)

			ack := mustOK(t, "suspend")(d.Suspend(ctx, "waiting for legal"))
			if ack.SessionState != macpv1.SessionState_SESSION_STATE_SUSPENDED {
				t.Fatalf("suspend ack state %s", ack.SessionState)
			}
			state(macpv1.SessionState_SESSION_STATE_SUSPENDED)
			_, err = alice.Decision(d.ID).Propose(ctx, "p1", "x", "")
			wantCode(t, err, sdk.CodeSessionNotOpen)
			_, err = d.Suspend(ctx, "twice")
			wantCode(t, err, sdk.CodeSessionNotOpen)

			ack = mustOK(t, "resume")(d.Resume(ctx, "legal said yes"))
			if ack.SessionState != macpv1.SessionState_SESSION_STATE_OPEN {
				t.Fatalf("resume ack state %s", ack.SessionState)
			}
			state(macpv1.SessionState_SESSION_STATE_OPEN)
			mustOK(t, "propose")(alice.Decision(d.ID).Propose(ctx, "p1", "x", ""))
			mustOK(t, "suspend again")(d.Suspend(ctx, "again"))

			ack = mustOK(t, "cancel")(d.Cancel(ctx, "dropped"))
			if ack.SessionState != tc.cancelled {
				t.Fatalf("cancel ack state %s, want %s", ack.SessionState, tc.cancelled)
			}
			state(tc.cancelled)

			proj := sdk.NewDecisionProjection()
			proj.Profile = tc.want
			var states []macpv1.SessionState
			sub := d.Subscribe(ctx, 0)
			defer sub.Close()
			for ev, err := range sub.All() {
				if err != nil {
					t.Fatal(err)
				}
				if err := proj.Apply(ev.Envelope); err != nil {
					t.Fatalf("seq %d: %v", ev.Seq, err)
				}
				states = append(states, proj.State())
			}
			const (
				open      = macpv1.SessionState_SESSION_STATE_OPEN
				suspended = macpv1.SessionState_SESSION_STATE_SUSPENDED
			)
			want := []macpv1.SessionState{open, suspended, open, open, suspended, tc.cancelled}
			if len(states) != len(want) {
				t.Fatalf("projected states %v, want %v", states, want)
			}
			for i := range want {
				if states[i] != want[i] {
					t.Fatalf("projected states %v, want %v", states, want)
				}
			}
			if proj.CancelReason != "dropped" || proj.Accepting() {
				t.Fatalf("projection after cancel: %+v", proj.SessionView)
			}
		})
	}
}

// The projection's State follows the records alone, by profile; Eligible
// and CanPropose say no while SUSPENDED.
func TestProjectionStateByProfile(t *testing.T) {
	for _, tc := range []struct {
		profile string
		want    macpv1.SessionState
	}{
		{"", macpv1.SessionState_SESSION_STATE_EXPIRED},
		{sdk.ProfileApril, macpv1.SessionState_SESSION_STATE_EXPIRED},
		{sdk.ProfileLatest, macpv1.SessionState_SESSION_STATE_CANCELLED},
		{sdk.ProfileLatestAlias, macpv1.SessionState_SESSION_STATE_CANCELLED},
	} {
		p := sdk.NewDecisionProjection()
		p.Profile = tc.profile
		if p.State() != macpv1.SessionState_SESSION_STATE_UNSPECIFIED {
			t.Fatalf("before start: %s", p.State())
		}
		start, _ := sdk.NewSessionStart("s1", sdk.DecisionMode, sdk.StartPayload{Participants: []string{"a"}, TTL: time.Minute})
		start.Sender = "coord"
		prop := accepted("a", "s1", sdk.DecisionMode, sdk.TypeProposal, nil)
		if err := sdk.ApplyAll(p, start, prop); err != nil {
			t.Fatal(err)
		}
		if p.State() != macpv1.SessionState_SESSION_STATE_OPEN || !p.Accepting() || !p.CanPropose("a") {
			t.Fatalf("%q: open: %s", tc.profile, p.State())
		}
		// The unlisted initiator proposes under 2026-04 only (decision C3).
		if got, want := p.CanPropose("coord"), !p.Latest(); got != want {
			t.Errorf("%q: CanPropose(initiator) = %v", tc.profile, got)
		}
		if pos, neg := p.Eligible(); !pos || !neg {
			t.Fatalf("%q: not eligible with a proposal", tc.profile)
		}
		if err := p.Apply(accepted("_runtime", "s1", sdk.DecisionMode, sdk.TypeSessionSuspend, &macpv1.SessionSuspendPayload{})); err != nil {
			t.Fatal(err)
		}
		if p.State() != macpv1.SessionState_SESSION_STATE_SUSPENDED || p.Accepting() || p.CanPropose("a") {
			t.Fatalf("%q: suspended: %s", tc.profile, p.State())
		}
		if pos, neg := p.Eligible(); pos || neg {
			t.Fatalf("%q: eligible while suspended", tc.profile)
		}
		if err := p.Apply(accepted("_runtime", "s1", sdk.DecisionMode, sdk.TypeSessionResume, &macpv1.SessionResumePayload{})); err != nil {
			t.Fatal(err)
		}
		if p.State() != macpv1.SessionState_SESSION_STATE_OPEN {
			t.Fatalf("%q: resumed: %s", tc.profile, p.State())
		}
		if err := p.Apply(accepted("_runtime", "s1", sdk.DecisionMode, sdk.TypeSessionCancel, &macpv1.SessionCancelPayload{Reason: "x"})); err != nil {
			t.Fatal(err)
		}
		if p.State() != tc.want {
			t.Fatalf("%q: cancelled: %s, want %s", tc.profile, p.State(), tc.want)
		}
	}
}

// ListSessionsPage walks every session once, in pages.
func TestListSessionsPage(t *testing.T) {
	a := startApp(t)
	ctx := ctxT(t)
	coord := dial(t, a.Addr(), "coord")
	ids := map[string]bool{}
	for range 5 {
		ids[startDecision(t, coord, "alice").ID] = true
	}
	seen := map[string]bool{}
	token, pages := "", 0
	for {
		ss, next, err := coord.ListSessionsPage(ctx, 2, token)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(ss) > 2 {
			t.Fatalf("page of %d", len(ss))
		}
		for _, md := range ss {
			if seen[md.SessionId] {
				t.Fatalf("%s listed twice", md.SessionId)
			}
			seen[md.SessionId] = true
		}
		if next == "" {
			break
		}
		token = next
	}
	if pages != 3 || len(seen) != len(ids) {
		t.Fatalf("%d pages, %d sessions", pages, len(seen))
	}
	all, next, err := coord.ListSessionsPage(ctx, 0, "")
	if err != nil || len(all) != 5 || next != "" {
		t.Fatalf("one page: %d %q %v", len(all), next, err)
	}
	if _, _, err := coord.ListSessionsPage(ctx, -1, ""); err == nil {
		t.Fatal("negative page size accepted")
	}
}

// A Commitment that supersedes another session's carries its canonical
// hash; under 2026-09 a malformed hash is refused.
func TestCommitSupersedes(t *testing.T) {
	a := startApp(t, func(c *config.Config) { c.Profile = "latest" })
	ctx := ctxT(t)
	coord, alice := dial(t, a.Addr(), "coord"), dial(t, a.Addr(), "alice")
	resolve := func(opts ...sdk.CommitOption) (*sdk.DecisionSession, error) {
		d := startDecision(t, coord, "alice")
		mustOK(t, "propose")(alice.Decision(d.ID).Propose(ctx, "p1", "x", ""))
		_, err := d.CommitOutcome(ctx, "decision.selected", true, "ok", opts...)
		return d, err
	}
	first, err := resolve()
	if err != nil {
		t.Fatal(err)
	}
	prior, err := coord.ResolvingCommitment(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	second, err := resolve(sdk.SupersedesSession(coord, first.ID))
	if err != nil {
		t.Fatal(err)
	}
	got, err := coord.ResolvingCommitment(ctx, second.ID)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := sdk.CommitmentHash(prior)
	if got.Supersedes.GetSessionId() != first.ID || got.Supersedes.GetCommitmentHash() != want {
		t.Fatalf("supersedes %v, want %s %s", got.Supersedes, first.ID, want)
	}
	// The projection's CommitmentRef is the same reference.
	proj := sdk.NewDecisionProjection()
	sub := first.Subscribe(ctx, 0)
	for ev, err := range sub.All() {
		if err != nil {
			t.Fatal(err)
		}
		if err := proj.Apply(ev.Envelope); err != nil {
			t.Fatal(err)
		}
	}
	sub.Close()
	if ref, err := proj.CommitmentRef(); err != nil || ref.CommitmentHash != want || ref.SessionId != first.ID {
		t.Fatalf("CommitmentRef = %v, %v", ref, err)
	}
	_, err = resolve(sdk.SupersedesHash(first.ID, "sha256:NOTHEX"))
	wantCode(t, err, sdk.CodeInvalidEnvelope)
	if _, err := resolve(sdk.SupersedesSession(coord, second.ID+"x")); err == nil {
		t.Fatal("superseding an unknown session")
	}
	open := startDecision(t, coord, "alice")
	if _, err := coord.ResolvingCommitment(ctx, open.ID); err == nil {
		t.Fatal("an OPEN session's Commitment")
	}
}
