package server_test

import (
	"context"
	"fmt"
	"net"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/auth"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/server"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
)

// A client that pipelines 200 envelopes on one stream before reading
// anything (RFC-MACP-0006 §3.2; checklist STREAM-*): every accepted
// envelope is echoed once, in acceptance order, equal to the durable
// store's history; every rejection comes back in-stream, in the order the
// envelopes were sent; duplicates add nothing; then a half-close ends the
// stream cleanly after the last echo.
func TestStreamPipelinedEnvelopesEchoInOrder(t *testing.T) {
	cfg := streamConfig(0)
	cfg.MemoryOnly, cfg.DataDir = false, t.TempDir() // acceptance means synced to disk
	e := startApp(t, cfg)
	sid := uuid.NewString()
	ctx, cancel := context.WithTimeout(as("init"), 30*time.Second)
	defer cancel()
	s, err := e.c.StreamSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var accepted, rejected []string
	send := func(env *macpv1.Envelope) {
		t.Helper()
		if err := s.Send(&macpv1.StreamSessionRequest{Envelope: env}); err != nil {
			t.Fatalf("stream Send %d: %v", len(accepted)+len(rejected), err)
		}
	}
	start := envelope(sid, "SessionStart", "start", startPayload(t, "alice", "bob"))
	send(start)
	accepted = append(accepted, start.MessageId)
	for i := 1; i < 200; i++ {
		id := fmt.Sprintf("m%03d", i)
		switch {
		case i%15 == 0: // a resend of an accepted proposal: duplicate, nothing on the stream
			send(proposal(t, sid, accepted[len(accepted)-1]))
		case i%10 == 0: // a vote on no proposal: rejected in-stream
			send(envelope(sid, "Vote", id, mustMarshal(t, &macpv1.SignalPayload{SignalType: "not a vote"})))
			rejected = append(rejected, id)
		default:
			send(proposal(t, sid, id))
			accepted = append(accepted, id)
		}
	}
	if accepted[len(accepted)-1] == "start" {
		t.Fatal("the script accepted nothing after the start")
	}
	var echoed []*macpv1.Envelope
	var errIDs []string
	for len(echoed) < len(accepted) || len(errIDs) < len(rejected) {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("after %d echoes and %d errors: %v", len(echoed), len(errIDs), err)
		}
		switch {
		case r.GetEnvelope() != nil:
			echoed = append(echoed, r.GetEnvelope())
		case r.GetError() != nil:
			errIDs = append(errIDs, r.GetError().GetMessageId())
		}
	}
	var echoedIDs []string
	for _, env := range echoed {
		echoedIDs = append(echoedIDs, env.MessageId)
	}
	if !slices.Equal(echoedIDs, accepted) {
		t.Fatalf("echoes %v\nwant    %v", echoedIDs, accepted)
	}
	if !slices.Equal(errIDs, rejected) {
		t.Fatalf("in-stream errors for %v, want %v", errIDs, rejected)
	}
	sameEnvelopes(t, "echoes against the store", envelopes(e.history(t, sid)), echoed)
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Recv(); err == nil {
		t.Fatalf("after the last echo: %v", r)
	}
	if last, ok := trailerSeq(t, s); !ok || last != uint64(len(accepted)) {
		t.Fatalf("trailer %s = %d (%v), want %d", server.TrailerLastSeq, last, ok, len(accepted))
	}
}

// heldStore holds every Append while held is set, until release.
type heldStore struct {
	store.Store
	mu      sync.Mutex
	gate    chan struct{} // nil: appends pass
	entered chan struct{}
}

func (h *heldStore) hold() {
	h.mu.Lock()
	h.gate = make(chan struct{})
	h.mu.Unlock()
}

func (h *heldStore) release() {
	h.mu.Lock()
	if h.gate != nil {
		close(h.gate)
		h.gate = nil
	}
	h.mu.Unlock()
}

func (h *heldStore) Append(ctx context.Context, recs []session.Record) error {
	h.mu.Lock()
	gate := h.gate
	h.mu.Unlock()
	if gate != nil {
		select {
		case h.entered <- struct{}{}:
		default:
		}
		<-gate
	}
	return h.Store.Append(ctx, recs)
}

// streamGoroutines counts the goroutines of StreamSession calls and of
// their Ack pipes in this process.
func streamGoroutines() (calls, pipes int) {
	buf := make([]byte, 1<<22)
	dump := string(buf[:goruntime.Stack(buf, true)])
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.Contains(g, "server.(*ackPipe).run") {
			pipes++
		}
		if strings.Contains(g, "server.(*Service).StreamSession(") {
			calls++
		}
	}
	return calls, pipes
}

// A client that leaves while its stream's window is full of envelopes
// whose commits are held: the call ends at once, its goroutines return
// without waiting for the commits (which still complete), and nothing of
// the stream is left behind once they do (every resource a client can
// make the server hold is bounded).
func TestStreamPipelinedClientLeavesMidWindow(t *testing.T) {
	st := &heldStore{Store: memstore.New(), entered: make(chan struct{}, 1)}
	reg := registry.New(st, builtin.Modes(), policy.DefaultOnly{}, registry.Options{})
	rt := runtime.New(st, reg, reg, runtime.Options{})
	if err := rt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	svc := server.New(rt, auth.Chain{auth.Dev{}}, server.Options{Registry: reg})
	g, _ := svc.NewGRPCServer()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(func() { st.release(); g.Stop(); rt.Close() })
	e := &testEnv{rt: rt}
	e.dial(t, lis.Addr().String())
	// Calls of earlier tests may still be ending (their servers stopped):
	// those counts can only fall meanwhile.
	calls0, pipes0 := streamGoroutines()

	sid := uuid.NewString()
	ss := e.openStream(t, "init")
	ss.sendEnv(t, envelope(sid, "SessionStart", "start", startPayload(t, "alice", "bob")))
	if got := ss.env(t); got.MessageId != "start" {
		t.Fatalf("first echo %v", got)
	}
	st.hold()
	for i := range 100 { // more than the window: the receive loop waits for the oldest
		ss.sendEnv(t, proposal(t, sid, fmt.Sprintf("p%03d", i)))
	}
	select {
	case <-st.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no append reached the store")
	}
	eventually(t, "the stream's Ack pipe to run", func() bool {
		calls, pipes := streamGoroutines()
		return calls > calls0 || pipes > pipes0
	})
	ss.cancel()
	noneLeft := func() bool {
		calls, pipes := streamGoroutines()
		return calls <= calls0 && pipes <= pipes0
	}
	eventually(t, "the stream's goroutines to return while its commits are held", noneLeft)
	st.release()
	eventually(t, "the held commits to complete", func() bool {
		last, _ := rt.LastSeq(sid)
		return last >= 2
	})
	if !noneLeft() {
		calls, pipes := streamGoroutines()
		t.Fatalf("after the commits completed: %d StreamSession calls and %d Ack pipes, want at most %d and %d", calls, pipes, calls0, pipes0)
	}
}
