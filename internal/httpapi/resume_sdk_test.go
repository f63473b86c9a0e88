package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/macpd/macpd/sdk"
)

// cutter is an HTTP client whose connections the test can cut.
type cutter struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (c *cutter) client() *http.Client {
	d := &net.Dialer{}
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err == nil {
			c.mu.Lock()
			c.conns = append(c.conns, conn)
			c.mu.Unlock()
		}
		return conn, err
	}}}
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

// The Go SDK's protocol-mode client resumes by itself after its
// connection is cut: one gap-free stream, byte-equal to storage; with the
// cursor outside the replay window it reports KindCatchupLost and then
// continues after the resume point.
func TestSDKResumeStream(t *testing.T) {
	cfg := testConfig()
	cfg.Resume.ReplayWindow = 10
	e := startApp(t, cfg)
	sid := e.startSession(t, "coord", "alice")
	send := func(n int) {
		for range n {
			id := uuid.NewString()
			e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, id, id))
		}
	}
	send(4)
	cu := &cutter{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hooks := 0
	s := sdk.DialResume(ctx, "ws://"+e.a.HTTPAddr()+"/macp/ws", "alice", sid, 0,
		sdk.WithResumeHTTPClient(cu.client()),
		sdk.WithResumeSubscribeOptions(sdk.WithReconnectBackoff(time.Millisecond, 10*time.Millisecond), sdk.WithReconnectHook(func(int, error) { hooks++ })))
	defer s.Close()
	var got []uint64
	var gotB [][]byte
	lost := 0
	next := func() sdk.ResumeEvent {
		for {
			ev, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			switch ev.Kind {
			case sdk.KindEnvelope:
				got = append(got, ev.Seq)
				gotB = append(gotB, wireBytes(t, ev.Envelope))
				return ev
			case sdk.KindCatchupLost:
				lost++
				return ev
			}
		}
	}
	for range 3 {
		next()
	}
	cu.cut() // within the window: caught up exactly
	send(3)
	for len(got) < 8 {
		next()
	}
	cu.cut() // outside the window: told so, nothing missed replayed
	send(15)
	ev := next()
	if ev.Kind != sdk.KindCatchupLost || ev.Seq != 23 || lost != 1 {
		t.Fatalf("after a cut beyond the window: %+v (lost %d)", ev, lost)
	}
	send(2)
	for len(got) < 10 {
		next()
	}
	stored := e.stored(t, sid)
	want := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 24, 25}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sequence %v, want %v", got, want)
	}
	for i, seq := range got {
		if !bytes.Equal(gotB[i], stored[seq]) {
			t.Fatalf("seq %d differs from storage", seq)
		}
	}
	if s.Reconnects() < 2 || hooks < 2 {
		t.Fatalf("reconnects %d, hooks %d", s.Reconnects(), hooks)
	}
	// The session ends: io.EOF after everything.
	e.mustAck(t, "/macp/session/"+sid+"/cancel", "coord", `{"reason":"done"}`)
	for {
		ev, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == sdk.KindEnvelope && ev.Seq != 26 {
			t.Fatalf("after the cancel: seq %d", ev.Seq)
		}
	}
}

// A session that ends while the SDK is disconnected cannot be resumed
// (SESSION_NOT_OPEN, docs/resume.md "Ended sessions"); DialResume then
// reads the rest of its history in transport mode on the same connection
// and ends with io.EOF, so the application still sees every envelope once.
func TestSDKResumeEndedWhileAway(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	send := func(n int) {
		for range n {
			id := uuid.NewString()
			e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, id, id))
		}
	}
	send(2)
	cu := &cutter{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := sdk.DialResume(ctx, "ws://"+e.a.HTTPAddr()+"/macp/ws", "alice", sid, 0,
		sdk.WithResumeHTTPClient(cu.client()),
		sdk.WithResumeSubscribeOptions(sdk.WithReconnectBackoff(time.Millisecond, 10*time.Millisecond)))
	defer s.Close()
	var got []uint64
	for len(got) < 3 {
		ev, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == sdk.KindEnvelope {
			got = append(got, ev.Seq)
		}
	}
	cu.cut()
	send(3)
	e.mustAck(t, "/macp/session/"+sid+"/cancel", "coord", `{"reason":"done"}`) // seq 7
	for {
		ev, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after the session ended while away: %v (got %v)", err, got)
		}
		if ev.Kind == sdk.KindEnvelope {
			got = append(got, ev.Seq)
		}
	}
	if fmt.Sprint(got) != "[1 2 3 4 5 6 7]" {
		t.Fatalf("sequence %v", got)
	}
}

// A session suspended while the SDK is disconnected is still live:
// DialResume re-attaches to it (session/resume of a SUSPENDED session),
// receives the runtime's SessionSuspend and the SUSPENDED state, keeps
// following through the resume, and ends with io.EOF once the session is
// cancelled (CANCELLED under profile latest).
func TestSDKResumeSuspendedWhileAway(t *testing.T) {
	cfg := testConfig()
	cfg.Profile = "latest"
	e := startApp(t, cfg)
	sid := e.startSession(t, "coord", "alice")
	cu := &cutter{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := sdk.DialResume(ctx, "ws://"+e.a.HTTPAddr()+"/macp/ws", "alice", sid, 0,
		sdk.WithResumeHTTPClient(cu.client()),
		sdk.WithResumeSubscribeOptions(sdk.WithReconnectBackoff(time.Millisecond, 10*time.Millisecond)))
	defer s.Close()
	var types []string
	lastState := ""
	next := func() bool {
		t.Helper()
		ev, err := s.Next()
		if err == io.EOF {
			return false
		}
		if err != nil {
			t.Fatalf("%v (got %v)", err, types)
		}
		switch ev.Kind {
		case sdk.KindEnvelope:
			types = append(types, fmt.Sprint(ev.Seq, ":", ev.Envelope.MessageType))
		case sdk.KindSession:
			lastState = ev.Metadata.GetState().String()
		}
		return true
	}
	for len(types) < 1 {
		next()
	}
	cu.cut()
	if code, _ := e.control(t, "coord", sid, "suspend"); code != 200 {
		t.Fatal("suspend")
	}
	for len(types) < 2 || lastState != "SESSION_STATE_SUSPENDED" {
		next()
	}
	if s.Reconnects() < 1 {
		t.Fatal("no reconnect after the cut")
	}
	e.control(t, "coord", sid, "resume")
	for len(types) < 3 || lastState != "SESSION_STATE_OPEN" {
		next()
	}
	e.control(t, "coord", sid, "cancel")
	for next() {
	}
	if got := fmt.Sprint(types); got != "[1:SessionStart 2:SessionSuspend 3:SessionResume 4:SessionCancel]" || lastState != "SESSION_STATE_CANCELLED" {
		t.Fatalf("got %s, last state %s", got, lastState)
	}
}
