package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Stream metadata macpd sends on StreamSession (docs/resume.md).
const (
	// HeaderSessionSequence (response header): the session's last sequence
	// number when the stream started delivering.
	HeaderSessionSequence = "macp-session-sequence"
	// HeaderResumeAfter (response header): the effective after_sequence;
	// the k-th session envelope delivered has sequence number value+k.
	HeaderResumeAfter = "macp-resume-after"
	// TrailerLastSequence (trailer): the sequence number of the last
	// session envelope delivered (HeaderResumeAfter if none).
	TrailerLastSequence = "macp-last-sequence"
)

// SessionEvent is one accepted envelope of a session and its sequence
// number in the session's history (1 = SessionStart).
type SessionEvent struct {
	Seq      uint64
	Envelope *macpv1.Envelope
}

// SubscribeOption configures [Client.Subscribe].
type SubscribeOption func(*subscribeOptions)

type subscribeOptions struct {
	base, max   time.Duration
	maxAttempts int
	onReconnect func(attempt int, err error)
}

// WithReconnectBackoff sets the delay before reconnecting: base after the
// first failure, doubling with each consecutive failure up to max, with
// jitter (a random delay between half and all of it). Defaults: 100 ms and
// 5 s.
func WithReconnectBackoff(base, max time.Duration) SubscribeOption {
	return func(o *subscribeOptions) {
		o.base, o.max = base, max
	}
}

// WithMaxReconnects gives up after n consecutive failed reconnection
// attempts (attempts that failed before the runtime answered the
// subscription); the last transport error is then returned. 0 (the
// default) keeps trying until ctx ends.
func WithMaxReconnects(n int) SubscribeOption {
	return func(o *subscribeOptions) { o.maxAttempts = max(n, 0) }
}

// WithReconnectHook calls fn before each reconnection with the attempt
// number (1 for the first after a success) and the error that ended the
// previous stream (for logging and metrics). fn runs on the goroutine
// calling Next.
func WithReconnectHook(fn func(attempt int, err error)) SubscribeOption {
	return func(o *subscribeOptions) { o.onReconnect = fn }
}

// Subscription is a resumable passive subscription to one session (see
// [Client.Subscribe]). Next and All must not be called concurrently; Last,
// Reconnects and Close may be called from any goroutine.
type Subscription struct {
	c         *Client
	ctx       context.Context
	cancel    context.CancelFunc
	sessionID string
	opts      subscribeOptions

	last       atomic.Uint64 // the last delivered sequence number (the cursor)
	reconnects atomic.Int64

	delivered bool // an envelope was delivered (the cursor is no longer the requested after)
	stream    grpc.BidiStreamingClient[macpv1.StreamSessionRequest, macpv1.StreamSessionResponse]
	endStream context.CancelFunc
	seq       uint64 // sequence number of the last session envelope received on stream
	failures  int    // consecutive failed attempts
	err       error  // sticky: io.EOF, ctx's error or a permanent failure
}

