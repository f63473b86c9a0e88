package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/bus"
)

// The message-bus binding on a cluster (RFC-MACP-0006 §6; docs/cluster.md):
// agents submit over NATS to whichever node the queue group picks; every
// ok Ack is an envelope in the history, each once, in the order the agent
// waited for its Acks; a member receives the stored records on its member
// subject in sequence order.
func TestBusSubmitOnCluster(t *testing.T) {
	e := newEnvBus(t, 3, 2, true)
	nc, err := nats.Connect(e.nats.AllURLs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	submit := func(agent string, env *macpv1.Envelope) *macpv1.Ack {
		t.Helper()
		body, _ := proto.Marshal(env)
		m, err := nc.Request(bus.SubmitSubject("macp", agent), body, 20*time.Second)
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		ack := &macpv1.Ack{}
		if err := proto.Unmarshal(m.Data, ack); err != nil {
			t.Fatal(err)
		}
		return ack
	}
	sid := newSID()
	// Alice reads the session on her member subject (the read side).
	deliveries, err := nc.SubscribeSync(bus.MemberSubject("macp", sid, aliceID.Sender))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if a := submit(initID.Sender, startEnv(sid, "m0", 60_000)); !a.Ok {
		t.Fatalf("start: %s", ackString(a))
	}
	const n = 20
	for i := 1; i <= n; i++ {
		if a := submit(aliceID.Sender, proposalEnv(sid, fmt.Sprintf("m%d", i))); !a.Ok || a.Duplicate {
			t.Fatalf("proposal %d: %s", i, ackString(a))
		}
	}
	recs := history(t, e.reader(), sid)
	if len(recs) != n+1 {
		t.Fatalf("%d records, want %d", len(recs), n+1)
	}
	for i, r := range recs[1:] {
		if want := fmt.Sprintf("m%d", i+1); r.Envelope.MessageId != want || r.Envelope.Sender != aliceID.Sender {
			t.Fatalf("record %d: %s from %s, want %s from %s", i+2, r.Envelope.MessageId, r.Envelope.Sender, want, aliceID.Sender)
		}
	}
	// One node of the two holds the delivery lease and publishes every
	// stored record once, in order.
	for i, r := range recs {
		m, err := deliveries.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
		env := &macpv1.Envelope{}
		if err := proto.Unmarshal(m.Data, env); err != nil {
			t.Fatal(err)
		}
		if seq := m.Header.Get(bus.HeaderSeq); seq != fmt.Sprint(r.Seq) || env.MessageId != r.Envelope.MessageId {
			t.Fatalf("delivery %d: seq %s %s, want %d %s", i+1, seq, env.MessageId, r.Seq, r.Envelope.MessageId)
		}
	}
}
