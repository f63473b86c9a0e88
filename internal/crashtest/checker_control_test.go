package crashtest

import (
	"strings"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/sdk"
)

// control appends a control call of record type typ, answered with
// outcome out (acked: with the message id mid and state), and, when
// stored, the runtime's record to the served history.
func (fx *fixture) control(typ, mid string, out outcome, state macpv1.SessionState, stored bool) *ctrlRec {
	at := time.Unix(3000, 0).Add(time.Duration(len(fx.ctrls)*2) * time.Millisecond)
	c := &ctrlRec{sid: fx.sid, typ: typ, start: at, end: at.Add(time.Millisecond), out: out}
	if out == acked {
		c.mid, c.state = mid, state
	}
	fx.ctrls = append(fx.ctrls, c)
	if stored {
		fx.view.hist = append(fx.view.hist, &macpv1.Envelope{SessionId: fx.sid, MessageId: mid, MessageType: typ, Sender: coord.RuntimeSender})
		fx.view.seq++
		fx.view.meta.State = state
	}
	return c
}

const (
	stOpen      = macpv1.SessionState_SESSION_STATE_OPEN
	stSuspended = macpv1.SessionState_SESSION_STATE_SUSPENDED
	stExpired   = macpv1.SessionState_SESSION_STATE_EXPIRED
	stCancelled = macpv1.SessionState_SESSION_STATE_CANCELLED
	stResolved  = macpv1.SessionState_SESSION_STATE_RESOLVED
)

// The checks of suspend, resume and cancel records find every kind of
// damage they are meant to, per profile, and accept intact histories and
// calls that got no answer either way.
func TestCheckerFindsControlDamage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile string
		build   func(fx *fixture)
		want    func(f *findings) bool
		text    string
	}{
		{"intact-april", coord.ProfileApril, func(fx *fixture) {
			fx.control(coord.TypeSessionSuspend, "s1", acked, stSuspended, true)
			fx.control(coord.TypeSessionResume, "r1", acked, stOpen, true)
			fx.control(coord.TypeSessionSuspend, "s2", acked, stSuspended, true)
			fx.control(coord.TypeSessionCancel, "c1", acked, stExpired, true)
		}, func(f *findings) bool { return f.ok() && f.Checked == 8 && f.Gaps == 0 }, ""},
		{"intact-latest", coord.ProfileLatest, func(fx *fixture) {
			fx.control(coord.TypeSessionSuspend, "s1", acked, stSuspended, true)
			fx.control(coord.TypeSessionCancel, "c1", acked, stCancelled, true)
		}, func(f *findings) bool { return f.ok() }, ""},
		{"intact-suspended", coord.ProfileLatest, func(fx *fixture) {
			fx.control(coord.TypeSessionSuspend, "s1", acked, stSuspended, true)
		}, func(f *findings) bool { return f.ok() }, ""},
		{"unknown-profile-either-cancel-state", "", func(fx *fixture) {
			fx.control(coord.TypeSessionCancel, "c1", acked, stCancelled, true)
		}, func(f *findings) bool { return f.ok() }, ""},
		{"latest-cancel-expired", coord.ProfileLatest, func(fx *fixture) {
			fx.control(coord.TypeSessionCancel, "c1", acked, stExpired, true)
		}, func(f *findings) bool { return f.BadState == 2 }, "acked with state SESSION_STATE_EXPIRED, want SESSION_STATE_CANCELLED"},
		{"april-cancel-cancelled", coord.ProfileApril, func(fx *fixture) {
			fx.control(coord.TypeSessionCancel, "c1", acked, stCancelled, true)
		}, func(f *findings) bool { return f.BadState == 2 }, "says SESSION_STATE_EXPIRED"},
		{"acked-suspend-lost", coord.ProfileApril, func(fx *fixture) {
			fx.control(coord.TypeSessionSuspend, "s1", acked, stSuspended, false)
		}, func(f *findings) bool { return f.Lost == 1 && f.BadState == 0 }, "LOST: session s1: SessionSuspend s1"},
		{"acked-resume-lost-state-stays-suspended", coord.ProfileLatest, func(fx *fixture) {
			fx.control(coord.TypeSessionSuspend, "s1", acked, stSuspended, true)
			fx.control(coord.TypeSessionResume, "r1", acked, stOpen, false)
			fx.view.meta.State = stSuspended
		}, func(f *findings) bool { return f.Lost == 1 }, "SessionResume r1"},
		{"acked-cancel-lost-session-open", coord.ProfileLatest, func(fx *fixture) {
			fx.control(coord.TypeSessionCancel, "c1", acked, stCancelled, false)
		}, func(f *findings) bool { return f.Lost == 1 }, "SessionCancel c1"},
		{"control-record-duplicated", coord.ProfileApril, func(fx *fixture) {
			fx.control(coord.TypeSessionSuspend, "s1", acked, stSuspended, true)
			fx.view.hist = append(fx.view.hist, fx.view.hist[len(fx.view.hist)-1])
			fx.view.seq++
		}, func(f *findings) bool { return f.Duplicated == 1 }, "appears 2 times"},
		{"phantom-suspend", coord.ProfileApril, func(fx *fixture) {
			fx.control(coord.TypeSessionSuspend, "ghost", rejected, stSuspended, true)
		}, func(f *findings) bool { return f.Phantom == 1 }, "PHANTOM"},
		{"unanswered-suspend-present-is-fine", coord.ProfileApril, func(fx *fixture) {
			c := fx.control(coord.TypeSessionSuspend, "s1", acked, stSuspended, true)
			c.out, c.mid, c.state = unknown, "", 0
		}, func(f *findings) bool { return f.ok() && f.UnknownPresent == 1 }, ""},
		{"unanswered-cancel-absent-is-fine", coord.ProfileLatest, func(fx *fixture) {
			fx.control(coord.TypeSessionCancel, "", unknown, 0, false)
		}, func(f *findings) bool { return f.ok() && f.UnknownAbsent == 1 }, ""},
		{"record-type-differs-from-call", coord.ProfileApril, func(fx *fixture) {
			c := fx.control(coord.TypeSessionSuspend, "s1", acked, stSuspended, true)
			c.typ = coord.TypeSessionResume
			c.state = stOpen
		}, func(f *findings) bool { return f.Phantom == 1 }, "ALTERED"},
		{"suspend-after-resume-reordered", coord.ProfileApril, func(fx *fixture) {
			fx.control(coord.TypeSessionSuspend, "s1", acked, stSuspended, true)
			fx.control(coord.TypeSessionResume, "r1", acked, stOpen, true)
			h := fx.view.hist
			h[len(h)-1], h[len(h)-2] = h[len(h)-2], h[len(h)-1]
			fx.view.meta.State = stSuspended
		}, func(f *findings) bool { return f.OutOfOrder == 1 }, "OUT-OF-ORDER"},
		{"suspended-served-as-open", coord.ProfileApril, func(fx *fixture) {
			fx.control(coord.TypeSessionSuspend, "s1", acked, stSuspended, true)
			fx.view.meta.State = stOpen
		}, func(f *findings) bool { return f.BadState == 1 }, "says SESSION_STATE_SUSPENDED"},
		{"record-after-cancel", coord.ProfileLatest, func(fx *fixture) {
			fx.control(coord.TypeSessionCancel, "c1", acked, stCancelled, true)
			rec := &sendRec{sid: fx.sid, mid: "late", typ: "Evaluation", sender: "p2", start: time.Unix(4000, 0), end: time.Unix(4001, 0), out: unknown}
			fx.recs, fx.sends["late"] = append(fx.recs, rec), rec
			fx.view.hist = append(fx.view.hist, fx.env(rec))
			fx.view.seq++
		}, func(f *findings) bool { return f.BadState == 1 }, "1 ending records"},
		{"commit-after-resume", coord.ProfileLatest, func(fx *fixture) {
			fx.control(coord.TypeSessionSuspend, "s1", acked, stSuspended, true)
			fx.control(coord.TypeSessionResume, "r1", acked, stOpen, true)
			rec := &sendRec{sid: fx.sid, mid: "c", typ: sdk.TypeCommitment, sender: initiator, start: time.Unix(4000, 0), end: time.Unix(4001, 0), out: acked}
			fx.recs, fx.sends["c"] = append(fx.recs, rec), rec
			fx.view.hist = append(fx.view.hist, fx.env(rec))
			fx.view.seq++
			fx.view.meta.State = stResolved
		}, func(f *findings) bool { return f.ok() }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(sdk.TypeProposal, "Evaluation", "Evaluation")
			fx.view.profile = tc.profile
			tc.build(fx)
			f := fx.check()
			all := strings.Join(f.problems, "\n")
			if !tc.want(f) || !strings.Contains(all, tc.text) {
				t.Errorf("findings %+v\nproblems:\n%s", *f, all)
			}
		})
	}
}