// Subscribe follows a session from after_sequence after (0 = from its
// SessionStart) over StreamSession's passive subscription (RFC-MACP-0006
// §3.2), as one gap-free stream across reconnections:
//
//   - Each envelope comes with its sequence number, counted from the
//     stream's macp-resume-after header (or from after, if a runtime sends
//     no header). Heartbeats (ambient Signals with an empty session_id)
//     are skipped.
//   - When the stream fails for a transport reason (UNAVAILABLE: the
//     runtime restarted or drained, the connection was reset; also
//     ABORTED, RESOURCE_EXHAUSTED, and INTERNAL/UNKNOWN/CANCELED not caused
//     by the runtime or by ctx), it resubscribes with after_sequence = the
//     last sequence number it delivered, after a backoff
//     ([WithReconnectBackoff], [WithMaxReconnects]). Nothing is lost or
//     delivered twice. Before each attempt it resets the Client
//     connection's own gRPC connect backoff (which grows to 2 minutes), so
//     this schedule decides how soon a restarted runtime is reached.
//   - Refusals are permanent and returned by Next: FORBIDDEN (the caller is
//     not the initiator, a declared participant or an observer),
//     SESSION_NOT_FOUND, UNAUTHENTICATED, ...
//   - After the session ended (RESOLVED or EXPIRED) and every envelope was
//     delivered, Next returns io.EOF.
//
// after beyond the end of an OPEN session means "live from now" (macpd:
// from the moment the stream opened); for a terminal session it ends at
// once. The subscription connects on the first Next; Close it, or end ctx,
// when done.
func (c *Client) Subscribe(ctx context.Context, sessionID string, after uint64, opts ...SubscribeOption) *Subscription {
	o := subscribeOptions{base: 100 * time.Millisecond, max: 5 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	o.base = max(o.base, time.Millisecond)
	o.max = max(o.max, o.base)
	ctx, cancel := context.WithCancel(ctx)
	s := &Subscription{c: c, ctx: ctx, cancel: cancel, sessionID: sessionID, opts: o}
	s.last.Store(after)
	return s
}

// Last returns the sequence number of the last envelope Next delivered
// (before any: the after the subscription was created with, or the
// runtime's effective one once connected). Subscribing again from Last
// continues exactly where this subscription stopped.
func (s *Subscription) Last() uint64 { return s.last.Load() }

// Reconnects returns how many times the subscription resubscribed.
func (s *Subscription) Reconnects() int { return int(s.reconnects.Load()) }

// Close ends the subscription; a Next in progress returns
// context.Canceled.
func (s *Subscription) Close() { s.cancel() }

// Next returns the session's next accepted envelope. It blocks until one
// arrives, reconnecting as needed. It returns io.EOF once the session has
// ended and everything was delivered, ctx's error once the subscription's
// ctx ends (or Close), and an error (an [*Error] when it carries a MACP
// code) when the subscription is refused or gives up. After an error every
// call returns the same error.
func (s *Subscription) Next() (SessionEvent, error) {
	for {
		if s.err != nil {
			return SessionEvent{}, s.err
		}
		if s.stream == nil {
			s.connect()
			continue
		}
		resp, err := s.stream.Recv()
		if err != nil {
			s.drop()
			if errors.Is(err, io.EOF) {
				// The runtime ends a subscription with OK only after the
				// session's terminal record.
				s.err = io.EOF
				continue
			}
			s.retryOrFail(err)
			continue
		}
		s.failures = 0 // the stream works
		env := resp.GetEnvelope()
		if env == nil || env.GetSessionId() == "" {
			continue // heartbeat (or an in-stream error, which a passive stream does not get)
		}
		s.seq++
		if s.delivered && s.seq <= s.last.Load() {
			continue // already delivered (a runtime resumed earlier than asked)
		}
		s.delivered = true
		s.last.Store(s.seq)
		return SessionEvent{Seq: s.seq, Envelope: env}, nil
	}
}

// All ranges over Next: it yields every envelope in order, stops without
// an error when the session ended or ctx ended, and yields any other error
// once before stopping. Close the subscription afterwards.
func (s *Subscription) All() iter.Seq2[SessionEvent, error] {
	return func(yield func(SessionEvent, error) bool) {
		for {
			ev, err := s.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && s.ctx.Err() == nil {
					yield(SessionEvent{}, err)
				}
				return
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// connect opens a stream and subscribes from the cursor.
func (s *Subscription) connect() {
	ctx, cancel := context.WithCancel(s.ctx)
	stream, err := s.c.rpc.StreamSession(ctx)
	if err == nil {
		err = stream.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: s.sessionID, AfterSequence: s.last.Load()})
		if errors.Is(err, io.EOF) {
			err = nil // the stream failed: Recv reports why
		}
	}
	if err != nil {
		cancel()
		s.retryOrFail(err)
		return
	}
	// The stream is read-only from here, but its send side stays open: a
	// half-close asks the runtime to end the stream once it delivered
	// what is durable (docs/resume.md). drop cancels the call instead.
	s.stream, s.endStream = stream, cancel
	s.seq = s.last.Load()
	md, err := stream.Header()
	if err != nil || md == nil {
		return // Recv reports the failure
	}
	s.failures = 0 // the runtime accepted the subscription
	if v := md.Get(HeaderResumeAfter); len(v) > 0 {
		if n, err := strconv.ParseUint(v[0], 10, 64); err == nil {
			s.seq = n
			if !s.delivered && n < s.last.Load() {
				// after was beyond the end: the runtime says where live
				// delivery starts.
				s.last.Store(n)
			}
		}
	}
}

func (s *Subscription) drop() {
	if s.endStream != nil {
		s.endStream()
	}
	s.stream, s.endStream = nil, nil
}

// retryOrFail waits before the next attempt if err is a transport failure
// and attempts remain; otherwise it makes the error sticky.
func (s *Subscription) retryOrFail(err error) {
	if s.ctx.Err() != nil {
		s.err = s.ctx.Err()
		return
	}
	if superseded(err) {
		// Final: the same caller resumed this session elsewhere
		// (docs/resume.md "One active connection"); reconnecting would
		// take it back.
		s.err = fmt.Errorf("%w: %v", ErrSuperseded, err)
		return
	}
	if !transient(err) || (s.opts.maxAttempts > 0 && s.failures >= s.opts.maxAttempts) {
		s.err = convert(err)
		return
	}
	s.failures++
	s.reconnects.Add(1)
	if s.opts.onReconnect != nil {
		s.opts.onReconnect(s.failures, err)
	}
	d := s.opts.max
	if s.failures < 32 {
		d = min(s.opts.base<<(s.failures-1), s.opts.max)
	}
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		// gRPC backs off its own connection attempts (1 s growing to
		// 2 min) and fails calls at once meanwhile; let this schedule
		// decide when the connection is tried again.
		s.c.conn.ResetConnectBackoff()
	case <-s.ctx.Done():
		s.err = s.ctx.Err()
	}
}

// superseded reports whether a follow ended because a session/resume (or
// session/start) of the same caller made another connection the only
// active one: ABORTED with a message beginning "superseded:".
func superseded(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Aborted && strings.HasPrefix(st.Message(), SupersededPrefix)
}

// SupersededPrefix begins the message of every end by supersession: a
// gRPC follow's ABORTED status, and the reason of SSE's "superseded"
// event and of notifications/macp/detached.
const SupersededPrefix = "superseded:"

// transient reports whether a stream failure is worth a resubscription:
// a transport failure rather than a refusal by the runtime.
func transient(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return true // not from gRPC: a local transport error
	}
	switch st.Code() {
	case codes.Unavailable, codes.Aborted, codes.ResourceExhausted:
		return true
	case codes.Internal, codes.Unknown, codes.Canceled, codes.DeadlineExceeded:
		// Failures the runtime reports carry a MACP code; these do not
		// (a reset HTTP/2 stream, a proxy's cancellation).
		return CodeOf(convert(err)) == ""
	}
	return false
}
