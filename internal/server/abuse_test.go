package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/session"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/proto"
)

// Abuse (issue #6): each abusive request gets its clear error, changes no
// state, leaks no other session's data and leaves the runtime serving.
// Over gRPC with TLS and static tokens (secureEnv, authz_test.go).

// records is the session's stored history (nil if there is none).
func (e *secureEnv) records(t *testing.T, sid string) []session.Record {
	t.Helper()
	var out []session.Record
	_ = e.rt.Store().Read(context.Background(), sid, 1, func(r session.Record) error {
		out = append(out, r)
		return nil
	})
	return out
}

// unchanged fails if the session's history is not exactly before.
func (e *secureEnv) unchanged(t *testing.T, sid string, before []session.Record) {
	t.Helper()
	after := e.records(t, sid)
	if len(after) != len(before) {
		t.Fatalf("session %s: %d records, want the %d it had", sid, len(after), len(before))
	}
	for i := range before {
		if !proto.Equal(before[i].Envelope, after[i].Envelope) {
			t.Fatalf("session %s: record %d changed", sid, i+1)
		}
	}
}

// serving fails unless the runtime still answers a member's call.
func (e *secureEnv) serving(t *testing.T) {
	t.Helper()
	if _, err := e.c.ListSessions(e.as(t, secObserver), &macpv1.ListSessionsRequest{}); err != nil {
		t.Fatalf("runtime no longer serving: %v", err)
	}
}

func vote(t *testing.T, sid, id, proposal string) *macpv1.Envelope {
	return envelope(sid, "Vote", id, mustMarshal(t, &decisionv1.VotePayload{ProposalId: proposal, Vote: "APPROVE", Reason: "ok"}))
}

// Spoofed sender (RFC-MACP-0004 §3, docs/spec-decisions.md ADM-2): the
// envelope's sender is replaced by the authenticated identity, so
// claiming someone else's identity gains nothing: the envelope is judged
// (and stored) as the caller's.
func TestAbuseSpoofedSender(t *testing.T) {
	e := startSecure(t, secTokens(), nil)
	sid := e.start(t, secInitiator, secParticipant)
	e.accept(t, secInitiator, envelope(sid, "Proposal", "p", proposalPayload(t, "p1")))
	before := e.records(t, sid)

	// An outsider claiming to be the initiator or a participant.
	for _, claim := range []string{secInitiator, secParticipant} {
		env := envelope(sid, "Proposal", "spoof-"+claim, proposalPayload(t, "p2"))
		env.Sender = claim
		e.refuse(t, secOutsider, env, "FORBIDDEN")
		c := envelope(sid, "Commitment", "spoof-c-"+claim, commitmentPayload(t))
		c.Sender = claim
		e.refuse(t, secOutsider, c, "FORBIDDEN")
	}
	// A participant claiming to be the initiator may not commit.
	c := envelope(sid, "Commitment", "spoof-c", commitmentPayload(t))
	c.Sender = secInitiator
	e.refuseMember(t, secParticipant, c, "FORBIDDEN")
	e.unchanged(t, sid, before)

	// Accepted envelopes are stored under the real sender, whatever they claim.
	v := vote(t, sid, "v", "p1")
	v.Sender = secInitiator
	e.accept(t, secParticipant, v)
	recs := e.records(t, sid)
	if got := recs[len(recs)-1].Envelope.Sender; got != secParticipant {
		t.Fatalf("vote stored with sender %q, want the authenticated %q", got, secParticipant)
	}
	// A SessionStart claiming another initiator makes the caller the initiator.
	other := uuid.NewString()
	start := envelope(other, "SessionStart", "s", startPayload(t, secParticipant))
	start.Sender = secAdmin
	e.accept(t, secOutsider, start)
	if md, err := e.rt.GetSession(context.Background(), observer(), other); err != nil || md.Initiator != secOutsider {
		t.Fatalf("spoofed SessionStart: initiator %v %v", md, err)
	}
	e.serving(t)
}