// The profile a session must be bound to is that of the incarnation that
// both received and answered its SessionStart; a SessionStart whose
// answer straddled a restart leaves it unknown.
func TestExpectedProfile(t *testing.T) {
	d := &daemon{profiles: []string{"", "latest", coord.ProfileApril, coord.ProfileLatest}}
	for n, want := range []string{1: coord.ProfileApril, 2: coord.ProfileLatest, 3: coord.ProfileApril, 4: coord.ProfileLatest, 5: coord.ProfileApril, 6: coord.ProfileLatest} {
		if n > 0 && d.profileOf(n) != want {
			t.Fatalf("incarnation %d: profile %s, want %s", n, d.profileOf(n), want)
		}
	}
	start := func(inc0, inc1 int, out outcome) []*sendRec {
		return []*sendRec{{typ: sdk.TypeSessionStart, inc0: inc0, inc1: inc1, out: out}, {typ: sdk.TypeProposal, inc0: 9, inc1: 9, out: acked}}
	}
	for _, c := range []struct {
		recs []*sendRec
		want string
	}{
		{start(2, 2, acked), coord.ProfileLatest},
		{start(3, 3, unknown), coord.ProfileApril},
		{start(2, 3, unknown), ""},
		{start(1, 2, acked), ""},
		{start(2, 2, rejected), ""},
	} {
		if got := expectedProfile(c.recs, d.profileOf); got != c.want {
			t.Fatalf("SessionStart %+v: profile %q, want %q", *c.recs[0], got, c.want)
		}
	}
}
