package crashtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/bench/loadgen"
	"github.com/macpd/macpd/sdk"
)

// fixture is one synthetic session: what was sent, and what the server
// serves back.
type fixture struct {
	sid   string
	recs  []*sendRec
	ctrls []*ctrlRec
	sends map[string]*sendRec
	view  *sessionView
}

// newFixture sends SessionStart then types..., each acked and answered
// before the next starts, and serves them back in order.
func newFixture(types ...string) *fixture {
	fx := &fixture{sid: "s1", sends: map[string]*sendRec{}, view: &sessionView{meta: &macpv1.SessionMetadata{
		SessionId: "s1", Initiator: initiator, State: macpv1.SessionState_SESSION_STATE_OPEN,
	}}}
	t0 := time.Unix(1000, 0)
	for i, typ := range append([]string{sdk.TypeSessionStart}, types...) {
		rec := &sendRec{sid: fx.sid, mid: fmt.Sprintf("m%d", i), typ: typ, sender: initiator,
			payload: []byte{byte(i)}, start: t0.Add(time.Duration(2*i) * time.Millisecond),
			end: t0.Add(time.Duration(2*i+1) * time.Millisecond), out: acked}
		fx.recs = append(fx.recs, rec)
		fx.sends[rec.mid] = rec
		fx.view.hist = append(fx.view.hist, fx.env(rec))
		if typ == sdk.TypeCommitment {
			fx.view.meta.State = macpv1.SessionState_SESSION_STATE_RESOLVED
		}
	}
	fx.view.seq = uint64(len(fx.view.hist))
	return fx
}

func (fx *fixture) env(rec *sendRec) *macpv1.Envelope {
	return &macpv1.Envelope{SessionId: rec.sid, MessageId: rec.mid, MessageType: rec.typ, Sender: rec.sender, Payload: rec.payload}
}

func (fx *fixture) check() *findings {
	var entries []loadgen.Acked
	for i, rec := range fx.recs {
		if rec.out == acked {
			entries = append(entries, loadgen.Acked{SessionID: fx.sid, MessageID: rec.mid, Stream: "0", Line: i + 1})
		}
	}
	f := &findings{}
	checkSession(f, fx.sid, fx.view, fx.recs, fx.ctrls, entries, fx.sends, true, true)
	return f
}

// The checks find every kind of damage they are meant to (and nothing in
// an intact session): a crash test that cannot fail proves nothing.
func TestCheckerFindsDamage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(fx *fixture)
		want   func(f *findings) bool
		text   string
	}{
		{"intact", func(*fixture) {}, func(f *findings) bool { return f.ok() && f.Checked == 4 }, ""},
		{"intact-resolved", func(fx *fixture) {
			rec := &sendRec{sid: fx.sid, mid: "c", typ: sdk.TypeCommitment, sender: initiator, start: time.Unix(2000, 0), end: time.Unix(2001, 0), out: acked}
			fx.recs, fx.sends["c"] = append(fx.recs, rec), rec
			fx.view.hist = append(fx.view.hist, fx.env(rec))
			fx.view.seq++
			fx.view.meta.State = macpv1.SessionState_SESSION_STATE_RESOLVED
		}, func(f *findings) bool { return f.ok() }, ""},
		{"lost", func(fx *fixture) {
			fx.view.hist = fx.view.hist[:3]
			fx.view.seq = 3
		}, func(f *findings) bool { return f.Lost == 1 }, "LOST"},
		{"session-lost", func(fx *fixture) { fx.view = &sessionView{} }, func(f *findings) bool { return f.Lost == 4 }, "does not exist"},
		{"duplicated", func(fx *fixture) {
			fx.view.hist = append(fx.view.hist, fx.view.hist[1])
			fx.view.seq++
		}, func(f *findings) bool { return f.Duplicated == 1 }, "DUPLICATED"},
		{"unacked-duplicated", func(fx *fixture) {
			fx.recs[3].out = unknown
			fx.view.hist = append(fx.view.hist, fx.view.hist[3])
			fx.view.seq++
		}, func(f *findings) bool { return f.Duplicated == 1 }, "DUPLICATED"},
		{"reordered", func(fx *fixture) {
			h := fx.view.hist
			h[1], h[2] = h[2], h[1]
		}, func(f *findings) bool { return f.OutOfOrder >= 1 }, "OUT-OF-ORDER"},
		{"reordered-after-unanswered", func(fx *fixture) {
			// m3 got no answer but is in history, before m2 that was
			// acked before m3 was sent.
			fx.recs[3].out = unknown
			h := fx.view.hist
			h[2], h[3] = h[3], h[2]
		}, func(f *findings) bool { return f.OutOfOrder == 1 }, "OUT-OF-ORDER"},
		{"never-sent", func(fx *fixture) {
			fx.view.hist = append(fx.view.hist, &macpv1.Envelope{SessionId: fx.sid, MessageId: "ghost", MessageType: "Evaluation"})
			fx.view.seq++
		}, func(f *findings) bool { return f.Phantom == 1 }, "PHANTOM"},
		{"refused-but-present", func(fx *fixture) {
			fx.recs[3].out, fx.recs[3].code = rejected, "SESSION_NOT_OPEN"
		}, func(f *findings) bool { return f.Phantom == 1 }, "refused"},
		{"altered", func(fx *fixture) {
			fx.view.hist[2] = fx.env(&sendRec{sid: fx.sid, mid: "m2", typ: "Evaluation", sender: "p1", payload: []byte("other")})
		}, func(f *findings) bool { return f.Phantom == 1 }, "ALTERED"},
		{"gap", func(fx *fixture) { fx.view.seq++ }, func(f *findings) bool { return f.Gaps == 1 }, "last sequence"},
		{"not-session-start", func(fx *fixture) {
			fx.view.hist = fx.view.hist[1:]
			fx.view.seq--
		}, func(f *findings) bool { return f.Lost == 1 && !f.ok() }, "not SessionStart"},
		{"resolved-without-commitment", func(fx *fixture) {
			fx.view.meta.State = macpv1.SessionState_SESSION_STATE_RESOLVED
		}, func(f *findings) bool { return f.BadState == 1 }, "state"},
		{"acked-commitment-open", func(fx *fixture) {
			rec := &sendRec{sid: fx.sid, mid: "c", typ: sdk.TypeCommitment, sender: initiator, start: time.Unix(2000, 0), end: time.Unix(2001, 0), out: acked}
			fx.recs, fx.sends["c"] = append(fx.recs, rec), rec
		}, func(f *findings) bool { return f.Lost == 1 && f.BadState == 1 }, "Commitment c acked"},
		{"unanswered-absent-is-fine", func(fx *fixture) {
			rec := &sendRec{sid: fx.sid, mid: "u", typ: "Evaluation", start: time.Unix(2000, 0), end: time.Unix(2001, 0), out: unknown}
			fx.recs, fx.sends["u"] = append(fx.recs, rec), rec
		}, func(f *findings) bool { return f.ok() && f.UnknownAbsent == 1 }, ""},
		{"unanswered-present-is-fine", func(fx *fixture) {
			fx.recs[3].out = unknown
		}, func(f *findings) bool { return f.ok() && f.UnknownPresent == 1 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(sdk.TypeProposal, "Evaluation", "Evaluation")
			tc.damage(fx)
			f := fx.check()
			all := strings.Join(f.problems, "\n")
			if !tc.want(f) || !strings.Contains(all, tc.text) {
				t.Errorf("findings %+v\nproblems:\n%s", *f, all)
			}
		})
	}
}
