package bus_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/bus"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/natstest"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/store/natsstore"
	"github.com/macpd/macpd/internal/testutil"
)

const (
	alice = "agent://alice"
	bob   = "agent://bob"
	carol = "agent://carol"
	init_ = "agent://init"
)

// securedServer runs a JetStream server whose users are macpd (everything)
// and one user per agent with bus.AgentPermissions.
func securedServer(t *testing.T, agents ...string) *natstest.Server {
	t.Helper()
	return natstest.RunWith(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "macpd", Password: "macpd-secret"}}
		for _, a := range agents {
			pub, sub := bus.AgentPermissions("macp", a)
			o.Users = append(o.Users, &server.User{
				Username: a, Password: "pw-" + a,
				Permissions: &server.Permissions{
					Publish:   &server.SubjectPermission{Allow: pub},
					Subscribe: &server.SubjectPermission{Allow: sub},
				},
			})
		}
	})
}

// node is one macpd node on srv: the store, the runtime, the submit
// binding and a delivery contender.
func node(t *testing.T, srv *natstest.Server, o bus.DeliverOptions) (*natsstore.Store, *runtime.Runtime, *bus.Deliverer) {
	t.Helper()
	ns, rt := submitNode(t, srv, nats.UserInfo("macpd", "macpd-secret"))
	d, err := bus.Deliver(ns, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return ns, rt, d
}

// agentConn connects as agent with its own inbox prefix; permission
// violations the server reports arrive on the returned channel.
func agentConn(t *testing.T, srv *natstest.Server, agent string) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 16)
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(agent, "pw-"+agent), nats.CustomInboxPrefix(bus.InboxPrefix(agent)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

func submit(t *testing.T, nc *nats.Conn, agent string, env *macpv1.Envelope) *macpv1.Ack {
	t.Helper()
	m, err := nc.Request(bus.SubmitSubject("macp", agent), marshal(env), 10*time.Second)
	if err != nil {
		t.Fatalf("submit %s as %s: %v", env.MessageId, agent, err)
	}
	ack := &macpv1.Ack{}
	if err := proto.Unmarshal(m.Data, ack); err != nil {
		t.Fatal(err)
	}
	return ack
}

func startEnvelope(sid string) *macpv1.Envelope {
	return testutil.DecisionStart(sid, "m0", 60_000, alice, bob)
}

func proposal(sid, id string) *macpv1.Envelope {
	return &macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion, Mode: decision.ModeID, MessageType: decision.TypeProposal,
		MessageId: id, SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(),
		Payload: marshal(&decisionv1.ProposalPayload{ProposalId: "p-" + id, Option: "x", Rationale: "r"}),
	}
}

