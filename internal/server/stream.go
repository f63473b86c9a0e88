package server

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/streambudget"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Stream metadata (docs/resume.md).
const (
	// HeaderSessionSeq is sent in the response header when a stream is
	// bound: the session's last durable sequence number at that moment.
	HeaderSessionSeq = "macp-session-sequence"
	// HeaderResumeFrom is sent with it: the sequence number after which
	// this stream delivers (the effective after_sequence).
	HeaderResumeFrom = "macp-resume-after"
	// TrailerLastSeq is sent in the trailer: the sequence number of the
	// last session envelope this stream delivered, or the resume-after
	// header's value if it delivered none.
	TrailerLastSeq = "macp-last-sequence"
)

// streamState is one StreamSession call.
type streamState struct {
	s        *Service
	stream   grpc.BidiStreamingServer[macpv1.StreamSessionRequest, macpv1.StreamSessionResponse]
	id       coord.Identity
	openedMs int64

	out chan outItem
	// window holds what the follower read for this stream until gRPC
	// has written it (runtime/streambudget.go; sendrelease.go).
	window    *streambudget.Window
	sw        *sendWindow
	mu        sync.Mutex // guards bound, following, lastSent, seen, drainTo, drained, headerSent
	bound     string
	following bool
	lastSent  uint64 // the last session envelope whose Send returned (trailer)
	sending   bool   // a session envelope's Send is in flight
	// sent is signalled (without blocking) each time a session envelope's
	// Send returns, for abandon.
	sent       chan struct{}
	superseded bool // a protocol-mode attachment of the same caller ended the follow
	headerSent bool
	// seen is the sequence number of the last record the follower handled
	// (delivered, or skipped as envelope-less). After the client
	// half-closes, drainTo is the session's last durable sequence number
	// at that moment, and drained is closed once seen reaches it.
	seen    uint64
	drainTo uint64
	drained chan struct{}

	followDone chan error
	stopSend   chan struct{}
	ctxDone    <-chan struct{} // the call's context
	sendErr    chan error
	cancel     context.CancelFunc // ends the call (a failed Send)
	// acks answers the envelopes admitted once the stream follows its
	// session, in order, while later ones are decided (streampipe.go).
	acks *ackPipe
}

