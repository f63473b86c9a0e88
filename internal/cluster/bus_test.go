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
// waited for its Acks.
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
}