// wantViolation waits for the server's permissions violation on errs.
func wantViolation(t *testing.T, errs <-chan error, what string) {
	t.Helper()
	select {
	case err := <-errs:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("%s: %v, want a permissions violation", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the server did not refuse it", what)
	}
}

// The read side of the message-bus binding and its permissions
// (RFC-MACP-0006 §6; RFC-MACP-0004 §3 an agent acts only as itself and
// reads only sessions it belongs to; docs/cluster.md):
//   - a member receives every accepted record of its session on its
//     member subject, in sequence order, each only once it is stored (the
//     store already holds it when it arrives);
//   - with the permissions bus.AgentPermissions generates, the NATS server
//     refuses an agent's publish on another agent's submit subject and its
//     subscriptions to another member's subject and to the observers'
//     subject, while its own submissions are answered on its own inbox.
func TestDeliverMembersInOrderWithPermissions(t *testing.T) {
	srv := securedServer(t, alice, bob, carol, init_)
	ns, _, d := node(t, srv, bus.DeliverOptions{RenewEvery: 50 * time.Millisecond, LeaseTimeout: 300 * time.Millisecond})
	waitLeading(t, d)
	sid := uuid.NewString()

	anc, aerrs := agentConn(t, srv, alice)
	type got struct {
		seq   uint64
		id    string
		kind  string
		store uint64 // the store's last Seq when it arrived
	}
	recv := make(chan got, 256)
	if _, err := anc.Subscribe(bus.MemberSubject("macp", sid, alice), func(m *nats.Msg) {
		seq, _ := strconv.ParseUint(m.Header.Get(bus.HeaderSeq), 10, 64)
		env := &macpv1.Envelope{}
		_ = proto.Unmarshal(m.Data, env)
		last, _ := ns.LastSeq(context.Background(), sid)
		recv <- got{seq: seq, id: env.MessageId, kind: m.Header.Get(bus.HeaderKind), store: last}
	}); err != nil {
		t.Fatal(err)
	}
	if err := anc.Flush(); err != nil {
		t.Fatal(err)
	}

	inc, _ := agentConn(t, srv, init_)
	if a := submit(t, inc, init_, startEnvelope(sid)); !a.Ok {
		t.Fatalf("start: %v", a)
	}
	const n = 10
	for i := 1; i <= n; i++ {
		who, nc := alice, anc
		if i%2 == 0 {
			who, nc = init_, inc
		}
		if a := submit(t, nc, who, proposal(sid, fmt.Sprintf("m%d", i))); !a.Ok {
			t.Fatalf("proposal %d: %v", i, a)
		}
	}
	for want := uint64(1); want <= n+1; want++ {
		select {
		case g := <-recv:
			if g.seq != want {
				t.Fatalf("alice got Macp-Seq %d, want %d", g.seq, want)
			}
			if wantID := fmt.Sprintf("m%d", want-1); g.id != wantID {
				t.Fatalf("record %d carries %q, want %q", want, g.id, wantID)
			}
			if g.store < g.seq {
				t.Fatalf("record %d delivered before it was stored (store at %d)", g.seq, g.store)
			}
			if wantKind := map[bool]string{true: "start", false: "message"}[want == 1]; g.kind != wantKind {
				t.Fatalf("record %d: %s %q, want %q", want, bus.HeaderKind, g.kind, wantKind)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("alice did not get record %d", want)
		}
	}

	// Refused by the NATS server: alice submitting as bob, reading bob's
	// copy of the session, reading the observers' subject.
	if err := anc.Publish(bus.SubmitSubject("macp", bob), marshal(proposal(sid, "forged"))); err != nil {
		t.Fatal(err)
	}
	_ = anc.Flush()
	wantViolation(t, aerrs, "alice publishing on bob's submit subject")
	if _, err := anc.SubscribeSync(bus.MemberSubject("macp", sid, bob)); err != nil {
		t.Fatal(err)
	}
	_ = anc.Flush()
	wantViolation(t, aerrs, "alice subscribing to bob's deliveries")
	if _, err := anc.SubscribeSync(bus.AcceptedSubject("macp", sid)); err != nil {
		t.Fatal(err)
	}
	_ = anc.Flush()
	wantViolation(t, aerrs, "alice subscribing to the observers' subject")
	if _, err := anc.SubscribeSync("_INBOX_" + "x.>"); err != nil {
		t.Fatal(err)
	}
	_ = anc.Flush()
	wantViolation(t, aerrs, "alice subscribing to another inbox")
	if _, err := anc.SubscribeSync("macp.hist.>"); err != nil {
		t.Fatal(err)
	}
	_ = anc.Flush()
	wantViolation(t, aerrs, "alice reading the history stream's subjects")
	// The forged submission was never processed.
	if a := submit(t, anc, alice, proposal(sid, "after")); !a.Ok {
		t.Fatalf("alice's own submission after the refusals: %v", a)
	}
	g := <-recv
	if g.id != "after" || g.seq != n+2 {
		t.Fatalf("next delivery %d %q, want %d \"after\" (the forged one must not exist)", g.seq, g.id, n+2)
	}

	// Carol belongs to no session: her member subject of this session
	// never carries anything (nothing is published for non-members), and
	// she may not read alice's.
	cnc, cerrs := agentConn(t, srv, carol)
	if _, err := cnc.SubscribeSync(bus.MemberSubject("macp", sid, alice)); err != nil {
		t.Fatal(err)
	}
	_ = cnc.Flush()
	wantViolation(t, cerrs, "carol subscribing to alice's deliveries")
}

func waitLeading(t *testing.T, ds ...*bus.Deliverer) *bus.Deliverer {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, d := range ds {
			if d.Leading() {
				return d
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no deliverer holds the lease")
	return nil
}

// Two nodes contend for the delivery lease; the holder is stopped
// abruptly (its connection closed) and the other takes over after the
// checkpoint. A subscriber that skips a Macp-Seq at or below the last one
// it handled gets every record, in order, with no gap (at least once
// around the take-over).
func TestDeliverTakeOver(t *testing.T) {
	srv := securedServer(t, alice, init_)
	o := bus.DeliverOptions{RenewEvery: 50 * time.Millisecond, LeaseTimeout: 300 * time.Millisecond}
	ns1, rt1, d1 := node(t, srv, o)
	waitLeading(t, d1)
	_, rt2, d2 := node(t, srv, o)
	sid := uuid.NewString()
	anc, _ := agentConn(t, srv, alice)
	var (
		mu    sync.Mutex
		last  uint64
		gap   string
		dups  int
		total = make(chan uint64, 1024)
	)
	if _, err := anc.Subscribe(bus.MemberSubject("macp", sid, alice), func(m *nats.Msg) {
		seq, _ := strconv.ParseUint(m.Header.Get(bus.HeaderSeq), 10, 64)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case seq <= last:
			dups++
		case seq == last+1:
			last = seq
			total <- seq
		default:
			gap = fmt.Sprintf("after %d got %d", last, seq)
		}
	}); err != nil {
		t.Fatal(err)
	}
	_ = anc.Flush()
	id := coord.Identity{Sender: init_}
	if a := rt1.Send(context.Background(), id, startEnvelope(sid)); !a.Ok {
		t.Fatalf("start: %v", a)
	}
	const n = 60
	for i := 1; i <= n; i++ {
		rt := rt1
		if i >= n/3 {
			rt = rt2
		}
		if i == n/3 {
			ns1.Close() // node 1, the lease holder, disappears
		}
		if a := rt.Send(context.Background(), id, proposal(sid, fmt.Sprintf("m%d", i))); !a.Ok {
			t.Fatalf("proposal %d: %v", i, a)
		}
	}
	for want := uint64(1); want <= n+1; want++ {
		select {
		case s := <-total:
			if s != want {
				t.Fatalf("got %d, want %d", s, want)
			}
		case <-time.After(20 * time.Second):
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("record %d never delivered (gap: %q)", want, gap)
		}
	}
	if !d2.Leading() {
		t.Fatal("node 2 does not hold the lease after node 1 disappeared")
	}
	mu.Lock()
	defer mu.Unlock()
	if gap != "" {
		t.Fatalf("gap: %s", gap)
	}
	t.Logf("%d records delivered in order across a take-over (%d repeated around it)", n+1, dups)
}