// Replayed message_id (RFC-MACP-0004 §5, RFC-MACP-0001 §8.2): a member's
// replay is a duplicate with no effect, whatever it carries; an
// outsider's replay of an accepted id is FORBIDDEN (not "duplicate": it
// learns nothing about which ids exist); a SessionStart replayed by anyone
// but its initiator is SESSION_ALREADY_EXISTS.
func TestAbuseReplayedMessageID(t *testing.T) {
	e := startSecure(t, secTokens(), nil)
	sid := e.start(t, secInitiator, secParticipant)
	e.accept(t, secInitiator, envelope(sid, "Proposal", "p", proposalPayload(t, "p1")))
	e.accept(t, secParticipant, vote(t, sid, "v", "p1"))
	before := e.records(t, sid)

	dup := e.send(t, secParticipant, vote(t, sid, "v", "p1"))
	if !dup.Ok || !dup.Duplicate {
		t.Fatalf("member's replay: %v", dup)
	}
	// Different content under an accepted id is still only a duplicate.
	changed := envelope(sid, "Vote", "v", mustMarshal(t, &decisionv1.VotePayload{ProposalId: "p1", Vote: "REJECT", Reason: "x"}))
	if ack := e.send(t, secParticipant, changed); !ack.Duplicate {
		t.Fatalf("replay with new content: %v", ack)
	}
	e.refuse(t, secOutsider, vote(t, sid, "v", "p1"), "FORBIDDEN")
	e.refuse(t, secOutsider, envelope(sid, "Proposal", "p", proposalPayload(t, "p1")), "FORBIDDEN")
	e.refuse(t, secOutsider, envelope(sid, "SessionStart", "start", startPayload(t, secParticipant)), "SESSION_ALREADY_EXISTS")
	e.refuse(t, secParticipant, envelope(sid, "SessionStart", "start", startPayload(t, secParticipant)), "SESSION_ALREADY_EXISTS")
	if ack := e.send(t, secInitiator, envelope(sid, "SessionStart", "start", startPayload(t, secParticipant))); !ack.Duplicate {
		t.Fatalf("initiator's SessionStart retry: %v", ack)
	}
	e.unchanged(t, sid, before)
	// After the session ended, a member's replay is still a duplicate.
	e.accept(t, secInitiator, envelope(sid, "Commitment", "c", commitmentPayload(t)))
	if ack := e.send(t, secParticipant, vote(t, sid, "v", "p1")); !ack.Duplicate {
		t.Fatalf("replay after resolution: %v", ack)
	}
	e.serving(t)
}

// Cross-session injection (RFC-MACP-0004 §6): an envelope for session A
// on a stream bound to session B ends that stream (INVALID_ARGUMENT); a
// member of B sending to A (whose member it is not) is FORBIDDEN. Neither
// session changes and the stream never carries A's envelopes.
func TestAbuseCrossSessionInjection(t *testing.T) {
	e := startSecure(t, secTokens(), nil)
	a := e.start(t, secInitiator, secParticipant)
	b := e.start(t, secParticipant2, secOutsider)
	e.accept(t, secInitiator, envelope(a, "Proposal", "pa", proposalPayload(t, "p1")))
	beforeA, beforeB := e.records(t, a), e.records(t, b)

	s, err := e.c.StreamSession(e.as(t, secOutsider))
	if err != nil {
		t.Fatal(err)
	}
	send := func(env *macpv1.Envelope) {
		if err := s.Send(&macpv1.StreamSessionRequest{Envelope: env}); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
	}
	send(envelope(b, "Proposal", "pb", proposalPayload(t, "p1"))) // binds the stream to B
	var err2 error
	for {
		resp, err := s.Recv()
		if err != nil {
			err2 = err
			break
		}
		if env := resp.GetEnvelope(); env.GetSessionId() == b && env.GetMessageId() == "pb" {
			send(envelope(a, "Vote", "inject", mustMarshal(t, &decisionv1.VotePayload{ProposalId: "p1", Vote: "APPROVE"})))
		}
		if env := resp.GetEnvelope(); env.GetSessionId() == a {
			t.Fatalf("stream bound to B delivered A's envelope %v", env)
		}
	}
	wantStatus(t, err2, codes.InvalidArgument, "")
	e.refuse(t, secOutsider, vote(t, a, "inject2", "p1"), "FORBIDDEN")
	e.unchanged(t, a, beforeA)
	if got := e.records(t, b); len(got) != len(beforeB)+1 {
		t.Fatalf("session B has %d records, want %d (its own proposal only)", len(got), len(beforeB)+1)
	}
	e.serving(t)
}

