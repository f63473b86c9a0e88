package runtime

// RFC-MACP-0010 §5.1, RFC-MACP-0012 §4.5: a handoff offer left unanswered
// for acceptance.implicit_accept_timeout_ms is accepted by the runtime on
// its target's behalf, once, as a runtime-emitted record that replays; a
// TTL deadline that comes first expires the session instead.

import (
	"context"
	"testing"
	"time"

	handoffv1 "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/handoff"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/replay/verify"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

func TestHandoffImplicitAccept(t *testing.T) {
	clk := clocktest.New()
	st := newFaultStore()
	modes := mode.NewRegistry(mode.Entry{Mode: handoff.NewWithOptions(handoff.Options{ImplicitAccept: true}), Kind: mode.Standard, BuiltIn: true})
	reg := registry.New(st, modes, policy.DefaultOnly{}, registry.Options{Clock: clk})
	r := New(st, reg, reg, Options{Clock: clk})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	admin := coord.Identity{Sender: "admin", Caps: coord.Capabilities{CanManageModeRegistry: true}}
	if err := reg.RegisterPolicy(admin, &macpv1.PolicyDescriptor{PolicyId: "policy.handoff.implicit", Mode: handoff.ModeID, SchemaVersion: 1,
		Rules: `{"acceptance":{"implicit_accept_timeout_ms":1000}}`}); err != nil {
		t.Fatal(err)
	}
	owner, target := coord.Identity{Sender: "owner"}, coord.Identity{Sender: "target"}
	start := func(ttl int64) string {
		sid := newSID()
		env := &macpv1.Envelope{
			MacpVersion: coord.ProtocolVersion, Mode: handoff.ModeID, MessageType: coord.TypeSessionStart,
			MessageId: "start", SessionId: sid, TimestampUnixMs: clk.NowMs(),
			Payload: mustMarshal(&macpv1.SessionStartPayload{
				Intent: "hand off", Participants: []string{"owner", "target"}, ModeVersion: handoff.ModeVersion,
				ConfigurationVersion: cfgVersion, TtlMs: ttl, PolicyVersion: "policy.handoff.implicit",
			}),
		}
		mustOK(t, r, owner, env)
		mustOK(t, r, owner, &macpv1.Envelope{MacpVersion: coord.ProtocolVersion, Mode: handoff.ModeID, MessageType: "HandoffOffer",
			MessageId: "offer", SessionId: sid, Payload: mustMarshal(&handoffv1.HandoffOfferPayload{HandoffId: "h1", TargetParticipant: "target", Scope: "s"})})
		return sid
	}
	sid := start(60_000)
	clk.Advance(999 * time.Millisecond)
	if n := len(stored(t, st, sid)); n != 2 {
		t.Fatalf("%d records before the timeout", n)
	}
	clk.Advance(time.Millisecond)
	var recs []session.Record
	eventually(t, 5*time.Second, "the implicit accept", func() bool { recs = stored(t, st, sid); return len(recs) >= 3 })
	if len(recs) != 3 {
		t.Fatalf("%d records after the timeout", len(recs))
	}
	rec := recs[2]
	var p handoffv1.HandoffAcceptPayload
	if rec.Kind != session.KindImplicit || rec.Envelope.Sender != coord.RuntimeSender || rec.Envelope.MessageType != "HandoffAccept" ||
		proto.Unmarshal(rec.Envelope.Payload, &p) != nil || !p.Implicit || p.AcceptedBy != "target" || p.HandoffId != "h1" {
		t.Fatalf("implicit record %+v payload %v", rec, &p)
	}
	if rec.AcceptedAtMs != recs[1].AcceptedAtMs+1000 {
		t.Fatalf("accepted at +%d", rec.AcceptedAtMs-recs[1].AcceptedAtMs)
	}
	// Once: more time passes, nothing more is appended; the explicit accept
	// that comes late is refused by the mode.
	clk.Advance(5 * time.Second)
	ack := r.Send(context.Background(), target, &macpv1.Envelope{MacpVersion: coord.ProtocolVersion, Mode: handoff.ModeID, MessageType: "HandoffAccept",
		MessageId: "acc", SessionId: sid, Payload: mustMarshal(&handoffv1.HandoffAcceptPayload{HandoffId: "h1", AcceptedBy: "target"})})
	wantCode(t, ack, coord.CodeInvalidEnvelope)
	if n := len(stored(t, st, sid)); n != 3 {
		t.Fatalf("%d records", n)
	}
	// The owner commits the accepted handoff.
	mustOK(t, r, owner, &macpv1.Envelope{MacpVersion: coord.ProtocolVersion, Mode: handoff.ModeID, MessageType: coord.TypeCommitment,
		MessageId: "c", SessionId: sid, Payload: mustMarshal(&macpv1.CommitmentPayload{CommitmentId: "c1", Action: "handoff.accepted",
			AuthorityScope: "s", Reason: "implicit", ModeVersion: handoff.ModeVersion, ConfigurationVersion: cfgVersion, OutcomePositive: true})})
	// The history replays and verifies offline.
	info, err := st.Info(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	if rep := verify.Session(context.Background(), st, info, modes, session.Limits{}); !rep.OK() {
		t.Fatalf("verify: %+v", rep)
	}
	// A forged implicit record (too early) diverges.
	forged := stored(t, st, sid)[:3]
	forged[2].AcceptedAtMs -= 1
	s, err := session.Restore(forged[0], modes)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Apply(forged[1], session.Limits{})
	if err := s.Apply(forged[2], session.Limits{}); err == nil {
		t.Fatal("an implicit accept before its timeout replayed")
	}

	// TTL first: a 500 ms session expires before the 1 s timeout.
	sid2 := start(500)
	clk.Advance(2 * time.Second)
	eventually(t, 5*time.Second, "the expiry", func() bool { recs = stored(t, st, sid2); return len(recs) >= 3 })
	if len(recs) != 3 || recs[2].Kind != session.KindExpire {
		t.Fatalf("records %d, last %v", len(recs), recs[len(recs)-1].Kind)
	}
}
