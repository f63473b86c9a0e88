package modetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/mode"

	"github.com/macpd/macpd/internal/policy"
)

// Binding uses policy.default for empty rules and the named policy
// otherwise; rules that do not parse panic when there is no test to fail.
func TestBinding(t *testing.T) {
	b := Binding(t, "macp.mode.decision.v1", "1.0.0", "policy.test.x", "", "agent://i", []string{"agent://a"})
	if b.PolicyVersion != policy.MustDefault().Descriptor.ID || b.Initiator != "agent://i" || b.SessionID != "s1" {
		t.Fatalf("default binding %+v", b)
	}
	b = Binding(t, "macp.mode.decision.v1", "1.0.0", "policy.test.x", `{"voting":{"algorithm":"majority"}}`, "agent://i", nil)
	if b.PolicyVersion != "policy.test.x" || b.Policy.Descriptor.Mode != "macp.mode.decision.v1" {
		t.Fatalf("policy binding %+v", b)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("bad rules without a test did not panic")
		}
	}()
	Binding(nil, "macp.mode.decision.v1", "1.0.0", "policy.test.x", `not json`, "agent://i", nil)
}

// recTB records failures instead of ending the test; Fatalf stops the
// helper like testing.T does (runtime.Goexit), here by panicking.
type recTB struct {
	testing.TB
	failed []string
}

type fatal struct{}

func (r *recTB) Helper() {}
func (r *recTB) Errorf(f string, a ...any) {
	r.failed = append(r.failed, fmt.Sprintf(f, a...))
}
func (r *recTB) Fatalf(f string, a ...any) {
	r.failed = append(r.failed, fmt.Sprintf(f, a...))
	panic(fatal{})
}

func runRec(fn func(tb testing.TB)) (failed []string) {
	r := &recTB{}
	defer func() {
		if v := recover(); v != nil && v != (fatal{}) {
			panic(v)
		}
		failed = r.failed
	}()
	fn(r)
	return r.failed
}

// RejectUnchanged passes a clean rejection, and reports an accepted input
// and a rejection that changed the state; Apply reports a rejection.
func TestRejectUnchangedAndApply(t *testing.T) {
	b := Binding(t, "ext.toy.v1", "1.0.0", "", "", "agent://i", nil)
	add := func(p string) Input {
		return Input{Msg: mode.Message{Type: "Add", ID: p, Sender: "agent://i", Payload: []byte(p)}}
	}
	st, _ := (&toy{}).Start(b)
	if f := runRec(func(tb testing.TB) { RejectUnchanged(tb, st, b, add("bad")) }); len(f) != 0 {
		t.Fatalf("clean rejection reported: %v", f)
	}
	if f := runRec(func(tb testing.TB) { RejectUnchanged(tb, st, b, add("good")) }); len(f) != 1 || !strings.Contains(f[0], "accepted") {
		t.Fatalf("accepted input: %v", f)
	}
	buggy, _ := (&toy{mutateOnReject: true}).Start(b)
	if f := runRec(func(tb testing.TB) { RejectUnchanged(tb, buggy, b, add("bad")) }); len(f) != 1 || !strings.Contains(f[0], "changed the state") {
		t.Fatalf("mutating rejection: %v", f)
	}
	if f := runRec(func(tb testing.TB) { Apply(tb, st, b, add("ok"), add("bad")) }); len(f) != 1 {
		t.Fatalf("Apply of a rejected input: %v", f)
	}
}