// grpcFrame is a gRPC length-prefixed message: flag, declared length,
// bytes (the declared length need not match).
func grpcFrame(compressed byte, declared uint32, payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	b[0] = compressed
	binary.BigEndian.PutUint32(b[1:], declared)
	return append(b, payload...)
}

// rawCall makes one HTTP/2 request over TLS with an arbitrary body and
// returns the HTTP status and grpc-status ("" if none).
func (e *secureEnv) rawCall(t *testing.T, method, sender, contentType string, body []byte) (int, string) {
	t.Helper()
	cfg := e.tls.Clone()
	cfg.NextProtos = []string{"h2"}
	tr := &http2.Transport{TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, "https://"+e.addr+"/macp.v1.MACPRuntimeService/"+method, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", contentType)
	req.Header.Set("te", "trailers")
	if sender != "" {
		req.Header.Set("authorization", "Bearer "+secToken(sender))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := tr.RoundTrip(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if s := resp.Header.Get("grpc-status"); s != "" {
		return resp.StatusCode, s
	}
	return resp.StatusCode, resp.Trailer.Get("grpc-status")
}

// Oversized and malformed frames: a request larger than the receive limit
// is RESOURCE_EXHAUSTED before it is decoded; a payload over
// MACP_MAX_PAYLOAD_BYTES is PAYLOAD_TOO_LARGE; bytes that are not the
// request message, truncated or falsely compressed frames, a non-gRPC
// content type and raw garbage each fail with their error. None changes
// the session or stops the runtime.
func TestAbuseOversizedAndMalformedFrames(t *testing.T) {
	const maxPayload = 4096
	e := startSecure(t, secTokens(), func(c *config.Config) { c.MaxPayloadBytes = maxPayload })
	sid := e.start(t, secInitiator, secParticipant)
	e.accept(t, secInitiator, envelope(sid, "Proposal", "p", proposalPayload(t, "p1")))
	before := e.records(t, sid)

	t.Run("frame over the receive limit", func(t *testing.T) {
		huge := envelope(sid, "Vote", "huge", bytes.Repeat([]byte{1}, 1<<20))
		_, err := e.c.Send(e.as(t, secParticipant), &macpv1.SendRequest{Envelope: huge})
		wantStatus(t, err, codes.ResourceExhausted, "")
		// A 2 GiB declared length is refused from the prefix alone.
		_, st := e.rawCall(t, "Send", secParticipant, "application/grpc", grpcFrame(0, 1<<31, []byte{1, 2, 3}))
		if st != "8" {
			t.Fatalf("declared 2 GiB frame: grpc-status %q, want 8 (RESOURCE_EXHAUSTED)", st)
		}
	})
	t.Run("payload over MACP_MAX_PAYLOAD_BYTES", func(t *testing.T) {
		e.refuseMember(t, secParticipant, envelope(sid, "Vote", "big", bytes.Repeat([]byte{1}, maxPayload+1)), "PAYLOAD_TOO_LARGE")
	})
	t.Run("malformed", func(t *testing.T) {
		req, _ := proto.Marshal(&macpv1.SendRequest{Envelope: vote(t, sid, "raw", "p1")})
		for _, c := range []struct {
			name, contentType string
			body              []byte
			want              string // grpc-status; "" = any failure
		}{
			// Undecodable bytes are the client's error: INVALID_ARGUMENT (codec.go).
			{"invalid protobuf", "application/grpc", grpcFrame(0, 8, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), "3"},
			{"wrong message type", "application/grpc", grpcFrame(0, 3, []byte{0x0a, 0x01, 0xff}), "3"},
			{"truncated frame", "application/grpc", grpcFrame(0, uint32(len(req)+100), req), ""},
			{"compressed flag without compression", "application/grpc", grpcFrame(1, uint32(len(req)), req), ""},
			{"garbage prefix", "application/grpc", []byte{0xde, 0xad}, ""},
		} {
			_, st := e.rawCall(t, "Send", secParticipant, c.contentType, c.body)
			if st == "0" || st == "" || (c.want != "" && st != c.want) {
				t.Errorf("%s: grpc-status %q, want %s", c.name, st, map[bool]string{true: c.want, false: "a failure"}[c.want != ""])
			}
		}
		code, _ := e.rawCall(t, "Send", secParticipant, "text/plain", req)
		if code != http.StatusUnsupportedMediaType {
			t.Errorf("non-gRPC content type: HTTP %d, want 415", code)
		}
		// Not TLS at all: the connection is closed.
		conn, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write(bytes.Repeat([]byte("GET / HTTP/1.1\r\n\r\n"), 100))
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, conn) // until the server closes it
		conn.Close()
	})
	e.unchanged(t, sid, before)
	e.accept(t, secParticipant, vote(t, sid, "raw", "p1")) // the id was never consumed
	e.serving(t)
}

// rawH2 opens a TLS connection speaking HTTP/2 frames directly, after the
// client preface and an empty SETTINGS frame.
func (e *secureEnv) rawH2(t *testing.T) (*tls.Conn, *http2.Framer) {
	t.Helper()
	cfg := e.tls.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", e.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return conn, fr
}

// Slow-loris style idle connections and streams. A connection that never
// completes its TLS handshake, or never sends the HTTP/2 preface, is
// closed after the handshake timeout; one without calls gets GOAWAY after
// the idle limit; a client pinging too often gets GOAWAY
// ENHANCE_YOUR_CALM; the server advertises its per-connection stream
// limit; idle streams beyond an identity's stream limit are RATE_LIMITED
// while other identities are served. Idle attackers therefore cannot hold
// the connection limit: legitimate clients get in once they are reaped.
func TestAbuseSlowLoris(t *testing.T) {
	const handshake, idle = 300 * time.Millisecond, 400 * time.Millisecond
	e := startSecure(t, secTokens(), func(c *config.Config) {
		c.Limits.HandshakeTimeout = handshake
		c.Limits.MaxConnectionIdle = idle
		c.Limits.MaxConcurrentStreams = 7
		c.Limits.MaxStreamsPerIdentity = 3
		c.Limits.MaxConnections = 3 // the client's own connection and two attackers
	})
	closedWithin := func(t *testing.T, conn net.Conn, what string, within time.Duration) {
		t.Helper()
		t0 := time.Now()
		_ = conn.SetReadDeadline(time.Now().Add(within))
		_, err := io.Copy(io.Discard, conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%s: connection still open after %v", what, within)
		}
		t.Logf("%s: closed by the server after %v", what, time.Since(t0).Round(time.Millisecond))
	}
	t.Run("no TLS handshake", func(t *testing.T) {
		conn, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		closedWithin(t, conn, "silent TCP connection", 10*handshake)
	})
	t.Run("no HTTP/2 preface", func(t *testing.T) {
		cfg := e.tls.Clone()
		cfg.NextProtos = []string{"h2"}
		conn, err := tls.Dial("tcp", e.addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		closedWithin(t, conn, "TLS connection without preface", 10*handshake)
	})
	t.Run("idle connection gets GOAWAY", func(t *testing.T) {
		conn := e.dial(t)
		c := macpv1.NewMACPRuntimeServiceClient(conn)
		if _, err := c.ListSessions(e.as(t, secObserver), &macpv1.ListSessionsRequest{}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*idle)
		defer cancel()
		for s := conn.GetState(); s == connectivity.Ready; s = conn.GetState() {
			if !conn.WaitForStateChange(ctx, s) {
				t.Fatalf("connection still %v after %v without calls", s, 10*idle)
			}
		}
		// The client reconnects transparently for the next call.
		if _, err := c.ListSessions(e.as(t, secObserver), &macpv1.ListSessionsRequest{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("settings and ping flood", func(t *testing.T) {
		_, fr := e.rawH2(t)
		var sawLimit bool
		for i := 0; i < 20; i++ {
			_ = fr.WritePing(false, [8]byte{byte(i)})
		}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("connection ended without GOAWAY: %v", err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if v, ok := f.Value(http2.SettingMaxConcurrentStreams); ok {
					sawLimit = v == 7
				}
			case *http2.GoAwayFrame:
				if f.ErrCode != http2.ErrCodeEnhanceYourCalm {
					t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", f.ErrCode)
				}
				if !sawLimit {
					t.Fatal("server did not advertise SETTINGS_MAX_CONCURRENT_STREAMS 7")
				}
				return
			}
		}
	})
	t.Run("idle streams per identity", func(t *testing.T) {
		ctx, cancel := context.WithCancel(e.as(t, secOutsider))
		var chans []<-chan recvResult[*macpv1.WatchSessionsResponse]
		for range 3 {
			w, err := e.c.WatchSessions(ctx, &macpv1.WatchSessionsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Header(); err != nil {
				t.Fatal(err)
			}
			chans = append(chans, recvAsync(w))
		}
		s, err := e.c.StreamSession(e.as(t, secOutsider))
		if err == nil {
			_, err = s.Recv()
		}
		wantStatus(t, err, codes.ResourceExhausted, "RATE_LIMITED")
		// Other identities are unaffected.
		w, err := e.c.WatchSessions(e.as(t, secObserver), &macpv1.WatchSessionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Header(); err != nil {
			t.Fatalf("another identity's stream: %v", err)
		}
		cancel() // closing the idle streams frees the slots
		for _, ch := range chans {
			streamErr(t, ch)
		}
		eventually(t, "stream slots to be released", func() bool {
			w, err := e.c.WatchSessions(e.as(t, secOutsider), &macpv1.WatchSessionsRequest{})
			if err != nil {
				return false
			}
			_, err = w.Header()
			return err == nil
		})
	})
	t.Run("idle attackers do not hold the connection limit", func(t *testing.T) {
		var attackers []net.Conn
		for range 2 {
			conn, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			attackers = append(attackers, conn)
		}
		// The attackers fill MACP_MAX_CONNECTIONS, so the client's first
		// connection is refused at accept; it waits for ready and
		// reconnects, and is served once the handshake timeout has closed
		// the attackers.
		conn := e.dial(t)
		ctx, cancel := context.WithTimeout(e.as(t, secObserver), 20*handshake)
		defer cancel()
		if _, err := macpv1.NewMACPRuntimeServiceClient(conn).ListSessions(ctx, &macpv1.ListSessionsRequest{}, grpc.WaitForReady(true)); err != nil {
			t.Fatalf("legitimate client behind idle attackers: %v", err)
		}
		for _, a := range attackers {
			closedWithin(t, a, "attacker", 10*handshake)
		}
	})
	e.serving(t)
}

// Session-id guessing (RFC-MACP-0004 §5, §11.2): an outsider probing
// random ids learns nothing (SESSION_NOT_FOUND everywhere, like any
// caller); probing a real id it is not a member of tells it the id exists
// (FORBIDDEN, or SESSION_ALREADY_EXISTS for a SessionStart) and nothing
// more: no state, mode, initiator, participants, message ids or history,
// no list or watch entry, no effect. Probing by Send is bounded by the
// per-sender message rate.
func TestAbuseSessionIDGuessing(t *testing.T) {
	e := startSecure(t, secTokens(), func(c *config.Config) { c.Limits.MessagesPerMinute = 40 })
	sid := e.start(t, secInitiator, secParticipant)
	e.accept(t, secInitiator, envelope(sid, "Proposal", "p", proposalPayload(t, "p1")))
	before := e.records(t, sid)
	secrets := []string{secInitiator, secParticipant, decisionMode, "OPEN", "p1", "pick"}

	w, err := e.c.WatchSessions(e.as(t, secOutsider), &macpv1.WatchSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	watch := recvAsync(w)

	// The real id.
	_, err = e.c.GetSession(e.as(t, secOutsider), &macpv1.GetSessionRequest{SessionId: sid})
	wantStatus(t, err, codes.PermissionDenied, "FORBIDDEN")
	noLeak(t, err, secOutsider, secrets...)
	_, err = e.c.CancelSession(e.as(t, secOutsider), &macpv1.CancelSessionRequest{SessionId: sid})
	wantStatus(t, err, codes.PermissionDenied, "FORBIDDEN")
	noLeak(t, err, secOutsider, secrets...)
	_, err = e.subscribeStream(t, secOutsider, sid).Recv()
	wantStatus(t, err, codes.PermissionDenied, "FORBIDDEN")
	noLeak(t, err, secOutsider, secrets...)
	for _, env := range []*macpv1.Envelope{
		envelope(sid, "Proposal", "p", proposalPayload(t, "p1")), // an accepted id
		envelope(sid, "Proposal", "guess", proposalPayload(t, "p9")),
		envelope(sid, "Commitment", "c", commitmentPayload(t)),
	} {
		ack := e.refuse(t, secOutsider, env, "FORBIDDEN")
		if strings.Contains(ack.Error.Message, secInitiator) || strings.Contains(ack.Error.Message, "OPEN") {
			t.Fatalf("nack reveals the session: %v", ack.Error)
		}
	}
	e.refuse(t, secOutsider, envelope(sid, "SessionStart", "start", startPayload(t, secOutsider)), "SESSION_ALREADY_EXISTS")
	if r, err := e.c.ListSessions(e.as(t, secOutsider), &macpv1.ListSessionsRequest{}); err != nil || len(r.Sessions) != 0 {
		t.Fatalf("outsider lists %v %v", r, err)
	}
	nothing(t, watch, 50*time.Millisecond)
	e.unchanged(t, sid, before)

	// Random ids: SESSION_NOT_FOUND, as for a session the caller may not
	// see. Malformed ids (no session can have them; they reveal nothing):
	// INVALID_SESSION_ID, the same answer as Send's.
	for _, id := range []string{"1", "session-1", "../../etc/passwd", strings.Repeat("a", 200)} {
		_, err := e.c.GetSession(e.as(t, secOutsider), &macpv1.GetSessionRequest{SessionId: id})
		wantStatus(t, err, codes.InvalidArgument, "INVALID_SESSION_ID")
		_, err = e.c.CancelSession(e.as(t, secOutsider), &macpv1.CancelSessionRequest{SessionId: id})
		wantStatus(t, err, codes.InvalidArgument, "INVALID_SESSION_ID")
	}
	for i := range 11 {
		id := uuid.NewString()
		if i == 10 {
			id = "AAAAAAAAAAAAAAAAAAAAAAAAAAAA" // well-formed (base64url), unknown
		}
		_, err := e.c.GetSession(e.as(t, secOutsider), &macpv1.GetSessionRequest{SessionId: id})
		wantStatus(t, err, codes.NotFound, "SESSION_NOT_FOUND")
		_, err = e.c.CancelSession(e.as(t, secOutsider), &macpv1.CancelSessionRequest{SessionId: id})
		wantStatus(t, err, codes.NotFound, "SESSION_NOT_FOUND")
	}
	// Probing by Send runs into the sender's message rate.
	limited := 0
	for i := range 60 {
		ack := e.send(t, secOutsider, envelope(uuid.NewString(), "Proposal", "g", proposalPayload(t, "p")))
		switch ack.GetError().GetCode() {
		case "SESSION_NOT_FOUND":
		case "RATE_LIMITED":
			limited++
		default:
			t.Fatalf("probe %d: %v", i, ack)
		}
	}
	if limited == 0 {
		t.Fatal("60 probes within a moment were not rate-limited at 40 per minute")
	}
	e.unchanged(t, sid, before)
	e.serving(t)
}