// StreamSession implements the bidirectional session stream
// (RFC-MACP-0006 §3.2): envelopes sent on it go through exactly the same
// admission as Send; the first session-scoped envelope binds the stream,
// which then carries every accepted envelope of the session in acceptance
// order, from every sender; rejections come back in-stream as MACPError and
// the stream stays open. A frame with subscribe_session_id (and no
// envelope) subscribes passively: accepted history after after_sequence,
// then live (docs/resume.md).
func (s *Service) StreamSession(stream grpc.BidiStreamingServer[macpv1.StreamSessionRequest, macpv1.StreamSessionResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	id, _ := identityFrom(ctx)
	st := &streamState{
		s: s, stream: stream, id: id, openedMs: s.nowMs(),
		out:        make(chan outItem, 64),
		followDone: make(chan error, 1),
		stopSend:   make(chan struct{}),
		ctxDone:    ctx.Done(),
		sendErr:    make(chan error, 1),
		sent:       make(chan struct{}, 1),
		cancel:     cancel,
	}
	st.sw = s.newSendWindow(ctx)
	st.window = st.sw.w
	st.acks = newAckPipe(func(ack *macpv1.Ack) { st.answer(ctx, ack) })
	defer func() { cancel(); st.acks.stop() }()
	reqs := make(chan *macpv1.StreamSessionRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer st.sw.end()
	st.sw.hold() // the sender's: it may still be in Send when the call ends
	go func() {
		defer st.sw.drop()
		st.sendErr <- st.sendLoop()
	}()

	var hb <-chan time.Time
	if d := s.opts.StreamHeartbeat; d > 0 {
		t := s.rt.Clock().NewTicker(d) // the runtime's clock, as every stream time
		defer t.Stop()
		hb = t.C()
	}
	var drained <-chan struct{}
	for {
		select {
		case req := <-reqs:
			if err := st.handle(ctx, req); err != nil {
				return st.finish(err)
			}
		case err := <-recvErr:
			if !errors.Is(err, io.EOF) {
				return nil // the client went away
			}
			// Half-close (the official SDKs' close()): a following stream
			// delivers what was durable at this moment, then ends OK;
			// otherwise the call is over now.
			recvErr = nil
			st.acks.flush(ctx) // what was admitted is durable or refused first
			if !st.isFollowing() {
				return st.finish(nil)
			}
			drained = st.drainAfterHalfClose()
		case <-drained:
			return st.finish(nil)
		case err := <-st.followDone:
			if errors.Is(err, runtime.ErrFollowEnded) {
				return st.finish(nil)
			}
			if ctx.Err() != nil {
				return nil
			}
			if st.isSuperseded() {
				return st.finish(errSuperseded)
			}
			var ce *coord.Error
			if errors.As(err, &ce) && ce.Code == coord.CodeRateLimited {
				// Stalled (runtime/streambudget.go): the client takes
				// nothing, so waiting for the sender to flush would wait
				// forever. End now; what is queued is dropped, and the
				// trailer names the last envelope handed to gRPC.
				return st.abandon(followStatus(err))
			}
			return st.finish(followStatus(err))
		case <-hb:
			if st.isFollowing() && len(st.out) == 0 {
				select { // never wait for a client that does not read
				case st.out <- outItem{resp: &macpv1.StreamSessionResponse{Response: &macpv1.StreamSessionResponse_Envelope{Envelope: heartbeat(s.nowMs())}}}:
				default:
				}
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// drainAfterHalfClose sets the drain target to the bound session's last
// durable sequence number and returns a channel closed once the follower
// has handled every record up to it (at once if it already has).
func (st *streamState) drainAfterHalfClose() <-chan struct{} {
	last, _ := st.s.rt.LastSeq(st.bound)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.drainTo = last
	st.drained = make(chan struct{})
	if st.seen >= last {
		close(st.drained)
	}
	return st.drained
}

// handled records that the follower is done with record seq and closes
// drained when a half-closed stream has reached its drain target; the
// caller holds mu.
func (st *streamState) handledLocked(seq uint64) {
	st.seen = seq
	if st.drained != nil && seq >= st.drainTo {
		select {
		case <-st.drained:
		default:
			close(st.drained)
		}
	}
}

// finish stops the sender after it sent everything queued, sets the
// trailer and returns err.
func (st *streamState) finish(err error) error {
	st.acks.flush(st.stream.Context())
	close(st.stopSend)
	if serr := <-st.sendErr; serr != nil && err == nil {
		err = serr
	}
	st.setTrailer()
	return err
}

// abandon ends the call without waiting for the sender (the client does
// not read): the sender's Send fails once the call is over. A Send that
// is about to return has queued its message, which the client will get
// before the trailer: it is given sendSettle to return, so that the
// trailer names it. One still waiting after that waits for the client's
// flow-control window, so its message was not queued. The wait ends when
// the sender signals that its Send returned (sent), not by polling; its
// bound is wall time, not the runtime's clock: it gives another goroutine
// time to run, which a test's fake clock would never let pass while the
// stalled stream it ends waits for it.
func (st *streamState) abandon(err error) error {
	close(st.stopSend)
	settle := time.NewTimer(sendSettle)
	defer settle.Stop()
wait:
	for {
		st.mu.Lock()
		busy := st.sending
		st.mu.Unlock()
		if !busy {
			break
		}
		select {
		case <-st.sent:
		case <-settle.C:
			break wait
		}
	}
	st.setTrailer()
	return err
}

// sendSettle is how long abandon waits for a Send in flight.
const sendSettle = 100 * time.Millisecond

// setTrailer sets macp-last-sequence on a stream that started delivering
// a session (docs/resume.md: refused subscriptions and streams never
// bound have none).
func (st *streamState) setTrailer() {
	st.mu.Lock()
	last, started := st.lastSent, st.headerSent
	st.mu.Unlock()
	if started {
		st.stream.SetTrailer(metadata.Pairs(TrailerLastSeq, strconv.FormatUint(last, 10)))
	}
}

// outItem is one queued response: a session envelope's, encoded (enc,
// shared with the other streams delivering it: respcache.go), with its
// sequence number and what the window was charged for it (released once
// gRPC frees it: sendrelease.go); or a heartbeat or error (resp).
type outItem struct {
	resp *macpv1.StreamSessionResponse
	enc  []byte
	seq  uint64
	cost int64
}

// sendLoop is the only goroutine calling stream.Send. After stopSend
// closes it sends what is still queued and returns. The window charge of
// a sent record is released when gRPC has written it (sendrelease.go).
func (st *streamState) sendLoop() error {
	rs := &recordSender{sw: st.sw}
	send := func(it outItem) error {
		if it.seq > 0 {
			st.mu.Lock()
			st.sending = true
			st.mu.Unlock()
		}
		var err error
		if it.enc != nil {
			err = rs.send(it.enc, it.cost, st.stream.SendMsg)
		} else {
			err = st.stream.Send(it.resp)
		}
		if it.seq > 0 {
			st.mu.Lock()
			st.sending = false
			if err == nil {
				st.lastSent = it.seq
			}
			st.mu.Unlock()
			select {
			case st.sent <- struct{}{}:
			default: // one signal pending is enough: abandon re-checks sending
			}
		}
		return err
	}
	for {
		select {
		case it := <-st.out:
			// Everything queued, without a select per item (a fan-out
			// stream's follower queues many records per wake-up).
			for ok := true; ok; {
				if err := send(it); err != nil {
					st.cancel() // the client is gone: end the call
					return err
				}
				select {
				case it = <-st.out:
				default:
					ok = false
				}
			}
		case <-st.ctxDone:
			return nil // the call is over (the client left): nothing more can be sent
		case <-st.stopSend:
			for {
				select {
				case it := <-st.out:
					if err := send(it); err != nil {
						return err
					}
				default:
					return nil
				}
			}
		}
	}
}

// enqueue queues a response that is not charged to the window (in-stream
// errors).
func (st *streamState) enqueue(ctx context.Context, resp *macpv1.StreamSessionResponse) bool {
	select {
	case st.out <- outItem{resp: resp}:
		return true
	case <-ctx.Done():
		return false
	}
}

// enqueueRecord queues a delivered record charged to the window. It waits
// while the queue is full, but not longer than the stall timeout: a
// client that takes nothing for that long ends the stream.
func (st *streamState) enqueueRecord(ctx context.Context, it outItem) error {
	select {
	case st.out <- it:
		return nil
	default:
	}
	var stall <-chan time.Time
	if d := st.window.StallTimeout(); d > 0 {
		t := st.s.rt.Clock().NewTimer(d)
		defer t.Stop()
		stall = t.C()
	}
	select {
	case st.out <- it:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stall:
		return st.window.Stalled()
	}
}

// errSuperseded ends a follow superseded by a protocol-mode attachment of
// the same caller (docs/resume.md "One active attachment per caller and
// session"); the trailer's macp-last-sequence is where it stopped.
var errSuperseded = status.Error(codes.Aborted, "superseded: the same caller attached to this session in protocol mode (session/start or session/resume) on another connection; this stream delivers nothing more")

func (st *streamState) isSuperseded() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.superseded
}

func (st *streamState) isFollowing() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.following
}

// handle processes one request frame. A returned error ends the call.
func (st *streamState) handle(ctx context.Context, req *macpv1.StreamSessionRequest) error {
	if why, bad := undecodable(req); bad {
		// Like any rejected frame: an in-stream error, the stream stays.
		e := undecodableErr(why)
		st.enqueue(ctx, &macpv1.StreamSessionResponse{Response: &macpv1.StreamSessionResponse_Error{Error: &macpv1.MACPError{Code: string(e.Code), Message: e.Message}}})
		return nil
	}
	env, sub := req.GetEnvelope(), req.GetSubscribeSessionId()
	switch {
	case env != nil && sub != "":
		return statusErr(coord.Errorf(coord.CodeInvalidEnvelope, "a frame carries either an envelope or subscribe_session_id, not both"))
	case sub != "":
		return st.subscribe(ctx, sub, req.GetAfterSequence())
	case env != nil:
		return st.envelope(ctx, env)
	default:
		return nil // empty frame: ignored (keepalive)
	}
}

// bind binds the stream to sessionID; a different session is refused.
func (st *streamState) bind(sessionID string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.bound != "" && st.bound != sessionID {
		return status.Errorf(codes.InvalidArgument, "%s: this stream is bound to session %s; open another stream for session %s",
			coord.CodeInvalidEnvelope, st.bound, sessionID)
	}
	st.bound = sessionID
	return nil
}

func (st *streamState) subscribe(ctx context.Context, sessionID string, after uint64) error {
	st.mu.Lock()
	already := st.following
	st.mu.Unlock()
	if already {
		return statusErr(coord.Errorf(coord.CodeInvalidEnvelope, "this stream is already following session %s", st.bound))
	}
	if err := st.bind(sessionID); err != nil {
		return err
	}
	return st.follow(ctx, sessionID, after)
}

// follow starts delivering the session's records after `after`. The
// response header carries the session's last sequence number.
func (st *streamState) follow(ctx context.Context, sessionID string, after uint64) error {
	started := make(chan error, 1)
	st.mu.Lock()
	st.following = true
	st.mu.Unlock()
	// A protocol-mode attachment of the same identity to this session
	// (session/start, session/resume) supersedes this follow
	// (runtime/attach.go, docs/resume.md): it ends with ABORTED.
	ctx, cancel := context.WithCancel(ctx)
	untrack := st.s.rt.Attachments().Track(st.id.Sender, sessionID, func() {
		st.mu.Lock()
		st.superseded = true
		st.mu.Unlock()
		cancel()
	})
	go func() {
		defer cancel()
		defer untrack()
		err := st.s.rt.Follow(ctx, st.id, sessionID, after, runtime.FollowOptions{
			LiveSinceMs: st.openedMs,
			OnStartAfter: func(lastSeq, from uint64) {
				st.sendHeader(lastSeq, from)
				started <- nil
			},
			Window: st.window,
		}, func(rec session.Record) error {
			if rec.Envelope == nil {
				st.window.Release(streambudget.Cost(rec))
				st.mu.Lock()
				st.handledLocked(rec.Seq)
				st.mu.Unlock()
				return nil
			}
			enc, err := records.encoded(rec.Seq, rec.Envelope)
			if err != nil {
				st.window.Release(streambudget.Cost(rec))
				return coord.Errorf(coord.CodeInternalError, "encoding record %d: %v", rec.Seq, err)
			}
			it := outItem{enc: enc, seq: rec.Seq, cost: streambudget.Cost(rec)}
			if err := st.enqueueRecord(ctx, it); err != nil {
				return err
			}
			st.mu.Lock()
			st.handledLocked(rec.Seq)
			st.mu.Unlock()
			return nil
		})
		select {
		case started <- err:
		default:
		}
		st.followDone <- err
	}()
	// Refusals (unknown session, not allowed) end the call with a status.
	if err := <-started; err != nil {
		st.mu.Lock()
		st.following = false
		st.mu.Unlock()
		<-st.followDone
		return followStatus(err)
	}
	return nil
}

// sendHeader sends the response header when delivery starts; after is the
// effective after_sequence (Follow's, which differs from the requested one
// when that was beyond the end). Until an envelope is delivered, the
// trailer's last sequence is after too: resuming from it loses nothing.
func (st *streamState) sendHeader(lastSeq, after uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.lastSent = max(st.lastSent, after)
	st.seen = after
	if st.headerSent {
		return
	}
	st.headerSent = true
	_ = st.stream.SendHeader(metadata.Pairs(
		HeaderSessionSeq, strconv.FormatUint(lastSeq, 10),
		HeaderResumeFrom, strconv.FormatUint(after, 10),
	))
}

// envelope admits one envelope exactly like Send. The first accepted
// session-scoped envelope binds the stream and starts delivery of the
// session's accepted envelopes from that envelope on. Until then each
// envelope is answered before the next is read; once the stream follows
// its session, envelopes are admitted without waiting for their commits
// (runtime.SendPipelined) and answered in order by st.acks, at most
// streamAckWindow outstanding.
func (st *streamState) envelope(ctx context.Context, env *macpv1.Envelope) error {
	if env.GetSessionId() != "" {
		if err := st.bind(env.SessionId); err != nil {
			return err
		}
	}
	if st.isFollowing() {
		return st.acks.admit(ctx, func() func() *macpv1.Ack { return st.s.rt.SendPipelined(ctx, st.id, env) })
	}
	var before uint64
	if env.GetSessionId() != "" {
		before, _ = st.s.rt.LastSeq(env.SessionId)
	}
	ack := st.s.rt.Send(ctx, st.id, env)
	if !ack.Ok {
		st.answer(ctx, ack)
		st.mu.Lock()
		following := st.following
		if !following && env.GetSessionId() != "" {
			// A rejected first envelope does not bind the stream.
			if _, exists := st.s.rt.LastSeq(env.SessionId); !exists {
				st.bound = ""
			}
		}
		st.mu.Unlock()
		return nil
	}
	if env.GetSessionId() == "" || st.isFollowing() {
		return nil
	}
	return st.follow(ctx, env.SessionId, before)
}

// answer sends a rejected envelope's error in-stream; an accepted one is
// echoed by the follower once durable, so its Ack sends nothing.
func (st *streamState) answer(ctx context.Context, ack *macpv1.Ack) {
	if ack.Ok || ctx.Err() != nil {
		return
	}
	e := ack.GetError()
	if e == nil {
		e = &macpv1.MACPError{Code: string(coord.CodeInternalError)}
	}
	st.enqueue(ctx, &macpv1.StreamSessionResponse{Response: &macpv1.StreamSessionResponse_Error{Error: proto.Clone(e).(*macpv1.MACPError)}})
}

// followStatus maps a Follow error to the status that ends the call.
func followStatus(err error) error {
	var ce *coord.Error
	if errors.As(err, &ce) {
		return statusErr(ce)
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, "stream cancelled")
	}
	return statusErr(coord.Errorf(coord.CodeInternalError, "stream failed"))
}

// heartbeat is an ambient Signal sent on idle bound streams
// (RFC-MACP-0006 §3.4 "heartbeat and liveness signals"): it carries no
// session id, so session consumers skip it.
func heartbeat(nowMs int64) *macpv1.Envelope {
	payload, _ := proto.Marshal(&macpv1.SignalPayload{SignalType: "heartbeat"})
	return &macpv1.Envelope{
		MacpVersion:     coord.ProtocolVersion,
		MessageType:     coord.TypeSignal,
		MessageId:       uuid.NewString(),
		Sender:          coord.RuntimeSender,
		TimestampUnixMs: nowMs,
		Payload:         payload,
	}
}
