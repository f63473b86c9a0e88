package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/server"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// StreamSession over real gRPC (RFC-MACP-0006 §3.2, checklist STREAM-1..9,
// issue #5, docs/resume.md).

// observerToken authenticates "watcher", an observer identity (static
// token), in streamConfig.
const observerToken = "observer-token-0123456789abcdef"

// streamConfig is testConfig with the given heartbeat interval (0 = none,
// so tests can assert that nothing arrives) and an observer token.
func streamConfig(heartbeat time.Duration) config.Config {
	cfg := testConfig()
	cfg.StreamHeartbeat = heartbeat
	cfg.Auth.TokensJSON = `[{"token": "` + observerToken + `", "sender": "watcher", "is_observer": true}]`
	return cfg
}

type sessionStream = grpc.BidiStreamingClient[macpv1.StreamSessionRequest, macpv1.StreamSessionResponse]

// sstream is one client StreamSession call with its responses pumped into
// a channel.
type sstream struct {
	s      sessionStream
	ch     <-chan recvResult[*macpv1.StreamSessionResponse]
	cancel context.CancelFunc
}

// openStream opens StreamSession as agent (a dev identity, or
// observerToken).
func (e *testEnv) openStream(t *testing.T, agent string) *sstream {
	t.Helper()
	ctx, cancel := context.WithTimeout(as(agent), 30*time.Second)
	t.Cleanup(cancel)
	s, err := e.c.StreamSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &sstream{s: s, ch: recvAsync[macpv1.StreamSessionResponse](s), cancel: cancel}
}

// subscribe opens a stream as agent and sends a passive-subscribe frame.
func (e *testEnv) subscribe(t *testing.T, agent, sid string, after uint64) *sstream {
	t.Helper()
	ss := e.openStream(t, agent)
	ss.send(t, &macpv1.StreamSessionRequest{SubscribeSessionId: sid, AfterSequence: after})
	return ss
}

func (ss *sstream) send(t *testing.T, req *macpv1.StreamSessionRequest) {
	t.Helper()
	if err := ss.s.Send(req); err != nil {
		t.Fatalf("stream Send: %v", err)
	}
}

func (ss *sstream) sendEnv(t *testing.T, env *macpv1.Envelope) {
	t.Helper()
	ss.send(t, &macpv1.StreamSessionRequest{Envelope: env})
}

// isHeartbeat: ambient Signals carry no session id (docs/resume.md).
func isHeartbeat(env *macpv1.Envelope) bool { return env != nil && env.SessionId == "" }

// resp returns the next response that is not a heartbeat.
func (ss *sstream) resp(t *testing.T) *macpv1.StreamSessionResponse {
	t.Helper()
	for {
		r := next(t, ss.ch)
		if !isHeartbeat(r.GetEnvelope()) {
			return r
		}
	}
}

// env returns the next session envelope (heartbeats skipped).
func (ss *sstream) env(t *testing.T) *macpv1.Envelope {
	t.Helper()
	r := ss.resp(t)
	if r.GetEnvelope() == nil {
		t.Fatalf("want an envelope, got %v", r)
	}
	return r.GetEnvelope()
}

// macpErr returns the next response, which must be an in-stream error.
func (ss *sstream) macpErr(t *testing.T) *macpv1.MACPError {
	t.Helper()
	r := ss.resp(t)
	if r.GetError() == nil {
		t.Fatalf("want an in-stream error, got %v", r)
	}
	return r.GetError()
}

// end expects the stream to end cleanly (OK status) with no further
// session envelope, and returns the trailer's macp-last-sequence.
func (ss *sstream) end(t *testing.T) (last uint64, ok bool) {
	t.Helper()
	for {
		select {
		case r, open := <-ss.ch:
			if !open {
				t.Fatal("stream closed without a final result")
			}
			if r.err == nil {
				if isHeartbeat(r.msg.GetEnvelope()) {
					continue
				}
				t.Fatalf("want the end of the stream, got %v", r.msg)
			}
			if !errors.Is(r.err, io.EOF) {
				t.Fatalf("want a clean end (OK), got %v", r.err)
			}
			return trailerSeq(t, ss.s)
		case <-time.After(5 * time.Second):
			t.Fatal("timed out waiting for the stream to end")
		}
	}
}

