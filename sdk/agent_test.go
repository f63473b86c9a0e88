package sdk_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/sdk"
)

// fakeTransport is an in-memory Transport: Follow replays a script.
type fakeTransport struct {
	mu     sync.Mutex
	events []sdk.SessionEvent
	after  uint64
	sent   []*macpv1.Envelope
}

func (f *fakeTransport) Send(_ context.Context, env *macpv1.Envelope) (*macpv1.Ack, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, env)
	return &macpv1.Ack{Ok: true}, nil
}

func (f *fakeTransport) Follow(ctx context.Context, _ string, after uint64) (sdk.EventStream, error) {
	f.after = after
	var evs []sdk.SessionEvent
	for _, e := range f.events {
		if e.Seq > after {
			evs = append(evs, e)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	return &fakeStream{ctx: ctx, cancel: cancel, evs: evs}, nil
}

type fakeStream struct {
	ctx    context.Context
	cancel context.CancelFunc
	evs    []sdk.SessionEvent
}

func (s *fakeStream) Next() (sdk.SessionEvent, error) {
	if err := s.ctx.Err(); err != nil {
		return sdk.SessionEvent{}, err
	}
	if len(s.evs) == 0 {
		return sdk.SessionEvent{}, io.EOF
	}
	e := s.evs[0]
	s.evs = s.evs[1:]
	return e, nil
}

func (s *fakeStream) Close() { s.cancel() }

func script(t *testing.T) *fakeTransport {
	start, _ := sdk.NewSessionStart("s1", sdk.QuorumMode, sdk.StartPayload{Participants: []string{"v1", "v2"}, TTL: time.Minute, ModeVersion: "1.0.0", ConfigurationVersion: "v1"})
	start.Sender = "coord"
	req, _ := sdk.NewEnvelope("s1", sdk.QuorumMode, sdk.TypeApprovalRequest, &quorumv1.ApprovalRequestPayload{RequestId: "r", Action: "a", RequiredApprovals: 1})
	req.Sender = "coord"
	ap, _ := sdk.NewEnvelope("s1", sdk.QuorumMode, sdk.TypeApprove, &quorumv1.ApprovePayload{RequestId: "r"})
	ap.Sender = "v1"
	ab, _ := sdk.NewEnvelope("s1", sdk.QuorumMode, sdk.TypeAbstain, &quorumv1.AbstainPayload{RequestId: "r"})
	ab.Sender = "v2"
	return &fakeTransport{events: []sdk.SessionEvent{{Seq: 1, Envelope: start}, {Seq: 2, Envelope: req}, {Seq: 3, Envelope: ap}, {Seq: 4, Envelope: ab}}}
}

// Dispatch by type, in order; own messages skipped but projected; replies
// go through the transport; the stream's end ends Run with nil.
func TestAgentDispatch(t *testing.T) {
	ft := script(t)
	proj := sdk.NewQuorumProjection()
	var got []string
	a := sdk.NewAgent(ft, "s1", sdk.WithSelf("v2"), sdk.WithProjection(proj))
	a.Handle(sdk.TypeApprovalRequest, func(ctx context.Context, m *sdk.Message) error {
		var p quorumv1.ApprovalRequestPayload
		if err := m.Decode(&p); err != nil {
			return err
		}
		got = append(got, "request:"+p.RequestId)
		_, err := m.Reply(ctx, sdk.TypeAbstain, &quorumv1.AbstainPayload{RequestId: p.RequestId})
		return err
	}).HandleAny(func(_ context.Context, m *sdk.Message) error {
		got = append(got, m.Type()+":"+m.Sender())
		return nil
	})
	if err := a.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"SessionStart:coord", "request:r", "Approve:v1"} // v2's Abstain is the agent's own
	if !slices.Equal(got, want) {
		t.Fatalf("dispatched %v, want %v", got, want)
	}
	if len(ft.sent) != 1 || ft.sent[0].MessageType != sdk.TypeAbstain || ft.sent[0].SessionId != "s1" || ft.sent[0].Mode != sdk.QuorumMode {
		t.Fatalf("replies: %v", ft.sent)
	}
	if a.Last() != 4 || len(proj.Ballots) != 2 || proj.BallotOf("v2") != sdk.TypeAbstain {
		t.Fatalf("last %d, projection %+v", a.Last(), proj.Ballots)
	}
}

// A handler error stops Run with a HandlerError that unwraps to it; an
// error hook can continue instead; Stop from a handler ends Run with nil
// and WithAfter(Last()) resumes after it.
func TestAgentErrorsStopAndResume(t *testing.T) {
	boom := errors.New("boom")
	a := sdk.NewAgent(script(t), "s1")
	a.Handle(sdk.TypeApprove, func(context.Context, *sdk.Message) error { return boom })
	err := a.Run(context.Background())
	var he *sdk.HandlerError
	if !errors.Is(err, boom) || !errors.As(err, &he) || he.Seq != 3 || he.Type != sdk.TypeApprove {
		t.Fatalf("run: %v", err)
	}

	var hooked []uint64
	a = sdk.NewAgent(script(t), "s1", sdk.WithErrorHook(func(m *sdk.Message, err error) error {
		hooked = append(hooked, m.Seq)
		return nil
	}))
	a.HandleAny(func(context.Context, *sdk.Message) error { return boom })
	if err := a.Run(context.Background()); err != nil || len(hooked) != 4 {
		t.Fatalf("hook: %v %v", err, hooked)
	}

	ft := script(t)
	a = sdk.NewAgent(ft, "s1")
	a.Handle(sdk.TypeApprovalRequest, func(context.Context, *sdk.Message) error { a.Stop(); return nil })
	if err := a.Run(context.Background()); err != nil || a.Last() != 2 {
		t.Fatalf("stop: %v last %d", err, a.Last())
	}
	var seen []uint64
	b := sdk.NewAgent(ft, "s1", sdk.WithAfter(a.Last()))
	b.HandleAny(func(_ context.Context, m *sdk.Message) error { seen = append(seen, m.Seq); return nil })
	if err := b.Run(context.Background()); err != nil || ft.after != 2 || len(seen) != 2 || seen[0] != 3 {
		t.Fatalf("resume: %v after %d seen %v", err, ft.after, seen)
	}

	// A cancelled ctx ends Run with ctx's error; Stop before Run: nil.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sdk.NewAgent(script(t), "s1").Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	c := sdk.NewAgent(script(t), "s1")
	c.Stop()
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Quorum over a real runtime (RFC-MACP-0011): a coordinator agent commits
// when its projection says the threshold is reached; three voter agents
// approve when asked. The voters reach the runtime through a proxy whose
// connections are severed mid-session: their subscriptions resume by
// themselves and every agent still sees the whole history once.
func TestAgentQuorumOverGRPCWithResume(t *testing.T) {
	a := startApp(t)
	px := newProxy(t, a.Addr())
	ctx := ctxLong(t)
	coord := dial(t, a.Addr(), "coord")
	s := coord.Quorum("")
	voters := []string{"v1", "v2", "v3"}
	mustOK(t, "start")(s.Start(ctx, "deploy", voters, time.Minute))

	proj := sdk.NewQuorumProjection()
	ca := sdk.NewAgent(coord, s.ID, sdk.WithProjection(proj))
	var committed sync.Once
	ca.Handle(sdk.TypeApprove, func(ctx context.Context, m *sdk.Message) error {
		if pos, _ := proj.Eligible(); pos {
			var err error
			committed.Do(func() { _, err = s.CommitOutcome(ctx, "quorum.approved", true, "threshold reached") })
			return err
		}
		return nil
	})

	var wg sync.WaitGroup
	errs := make(chan error, len(voters)+1)
	lasts := make([]*sdk.Agent, len(voters))
	var severOnce sync.Once
	for i, v := range voters {
		c := dial(t, px.Addr(), v, sdk.WithRetry(10))
		ag := sdk.NewAgent(c, s.ID, sdk.WithSelf(v))
		ag.Handle(sdk.TypeApprovalRequest, func(ctx context.Context, m *sdk.Message) error {
			var p quorumv1.ApprovalRequestPayload
			if err := m.Decode(&p); err != nil {
				return err
			}
			_, err := m.Reply(ctx, sdk.TypeApprove, &quorumv1.ApprovePayload{RequestId: p.RequestId, Reason: "lgtm"})
			if err != nil && sdk.CodeOf(err) != sdk.CodeSessionNotOpen { // late: the quorum was already reached
				return err
			}
			severOnce.Do(px.sever) // every voter's connection drops once
			return nil
		})
		lasts[i] = ag
		wg.Add(1)
		go func() { defer wg.Done(); errs <- ag.Run(ctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); errs <- ca.Run(ctx) }()
	mustOK(t, "request")(s.RequestApproval(ctx, "r1", "deploy v2", "", 2))
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	md, err := s.Metadata(ctx)
	if err != nil || md.GetState() != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("metadata: %v %v", md, err)
	}
	if !proj.Resolved() || proj.Commitment.GetAction() != "quorum.approved" {
		t.Fatalf("coordinator projection: %+v", proj.SessionView)
	}
	for _, ag := range lasts {
		if ag.Last() != ca.Last() {
			t.Fatalf("voter stopped at %d, coordinator at %d", ag.Last(), ca.Last())
		}
	}
	if px.severs.Load() == 0 {
		t.Fatal("the proxy never severed")
	}
}

// An agent keeps running through a suspension (profile latest): the
// SessionSuspend and SessionResume records reach their handlers,
// Suspended() reports the state, a reply while SUSPENDED is refused with
// SESSION_NOT_OPEN, the agent answers after the resume, and a cancel ends
// Run with nil, the projection CANCELLED.
func TestAgentThroughSuspension(t *testing.T) {
	a := startApp(t, func(c *config.Config) { c.Profile = "latest" })
	ctx := ctxLong(t)
	coord := dial(t, a.Addr(), "coord")
	q := coord.Quorum("")
	mustOK(t, "start")(q.Start(ctx, "deploy", []string{"v1", "v2"}, time.Minute))

	v1 := dial(t, a.Addr(), "v1")
	proj := sdk.NewQuorumProjection()
	proj.Profile = sdk.ProfileLatest
	ag := sdk.NewAgent(v1, q.ID, sdk.WithSelf("v1"), sdk.WithProjection(proj))
	suspended, resumed, approved := make(chan error, 1), make(chan bool, 1), make(chan error, 1)
	ag.Handle(sdk.TypeSessionSuspend, func(ctx context.Context, m *sdk.Message) error {
		if !ag.Suspended() || proj.State() != macpv1.SessionState_SESSION_STATE_SUSPENDED {
			suspended <- errors.New("not suspended in the SessionSuspend handler")
			return nil
		}
		_, err := m.Reply(ctx, sdk.TypeAbstain, &quorumv1.AbstainPayload{RequestId: "r1"})
		suspended <- err
		return nil
	}).Handle(sdk.TypeSessionResume, func(context.Context, *sdk.Message) error {
		resumed <- !ag.Suspended() && proj.State() == macpv1.SessionState_SESSION_STATE_OPEN
		return nil
	}).Handle(sdk.TypeApprovalRequest, func(ctx context.Context, m *sdk.Message) error {
		_, err := m.Reply(ctx, sdk.TypeApprove, &quorumv1.ApprovePayload{RequestId: "r1"})
		approved <- err
		return err
	})
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()

	mustOK(t, "suspend")(q.Suspend(ctx, "change freeze"))
	select {
	case err := <-suspended:
		if sdk.CodeOf(err) != sdk.CodeSessionNotOpen {
			t.Fatalf("a reply while suspended: %v, want SESSION_NOT_OPEN", err)
		}
	case <-ctx.Done():
		t.Fatal("the SessionSuspend handler never ran")
	}
	mustOK(t, "resume")(q.Resume(ctx, "freeze over"))
	if ok := <-resumed; !ok {
		t.Fatal("still suspended in the SessionResume handler")
	}
	mustOK(t, "request")(q.RequestApproval(ctx, "r1", "deploy", "", 2))
	if err := <-approved; err != nil {
		t.Fatalf("approve after resume: %v", err)
	}
	ack := mustOK(t, "cancel")(q.Cancel(ctx, "superseded"))
	if ack.SessionState != macpv1.SessionState_SESSION_STATE_CANCELLED {
		t.Fatalf("cancel ack %s", ack.SessionState)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ag.Suspended() || proj.State() != macpv1.SessionState_SESSION_STATE_CANCELLED {
		t.Fatalf("after the cancel: suspended %v, state %s", ag.Suspended(), proj.State())
	}
	if a, _, _ := proj.Counts(); a != 1 {
		t.Fatalf("approvals %d", a)
	}
}
