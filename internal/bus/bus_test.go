package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/bus"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/natstest"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/natsstore"
)

func marshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// Submissions over NATS (RFC-MACP-0006 §6): the Ack comes back on the
// reply subject after the append, the sender is the agent named by the
// subject whatever the envelope says (RFC-MACP-0004 §3), a body that is not
// an envelope is INVALID_ENVELOPE, and a submission nobody can be answered
// for is not processed.
func TestSubmit(t *testing.T) {
	srv := natstest.Run(t)
	ns, _ := submitNode(t, srv)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	submit := func(agent string, body []byte) *macpv1.Ack {
		t.Helper()
		m, err := nc.Request(bus.SubmitSubject("macp", agent), body, 10*time.Second)
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		ack := &macpv1.Ack{}
		if err := proto.Unmarshal(m.Data, ack); err != nil {
			t.Fatalf("reply is not an Ack: %v", err)
		}
		return ack
	}
	sid := uuid.NewString()
	start := &macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion, Mode: decision.ModeID, MessageType: coord.TypeSessionStart,
		MessageId: "m0", SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(),
		Payload: marshal(&macpv1.SessionStartPayload{
			Intent: "decide", Participants: []string{"agent://alice", "agent://bob"},
			ModeVersion: decision.ModeVersion, ConfigurationVersion: "cfg-1", TtlMs: 60_000,
		}),
	}
	if ack := submit("agent://init", marshal(start)); !ack.Ok || ack.SessionId != sid {
		t.Fatalf("start: %v", ack)
	}
	prop := &macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion, Mode: decision.ModeID, MessageType: decision.TypeProposal,
		MessageId: "m1", SessionId: sid, Sender: "agent://bob", TimestampUnixMs: time.Now().UnixMilli(),
		Payload: marshal(&decisionv1.ProposalPayload{ProposalId: "p1", Option: "x", Rationale: "r"}),
	}
	if ack := submit("agent://alice", marshal(prop)); !ack.Ok {
		t.Fatalf("proposal: %v", ack)
	}
	if ack := submit("agent://alice", marshal(prop)); !ack.Ok || !ack.Duplicate {
		t.Fatalf("resend: %v", ack)
	}
	if ack := submit("agent://alice", []byte{0xff, 0xff}); ack.Ok || ack.GetError().GetCode() != string(coord.CodeInvalidEnvelope) {
		t.Fatalf("garbage: %v", ack)
	}
	// No reply subject: not processed.
	prop2 := proto.Clone(prop).(*macpv1.Envelope)
	prop2.MessageId = "m2"
	if err := nc.Publish(bus.SubmitSubject("macp", "agent://alice"), marshal(prop2)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	var recs []session.Record
	if err := ns.Read(context.Background(), sid, 1, func(r session.Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records stored, want 2 (start, one proposal)", len(recs))
	}
	if got := recs[1].Envelope.Sender; got != "agent://alice" {
		t.Fatalf("stored sender %q, want the subject's agent", got)
	}
}

// submitNode is one macpd node on srv (connecting with opts): the JetStream
// store, the runtime in shared-store mode and the submit binding on the
// "macp" prefix, all closed when the test ends.
func submitNode(t *testing.T, srv *natstest.Server, opts ...nats.Option) (*natsstore.Store, *runtime.Runtime) {
	t.Helper()
	ns, err := natsstore.Open(context.Background(), natsstore.Options{URL: srv.ClientURL(), Replicas: 1, NATSOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	rt := runtime.New(ns, builtin.Modes(), policy.DefaultOnly{}, runtime.Options{})
	rt.EnableSharedStore()
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	b, err := bus.Serve(ns.Conn(), "macp", rt, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return ns, rt
}
