package handoff_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	handoffv1 "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/handoff"
	"github.com/macpd/macpd/internal/mode/modetest"
)

func bindAt(t testing.TB, profile, rules string, v uint32) *mode.Binding {
	return modetest.BindingAt(t, handoff.ModeID, handoff.ModeVersion, "policy.test.rules", rules, v, profile, owner, []string{owner, target, backup})
}

func implicitAcceptIn(sender, id string) modetest.Input {
	return modetest.Input{Msg: msg(handoff.TypeAccept, sender, marshal(&handoffv1.HandoffAcceptPayload{HandoffId: id, AcceptedBy: sender, Reason: "ready", Implicit: true}))}
}

func start(t *testing.T, m mode.Mode, b *mode.Binding, ins ...modetest.Input) mode.State {
	t.Helper()
	st, err := m.Start(b)
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range ins {
		if err := st.Step(b, &in.Msg); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	return st
}

// Late HandoffContext: refused under ProfileApril (April fixture
// handoff_reject_paths), accepted and marked late under ProfileLatest
// (RFC-MACP-0010 §2.1; newest fixture handoff_reject_paths).
func TestLateContextByProfile(t *testing.T) {
	for _, c := range []struct {
		profile string
		want    coord.Code
	}{{coord.ProfileApril, coord.CodeInvalidEnvelope}, {coord.ProfileLatest, ""}} {
		b := bindAt(t, c.profile, "", 1)
		st := start(t, handoff.New(), b, offerIn(owner, "h1", target), acceptIn(target, "h1", target))
		in := contextIn(owner, "h1")
		before := st.Project()
		err := st.Step(b, &in.Msg)
		if coord.CodeOf(err) != c.want {
			t.Fatalf("%s: late context: %v, want %q", c.profile, err, c.want)
		}
		if err != nil {
			if e := modetest.MatchSubset(st.Project(), before); e != nil {
				t.Errorf("refused context changed state: %v", e)
			}
			continue
		}
		ctx := st.Project()["contexts"].([]any)
		if len(ctx) != 1 || ctx[0].(map[string]any)["late"] != true {
			t.Errorf("%s: contexts = %v, want one late", c.profile, ctx)
		}
	}
}

// A client-sent HandoffAccept with implicit=true is INVALID_ENVELOPE under
// both profiles and changes nothing (RFC-MACP-0010 §5.1).
func TestClientImplicitAcceptRefused(t *testing.T) {
	for _, profile := range []string{coord.ProfileApril, coord.ProfileLatest} {
		b := bindAt(t, profile, "", 1)
		st := start(t, handoff.New(), b, offerIn(owner, "h1", target))
		modetest.RejectUnchanged(t, st, b, implicitAcceptIn(target, "h1"))
		in := implicitAcceptIn(target, "h1")
		if err := st.Step(b, &in.Msg); coord.CodeOf(err) != coord.CodeInvalidEnvelope {
			t.Errorf("%s: %v, want INVALID_ENVELOPE", profile, err)
		}
		// The explicit accept still works afterwards.
		in = acceptIn(target, "h1", target)
		if err := st.Step(b, &in.Msg); err != nil {
			t.Errorf("%s: explicit accept after the refused implicit one: %v", profile, err)
		}
	}
}

// The runtime-side implicit accept: the policy timeout, when it is due,
// the synthetic message for the pending offer, and StepImplicit applying
// it so a positive Commitment becomes eligible.
func TestImplicitAccept(t *testing.T) {
	rules := `{"acceptance":{"implicit_accept_timeout_ms":100}}`
	b := bindAt(t, coord.ProfileLatest, rules, 3)
	if _, err := handoff.New().Start(b); coord.CodeOf(err) != coord.CodeInvalidPolicyDefinition {
		t.Fatalf("without the runtime timer a timeout > 0 must be refused: %v", err)
	}
	m := handoff.NewWithOptions(handoff.Options{ImplicitAccept: true})
	if err := m.(mode.RulesValidator).ValidateRules(b.Policy); err != nil {
		t.Fatalf("ValidateRules with the timer: %v", err)
	}
	timeout, err := handoff.ImplicitAcceptTimeout(b.Policy)
	if err != nil || timeout != 100 {
		t.Fatalf("ImplicitAcceptTimeout = %d, %v", timeout, err)
	}
	for _, c := range []struct {
		timeout      uint64
		offered, now int64
		due          bool
	}{{100, 1000, 1099, false}, {100, 1000, 1100, true}, {100, 1000, 5000, true}, {0, 1000, 99999, false}, {100, 1000, 900, false}} {
		if got := handoff.ImplicitAcceptDue(c.timeout, c.offered, c.now); got != c.due {
			t.Errorf("ImplicitAcceptDue(%d, %d, %d) = %v", c.timeout, c.offered, c.now, got)
		}
	}

	st := start(t, m, b)
	ia := st.(handoff.ImplicitAccepter)
	if _, ok := ia.PendingImplicitAccept(); ok {
		t.Fatal("no offer pending, nothing to accept implicitly")
	}
	in := offerIn(owner, "h1", target)
	if err := st.Step(b, &in.Msg); err != nil {
		t.Fatal(err)
	}
	syn, ok := ia.PendingImplicitAccept()
	var p handoffv1.HandoffAcceptPayload
	if !ok || syn.Sender != target || syn.Type != handoff.TypeAccept || proto.Unmarshal(syn.Payload, &p) != nil ||
		!p.Implicit || p.HandoffId != "h1" || p.AcceptedBy != target || p.Reason != handoff.ImplicitReason {
		t.Fatalf("PendingImplicitAccept = %+v %v (%v)", syn, ok, &p)
	}
	// StepImplicit refuses anything but the synthetic accept of the pending offer.
	for _, bad := range []modetest.Input{acceptIn(target, "h1", target), implicitAcceptIn(target, "h2"), implicitAcceptIn(backup, "h1")} {
		before := st.Project()
		if err := ia.StepImplicit(b, &bad.Msg); coord.CodeOf(err) != coord.CodeInvalidEnvelope {
			t.Errorf("StepImplicit(%s) = %v, want INVALID_ENVELOPE", bad, err)
		}
		if e := modetest.MatchSubset(st.Project(), before); e != nil {
			t.Errorf("refused StepImplicit changed state: %v", e)
		}
	}
	if err := ia.StepImplicit(b, &syn); err != nil {
		t.Fatalf("StepImplicit: %v", err)
	}
	view := st.Project()
	if err := modetest.MatchSubset(view, map[string]any{"phase": "Accepted", "offers": map[string]any{"h1": map[string]any{"disposition": "Accepted", "implicit": true}}}); err != nil {
		t.Error(err)
	}
	if _, ok := ia.PendingImplicitAccept(); ok {
		t.Error("the offer is no longer pending")
	}
	c := commitIn(owner, true)
	if err := st.Commit(b, &c.Msg, c.Commitment); err != nil {
		t.Errorf("positive Commitment after an implicit accept: %v", err)
	}
}