// fail expects the stream to end with an error status and returns it.
func (ss *sstream) fail(t *testing.T) error {
	t.Helper()
	return streamErr(t, ss.ch)
}

func trailerSeq(t *testing.T, s sessionStream) (uint64, bool) {
	t.Helper()
	v := s.Trailer().Get(server.TrailerLastSeq)
	if len(v) == 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(v[0], 10, 64)
	if err != nil {
		t.Fatalf("trailer %s=%q: %v", server.TrailerLastSeq, v[0], err)
	}
	return n, true
}

// header returns macp-session-sequence and macp-resume-after.
func (ss *sstream) header(t *testing.T) (sessionSeq, resumeAfter uint64) {
	t.Helper()
	md, err := ss.s.Header()
	if err != nil {
		t.Fatalf("Header: %v", err)
	}
	get := func(k string) uint64 {
		v := md.Get(k)
		if len(v) != 1 {
			t.Fatalf("header %s = %v, want one value (header %v)", k, v, md)
		}
		n, err := strconv.ParseUint(v[0], 10, 64)
		if err != nil {
			t.Fatalf("header %s=%q: %v", k, v[0], err)
		}
		return n
	}
	return get(server.HeaderSessionSeq), get(server.HeaderResumeFrom)
}

// history is the session's stored records (the reference history).
func (e *testEnv) history(t *testing.T, sid string) []session.Record {
	t.Helper()
	var out []session.Record
	if err := e.rt.Store().Read(context.Background(), sid, 1, func(r session.Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// envelopes is the envelopes of recs (the TTL expiry record has none).
func envelopes(recs []session.Record) []*macpv1.Envelope {
	var out []*macpv1.Envelope
	for _, r := range recs {
		if r.Envelope != nil {
			out = append(out, r.Envelope)
		}
	}
	return out
}

func sameEnvelopes(t *testing.T, what string, want, got []*macpv1.Envelope) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: got %d envelopes, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(want[i], got[i]) {
			t.Fatalf("%s: envelope %d: got %v, want %v", what, i, got[i], want[i])
		}
	}
}

// proposal returns a Proposal envelope with a unique id.
func proposal(t *testing.T, sid, id string) *macpv1.Envelope {
	return envelope(sid, "Proposal", id, proposalPayload(t, id))
}

// sessionWith starts a session initiated by "init" with participants alice
// and bob, plus n proposals: n+1 records.
func (e *testEnv) sessionWith(t *testing.T, n int) string {
	t.Helper()
	sid := e.startSession(t, "init", "alice", "bob")
	for i := 0; i < n; i++ {
		e.mustAccept(t, "init", proposal(t, sid, fmt.Sprintf("p%d-%s", i, uuid.NewString()[:8])))
	}
	return sid
}

// Passive subscribe with after_sequence = 0: the whole accepted history
// from SessionStart, byte-equal to the store, in order; the header carries
// the session's last sequence and the effective after; then live.
func TestStreamSubscribeFromStart(t *testing.T) {
	e := startApp(t, streamConfig(0))
	sid := e.sessionWith(t, 2)
	ss := e.subscribe(t, "alice", sid, 0)
	if seq, after := ss.header(t); seq != 3 || after != 0 {
		t.Fatalf("header: session-sequence %d resume-after %d, want 3 0", seq, after)
	}
	var got []*macpv1.Envelope
	for i := 0; i < 3; i++ {
		got = append(got, ss.env(t))
	}
	if got[0].MessageType != coord.TypeSessionStart {
		t.Fatalf("after_sequence 0 must start with SessionStart, got %s", got[0].MessageType)
	}
	sameEnvelopes(t, "replay", envelopes(e.history(t, sid)), got)
	nothing(t, ss.ch, 50*time.Millisecond)
	// Live: an envelope from another client continues the stream.
	live := proposal(t, sid, "live")
	e.mustAccept(t, "bob", live)
	if g := ss.env(t); g.MessageId != "live" || g.Sender != "bob" {
		t.Fatalf("live: got %v", g)
	}
}

// after_sequence = N: nothing is replayed; the next accepted envelope is
// the first delivered. after_sequence > N: live only (nothing was accepted
// since the stream opened), the header's resume-after is N.
func TestStreamSubscribeAtAndBeyondEnd(t *testing.T) {
	e, clk := startClocked(t)
	for _, after := range []uint64{3, 4, 1 << 40} {
		sid := e.sessionWith(t, 2)
		// Beyond the end means live since the stream opened; records
		// accepted in the same millisecond would count as live.
		clk.Advance(5 * time.Millisecond)
		ss := e.subscribe(t, "alice", sid, after)
		if seq, ra := ss.header(t); seq != 3 || ra != 3 {
			t.Fatalf("after %d: header session-sequence %d resume-after %d, want 3 3", after, seq, ra)
		}
		nothing(t, ss.ch, 50*time.Millisecond)
		e.mustAccept(t, "init", proposal(t, sid, "next"))
		if g := ss.env(t); g.MessageId != "next" {
			t.Fatalf("after %d: first delivered %s, want next", after, g.MessageId)
		}
	}
}

// after_sequence beyond the end is "live since the stream was opened": an
// envelope accepted between opening the stream and the subscribe frame is
// delivered, and the header's resume-after says where counting starts, so
// the client still learns its sequence number (issue #5 item 4).
//
// The clock is a fake: the stream opens at T, "between" is accepted at
// T+1 ms and the subscribe frame arrives at T+2 ms, so only the opening
// instant (not the subscribing one) makes "between" live.
func TestStreamSubscribeBeyondEndLiveSinceOpen(t *testing.T) {
	e, clk := startClocked(t)
	sid := e.sessionWith(t, 2) // 3 records
	clk.Advance(5 * time.Millisecond)
	ss := e.openStream(t, "alice")
	// The server handler starts when the call's headers arrive; an empty
	// frame is ignored but makes the client send them. The handler takes
	// the opening instant before it opens the stream's window, so a
	// window open means the instant was taken.
	ss.send(t, &macpv1.StreamSessionRequest{})
	eventually(t, "the stream's handler to start", func() bool { return e.rt.StreamBudget().Stats().Windows == 1 })
	clk.Advance(time.Millisecond)
	e.mustAccept(t, "bob", proposal(t, sid, "between")) // record 4
	clk.Advance(time.Millisecond)
	ss.send(t, &macpv1.StreamSessionRequest{SubscribeSessionId: sid, AfterSequence: 1 << 40})
	seq, ra := ss.header(t)
	if seq != 4 {
		t.Fatalf("header session-sequence %d, want 4", seq)
	}
	g := ss.env(t)
	if g.MessageId != "between" {
		t.Fatalf("first delivered %s, want the envelope accepted after the stream opened", g.MessageId)
	}
	// Counting from the header gives the envelope's real sequence number.
	if ra+1 != 4 {
		t.Fatalf("header resume-after %d: counting from it numbers the first envelope %d, but it is record 4", ra, ra+1)
	}
}

// A terminal session: everything, then a clean end whose trailer names the
// last delivered sequence number. Subscribing at or beyond the end of a
// terminal session ends cleanly at once.
func TestStreamSubscribeTerminal(t *testing.T) {
	e, clk := startClocked(t)
	sid := e.sessionWith(t, 1)
	e.resolve(t, "init", sid) // proposal + commitment: 4 records
	hist := e.history(t, sid)
	// Beyond the end is "live since the stream opened": keep the commit
	// out of that millisecond.
	clk.Advance(5 * time.Millisecond)
	n := uint64(len(hist))

	ss := e.subscribe(t, "bob", sid, 0)
	var got []*macpv1.Envelope
	for range n {
		got = append(got, ss.env(t))
	}
	sameEnvelopes(t, "terminal replay", envelopes(hist), got)
	if last, ok := ss.end(t); !ok || last != n {
		t.Fatalf("trailer %s = %d (present %v), want %d", server.TrailerLastSeq, last, ok, n)
	}

	ss = e.subscribe(t, "bob", sid, n-1)
	if g := ss.env(t); !proto.Equal(g, hist[n-1].Envelope) {
		t.Fatalf("after N-1: got %v", g)
	}
	if last, _ := ss.end(t); last != n {
		t.Fatalf("after N-1: trailer %d, want %d", last, n)
	}

	for _, after := range []uint64{n, n + 1, 1 << 40} {
		ss := e.subscribe(t, "bob", sid, after)
		if seq, ra := ss.header(t); seq != n || ra != n {
			t.Fatalf("after %d: header %d %d, want %d %d", after, seq, ra, n, n)
		}
		if last, ok := ss.end(t); !ok || last != n {
			t.Fatalf("after %d: trailer %d (present %v), want %d", after, last, ok, n)
		}
	}
}

// A session ended by its TTL: the expiry record takes the last sequence
// number but has no envelope, so it is never delivered; the stream ends
// cleanly after the last envelope and the trailer names that envelope.
func TestStreamSubscribeExpired(t *testing.T) {
	e := startApp(t, streamConfig(0))
	sid := uuid.NewString()
	e.mustAccept(t, "init", envelope(sid, "SessionStart", "start-"+sid, mustMarshal(t, &macpv1.SessionStartPayload{
		Intent: "pick", Participants: []string{"alice"}, ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", TtlMs: 300})))
	e.mustAccept(t, "init", proposal(t, sid, "p"))
	ss := e.subscribe(t, "alice", sid, 0) // before the expiry: replay, then live until it
	eventually(t, "expiry", func() bool {
		return e.getSession(t, "init", sid).State == macpv1.SessionState_SESSION_STATE_EXPIRED
	})
	hist := e.history(t, sid)
	if len(hist) != 3 || hist[2].Envelope != nil {
		t.Fatalf("history: want start, proposal, expiry record; got %d records", len(hist))
	}
	for _, s := range []*sstream{ss, e.subscribe(t, "alice", sid, 0)} {
		sameEnvelopes(t, "expired", envelopes(hist), []*macpv1.Envelope{s.env(t), s.env(t)})
		if last, _ := s.end(t); last != 2 {
			t.Fatalf("trailer %d, want 2 (the last envelope; the expiry record 3 has none)", last)
		}
	}
	// Resuming after the last envelope: nothing more, a clean end.
	ss = e.subscribe(t, "alice", sid, 2)
	if last, _ := ss.end(t); last != 2 {
		t.Fatalf("resume after the last envelope: trailer %d, want 2", last)
	}
}

// Only the initiator, declared participants and observers may subscribe
// (FORBIDDEN, PERMISSION_DENIED); an unknown session is NOT_FOUND.
func TestStreamSubscribeAuthorization(t *testing.T) {
	e := startApp(t, streamConfig(0))
	sid := e.sessionWith(t, 0)
	for _, who := range []string{"init", "alice", "bob", observerToken} {
		ss := e.subscribe(t, who, sid, 0)
		if g := ss.env(t); g.MessageType != coord.TypeSessionStart {
			t.Fatalf("%s: got %v", who, g)
		}
	}
	wantStatus(t, e.subscribe(t, "mallory", sid, 0).fail(t), codes.PermissionDenied, "FORBIDDEN")
	wantStatus(t, e.subscribe(t, "alice", uuid.NewString(), 0).fail(t), codes.NotFound, "SESSION_NOT_FOUND")
	wantStatus(t, e.subscribe(t, observerToken, uuid.NewString(), 0).fail(t), codes.NotFound, "SESSION_NOT_FOUND")
}

// A frame with both an envelope and subscribe_session_id is an invalid
// argument (STREAM-6).
func TestStreamBothFields(t *testing.T) {
	e := startApp(t, streamConfig(0))
	sid := e.sessionWith(t, 0)
	ss := e.openStream(t, "init")
	ss.send(t, &macpv1.StreamSessionRequest{Envelope: proposal(t, sid, "x"), SubscribeSessionId: sid})
	wantStatus(t, ss.fail(t), codes.InvalidArgument, "INVALID_ENVELOPE")
	// Nothing was admitted.
	if n := len(e.history(t, sid)); n != 1 {
		t.Fatalf("history has %d records, want 1", n)
	}
}

// A second session on a bound stream is an invalid argument (STREAM-2,
// STREAM-9), whichever way the stream was bound.
func TestStreamSecondSession(t *testing.T) {
	e := startApp(t, streamConfig(0))
	a, b := e.sessionWith(t, 0), e.sessionWith(t, 0)

	// Passive, then another subscribe.
	ss := e.subscribe(t, "init", a, 0)
	ss.env(t)
	ss.send(t, &macpv1.StreamSessionRequest{SubscribeSessionId: b})
	wantStatus(t, ss.fail(t), codes.InvalidArgument, "")

	// Passive, then an envelope of another session.
	ss = e.subscribe(t, "init", a, 0)
	ss.env(t)
	ss.sendEnv(t, proposal(t, b, "other"))
	wantStatus(t, ss.fail(t), codes.InvalidArgument, "")

	// Active, then an envelope of another session.
	ss = e.openStream(t, "init")
	ss.sendEnv(t, proposal(t, a, "pa"))
	if g := ss.env(t); g.MessageId != "pa" {
		t.Fatalf("active: got %v", g)
	}
	ss.sendEnv(t, proposal(t, b, "pb"))
	wantStatus(t, ss.fail(t), codes.InvalidArgument, "")

	// Active, then a subscribe to another session.
	ss = e.openStream(t, "init")
	ss.sendEnv(t, proposal(t, a, "pa2"))
	if g := ss.env(t); g.MessageId != "pa2" {
		t.Fatalf("active: got %v", g)
	}
	ss.send(t, &macpv1.StreamSessionRequest{SubscribeSessionId: b})
	wantStatus(t, ss.fail(t), codes.InvalidArgument, "")

	// Neither refused envelope was admitted.
	for _, id := range []string{"other", "pb"} {
		for _, r := range e.history(t, b) {
			if r.Envelope.GetMessageId() == id {
				t.Fatalf("%s was admitted to session b", id)
			}
		}
	}
}

// Active stream: a SessionStart binds it; envelopes of every sender (on
// the stream and through Send) follow in acceptance order; the
// initiator's CancelSession appears as the runtime-emitted SessionCancel,
// then the stream ends cleanly with the trailer.
func TestStreamActive(t *testing.T) {
	e := startApp(t, streamConfig(0))
	sid := uuid.NewString()
	ss := e.openStream(t, "init")
	ss.sendEnv(t, envelope(sid, "SessionStart", "start", startPayload(t, "alice", "bob")))
	if g := ss.env(t); g.MessageType != coord.TypeSessionStart || g.Sender != "init" {
		t.Fatalf("first: %v", g)
	}
	if seq, ra := ss.header(t); seq != 1 || ra != 0 {
		t.Fatalf("header %d %d, want 1 0", seq, ra)
	}
	// Envelopes on the stream are admitted asynchronously to Send calls:
	// wait for each before the next, so the expected order is defined.
	e.mustAccept(t, "alice", proposal(t, sid, "from-alice"))
	if g := ss.env(t); g.MessageId != "from-alice" || g.Sender != "alice" {
		t.Fatalf("got %v", g)
	}
	ss.sendEnv(t, proposal(t, sid, "from-init"))
	if g := ss.env(t); g.MessageId != "from-init" || g.Sender != "init" {
		t.Fatalf("got %v", g)
	}
	e.mustAccept(t, "bob", proposal(t, sid, "from-bob"))
	if g := ss.env(t); g.MessageId != "from-bob" || g.Sender != "bob" {
		t.Fatalf("got %v", g)
	}
	// Several at once from both paths: the stream's order is the
	// acceptance order (the store's).
	for i := 0; i < 5; i++ {
		ss.sendEnv(t, proposal(t, sid, fmt.Sprintf("s-%d", i)))
		e.mustAccept(t, "alice", proposal(t, sid, fmt.Sprintf("u-%d", i)))
	}
	var hist []session.Record
	eventually(t, "14 records stored", func() bool { hist = e.history(t, sid); return len(hist) >= 14 })
	for _, r := range hist[4:14] {
		if g := ss.env(t); !proto.Equal(g, r.Envelope) {
			t.Fatalf("got %v, want record %d %v", g, r.Seq, r.Envelope)
		}
	}
	if _, err := e.c.CancelSession(as("init"), &macpv1.CancelSessionRequest{SessionId: sid, Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	g := ss.env(t)
	if g.MessageType != coord.TypeSessionCancel || g.Sender != coord.RuntimeSender {
		t.Fatalf("want the runtime's SessionCancel, got %v", g)
	}
	hist = e.history(t, sid)
	if last, ok := ss.end(t); !ok || last != uint64(len(hist)) || len(hist) != 15 {
		t.Fatalf("trailer %d (present %v), history %d", last, ok, len(hist))
	}
	if !proto.Equal(hist[14].Envelope, g) {
		t.Fatalf("SessionCancel differs from the stored one")
	}
}

// A rejected envelope comes back in-stream as a MACPError with the MACP
// code; the stream stays open and later envelopes still work.
func TestStreamActiveRejection(t *testing.T) {
	e := startApp(t, streamConfig(0))
	sid := e.sessionWith(t, 0)
	ss := e.openStream(t, "alice")
	ss.sendEnv(t, proposal(t, sid, "ok-1"))
	if g := ss.env(t); g.MessageId != "ok-1" {
		t.Fatalf("got %v", g)
	}
	// Only the initiator may commit (default policy): FORBIDDEN.
	ss.sendEnv(t, envelope(sid, "Commitment", "c-alice", commitmentPayload(t)))
	me := ss.macpErr(t)
	if me.Code != "FORBIDDEN" || me.MessageId != "c-alice" || me.SessionId != sid {
		t.Fatalf("in-stream error %v", me)
	}
	// A malformed envelope (no message_id): INVALID_ENVELOPE, in-stream.
	bad := proposal(t, sid, "")
	ss.sendEnv(t, bad)
	if me := ss.macpErr(t); me.Code != "INVALID_ENVELOPE" {
		t.Fatalf("in-stream error %v", me)
	}
	// The stream is still open: later envelopes are admitted and emitted,
	// as are other senders'.
	ss.sendEnv(t, proposal(t, sid, "ok-2"))
	if g := ss.env(t); g.MessageId != "ok-2" {
		t.Fatalf("got %v", g)
	}
	e.mustAccept(t, "bob", proposal(t, sid, "ok-3"))
	if g := ss.env(t); g.MessageId != "ok-3" {
		t.Fatalf("got %v", g)
	}
	// Rejected envelopes never enter the history.
	for _, r := range e.history(t, sid) {
		if id := r.Envelope.GetMessageId(); id == "c-alice" || id == "" {
			t.Fatalf("rejected envelope %q in the history", id)
		}
	}
	// Half-closing a bound stream (the official SDKs' close()) ends it
	// once it delivered everything that was durable at that moment.
	if err := ss.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if last, _ := ss.end(t); last != uint64(len(e.history(t, sid))) {
		t.Fatalf("trailer %d, want %d", last, len(e.history(t, sid)))
	}
}

// Half-close of a subscribed stream: it delivers what was durable when the
// client half-closed (the whole history for after_sequence 0), then ends
// OK with the trailer; with after_sequence beyond the end it ends at once,
// delivering nothing. Both official SDKs close a subscription this way
// (the TypeScript SDK's "sendSubscribe with a future afterSequence" test
// waits for that end); the reference runtime behaves the same.
func TestStreamSubscribeHalfCloseDrainsThenEnds(t *testing.T) {
	e := startApp(t, streamConfig(20*time.Millisecond))
	sid := e.sessionWith(t, 40)
	hist := envelopes(e.history(t, sid))

	ss := e.subscribe(t, "alice", sid, 0)
	if err := ss.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var got []*macpv1.Envelope
	for range hist {
		got = append(got, ss.env(t))
	}
	sameEnvelopes(t, "drained history", hist, got)
	if last, ok := ss.end(t); !ok || last != uint64(len(hist)) {
		t.Fatalf("trailer %d %v, want %d", last, ok, len(hist))
	}

	// A stream whose after_sequence is beyond the end is live from when
	// it opened, and records accepted in that same millisecond count as
	// live (FollowOptions.LiveSinceMs): open it in a later millisecond
	// than the last acceptance, so that nothing is live.
	recs := e.history(t, sid)
	eventually(t, "a later millisecond", func() bool { return time.Now().UnixMilli() > recs[len(recs)-1].AcceptedAtMs })
	ss = e.subscribe(t, "alice", sid, 1<<40)
	if err := ss.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if last, ok := ss.end(t); !ok || last != uint64(len(hist)) {
		t.Fatalf("future after_sequence: trailer %d %v, want %d", last, ok, len(hist))
	}
}

// A rejected first envelope does not end the stream either: a later
// SessionStart on it binds it.
func TestStreamActiveFirstRejected(t *testing.T) {
	e := startApp(t, streamConfig(0))
	ss := e.openStream(t, "init")
	unknown := uuid.NewString()
	ss.sendEnv(t, proposal(t, unknown, "nowhere"))
	if me := ss.macpErr(t); me.Code != "SESSION_NOT_FOUND" {
		t.Fatalf("in-stream error %v", me)
	}
	sid := uuid.NewString()
	ss.sendEnv(t, envelope(sid, "SessionStart", "start", startPayload(t, "alice")))
	if g := ss.env(t); g.MessageType != coord.TypeSessionStart || g.SessionId != sid {
		t.Fatalf("got %v", g)
	}
	e.mustAccept(t, "alice", proposal(t, sid, "p"))
	if g := ss.env(t); g.MessageId != "p" {
		t.Fatalf("got %v", g)
	}
}

// Heartbeats: an idle bound stream gets ambient Signals (empty session_id,
// sent by the runtime) when MACP_STREAM_HEARTBEAT_MS is set; session
// envelopes are unaffected.
func TestStreamHeartbeat(t *testing.T) {
	e := startApp(t, streamConfig(20*time.Millisecond))
	sid := e.sessionWith(t, 0)
	ss := e.subscribe(t, "alice", sid, 0)
	if r := next(t, ss.ch); r.GetEnvelope().GetMessageType() != coord.TypeSessionStart {
		t.Fatalf("first: %v", r)
	}
	for i := 0; i < 3; i++ {
		hb := next(t, ss.ch).GetEnvelope()
		if hb == nil || hb.MessageType != coord.TypeSignal || hb.SessionId != "" || hb.Mode != "" || hb.Sender != coord.RuntimeSender || hb.MessageId == "" {
			t.Fatalf("heartbeat %d: %v", i, hb)
		}
		var p macpv1.SignalPayload
		if err := proto.Unmarshal(hb.Payload, &p); err != nil || p.SignalType != "heartbeat" {
			t.Fatalf("heartbeat payload %v %v", &p, err)
		}
	}
	e.mustAccept(t, "bob", proposal(t, sid, "after-heartbeats"))
	if g := ss.env(t); g.MessageId != "after-heartbeats" {
		t.Fatalf("got %v", g)
	}
	// Heartbeats never enter the history.
	if n := len(e.history(t, sid)); n != 2 {
		t.Fatalf("history %d records, want 2", n)
	}
	// An unbound stream gets no heartbeats.
	idle := e.openStream(t, "alice")
	nothing(t, idle.ch, 100*time.Millisecond)
}

// A client that opens StreamSession and half-closes without sending
// anything gets a clean end (no trailer: nothing was bound); empty frames
// are ignored.
func TestStreamHalfCloseAndEmptyFrames(t *testing.T) {
	e := startApp(t, streamConfig(0))
	ss := e.openStream(t, "alice")
	if err := ss.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, ok := ss.end(t); ok {
		t.Fatal("an unbound stream carries no trailer sequence")
	}

	ss = e.openStream(t, "alice")
	for i := 0; i < 3; i++ {
		ss.send(t, &macpv1.StreamSessionRequest{})
	}
	nothing(t, ss.ch, 50*time.Millisecond)
	if err := ss.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	ss.end(t)

	// Empty frames before and after binding change nothing.
	sid := e.sessionWith(t, 1)
	ss = e.openStream(t, "alice")
	ss.send(t, &macpv1.StreamSessionRequest{})
	ss.send(t, &macpv1.StreamSessionRequest{SubscribeSessionId: sid})
	ss.send(t, &macpv1.StreamSessionRequest{})
	sameEnvelopes(t, "after empty frames", envelopes(e.history(t, sid)), []*macpv1.Envelope{ss.env(t), ss.env(t)})
	nothing(t, ss.ch, 50*time.Millisecond)
}

// A randomized disconnect/resume test over gRPC (smaller than the
// runtime's): senders write through Send while a subscriber repeatedly
// cancels its call at random points and resubscribes with the last
// sequence number it counted. The union of what it received equals the
// session's history exactly; the reference is a final subscribe from 0
// after the session ended.
func TestStreamResumeTrials(t *testing.T) {
	e := startApp(t, streamConfig(2*time.Millisecond)) // heartbeats in the mix: counting skips them
	sid := e.sessionWith(t, 0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w, who := range []string{"init", "alice", "bob"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				select {
				case <-stop:
					return
				case <-time.After(300 * time.Microsecond):
				}
				r, err := e.c.Send(as(who), &macpv1.SendRequest{Envelope: proposal(t, sid, fmt.Sprintf("w%d-%d", w, i))})
				if err != nil || !r.Ack.Ok {
					t.Errorf("sender %d: %v %v", w, err, r.GetAck())
					return
				}
			}
		}()
	}

	rng := rand.New(rand.NewPCG(5, 6))
	var got []*macpv1.Envelope
	var cursor uint64 // the last sequence number counted
	subscribers := []string{"alice", "bob", observerToken}
	// trial reads from cursor; k > 0: cancel after k envelopes; k = 0:
	// cancel after a random delay; k < 0: read until the stream ends.
	trial := func(name string, k int) {
		ctx, cancel := context.WithTimeout(as(subscribers[rng.IntN(len(subscribers))]), 20*time.Second)
		defer cancel()
		s, err := e.c.StreamSession(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := s.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: sid, AfterSequence: cursor}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var timer <-chan time.Time
		if k == 0 {
			timer = time.After(time.Duration(rng.IntN(3000)) * time.Microsecond)
		} else if k > 0 && rng.IntN(4) == 0 {
			// Sometimes cancel before even waiting for the header.
			cancel()
			_, _ = s.Header()
			for {
				if _, err := s.Recv(); err != nil {
					break
				}
			}
			return
		}
		md, err := s.Header()
		if err != nil {
			t.Fatalf("%s: header: %v", name, err)
		}
		v := md.Get(server.HeaderResumeFrom)
		if len(v) != 1 {
			t.Fatalf("%s: header %v", name, md)
		}
		if ra, _ := strconv.ParseUint(v[0], 10, 64); ra != cursor {
			t.Fatalf("%s: resume-after %s, want %d", name, v[0], cursor)
		}
		ch := recvAsync[macpv1.StreamSessionResponse](s)
		n := 0
		for {
			select {
			case <-timer:
				cancel()
				timer = nil
				continue
			case r := <-ch:
				if r.err != nil {
					if errors.Is(r.err, io.EOF) {
						if k >= 0 {
							t.Fatalf("%s: stream ended early", name)
						}
						if last, ok := trailerSeq(t, s); !ok || last != cursor {
							t.Fatalf("%s: trailer %d %v, want %d", name, last, ok, cursor)
						}
					} else if k < 0 || ctx.Err() == nil {
						t.Fatalf("%s: %v", name, r.err)
					}
					return
				}
				env := r.msg.GetEnvelope()
				if env == nil {
					t.Fatalf("%s: unexpected %v", name, r.msg)
				}
				if isHeartbeat(env) {
					continue
				}
				got = append(got, env)
				cursor++
				n++
				if k > 0 && n == k {
					cancel()
				}
			}
		}
	}
	trials := 100
	for i := 0; i < trials; i++ {
		k := 0
		if rng.IntN(2) == 0 {
			k = 1 + rng.IntN(30)
		}
		trial(fmt.Sprintf("trial %d (cursor %d)", i, cursor), k)
	}
	close(stop)
	wg.Wait()
	if _, err := e.c.CancelSession(as("init"), &macpv1.CancelSessionRequest{SessionId: sid, Reason: "end"}); err != nil {
		t.Fatal(err)
	}
	trial("final resume", -1)

	// Reference: a subscribe from 0 after the session ended.
	ref := e.subscribe(t, "alice", sid, 0)
	var want []*macpv1.Envelope
	for {
		r := <-ref.ch
		if r.err != nil {
			if !errors.Is(r.err, io.EOF) {
				t.Fatal(r.err)
			}
			break
		}
		if !isHeartbeat(r.msg.GetEnvelope()) {
			want = append(want, r.msg.GetEnvelope())
		}
	}
	if len(want) < 50 {
		t.Fatalf("only %d envelopes in the history", len(want))
	}
	sameEnvelopes(t, "reference vs store", envelopes(e.history(t, sid)), want)
	sameEnvelopes(t, "union of resumed streams", want, got)
	if want[len(want)-1].MessageType != coord.TypeSessionCancel {
		t.Fatalf("the history must end with SessionCancel")
	}
}
