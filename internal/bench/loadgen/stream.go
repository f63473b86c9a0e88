package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/grpc/status"
)

// Pipelined StreamSession load (Config.Stream): each driven session has
// one StreamSession call carrying the initiator's identity, and every
// envelope of the session (SessionStart, the mode's messages, the
// optional Commitment) is sent on it without waiting for the previous
// one's outcome, up to Config.Window envelopes in flight. The runtime
// admits a stream's envelopes in order, exactly as Send, and delivers
// each accepted envelope back on the same stream once it is durable
// (RFC-MACP-0006 §3.2; internal/runtime/follow.go: followers see only
// durable records): that echo is the acknowledgement. A rejection comes
// back in-stream as a MACPError naming the message id. Latency is from
// the moment the envelope was handed to the stream to its echo (or its
// error).
//
// All envelopes come from one identity, so the initiator is the
// session's only declared participant (decision: it proposes and
// evaluates; proposal: it proposes). Modes whose pattern needs several
// participants (multi_round) are not driven this way.

// DefaultWindow is the default number of envelopes in flight per stream.
const DefaultWindow = 64

// streamModes are the modes whose message pattern is valid from one
// sender.
var streamModes = map[string]bool{ModeDecision: true, ModeProposal: true}

// pend is one envelope in flight on a stream.
type pend struct {
	t0  time.Time
	typ string
}

// streamSession drives one session over a pipelined StreamSession call; it
// reports whether an envelope went unanswered (the stream broke or timed
// out), like session.
func (r *runner) streamSession(cl macpv1.MACPRuntimeServiceClient, st *stats) bool {
	if r.stop.Err() != nil {
		return false
	}
	sid := sdk.NewSessionID()
	ini := r.cfg.Initiator
	start, err := sdk.NewSessionStart(sid, r.cfg.Mode, sdk.StartPayload{
		Intent: "load", Participants: []string{ini}, TTL: r.cfg.TTL,
		ModeVersion: r.cfg.ModeVersion, ConfigurationVersion: r.cfg.ConfigurationVersion,
	})
	if err != nil {
		panic(err) // fixed, valid payload
	}
	msgs := make([]msg, 0, r.cfg.Messages+2)
	msgs = append(msgs, msg{ini, sdk.TypeSessionStart, start.Payload})
	msgs = append(msgs, r.wl.prelude(ini)...)
	msgs = msgs[:min(len(msgs), 1+r.cfg.Messages)]
	for k := 0; len(msgs) < 1+r.cfg.Messages; k++ {
		m := r.wl.next(ini, 0, k)
		m.sender = ini
		msgs = append(msgs, m)
	}
	if r.cfg.Commit {
		msgs = append(msgs, msg{ini, sdk.TypeCommitment, commitment(r.cfg.ModeVersion, r.cfg.ConfigurationVersion, "")})
	}

	// The call lives until its echoes are in, even when the run stops.
	ctx, cancel := context.WithCancel(r.as(context.WithoutCancel(r.stop), ini))
	defer cancel()
	stream, err := cl.StreamSession(ctx)
	if err != nil {
		r.streamFailed(st, sid, err, 1)
		return true
	}

	var (
		mu      sync.Mutex
		pending = make(map[string]pend, r.cfg.Window)
		slots   = make(chan struct{}, r.cfg.Window)
		// progress is poked on every answer (the sender's timeout).
		progress = make(chan struct{}, 1)
	)
	recvDone := make(chan error, 1)
	go func() {
		recvDone <- r.streamReceive(stream, st, &mu, pending, slots, progress, sid)
	}()

	// waitBelow waits until fewer than n envelopes are in flight; false if
	// the stream ended or went silent for the call timeout meanwhile.
	var recvErr error
	recvEnded := false
	waitBelow := func(n int) bool {
		t := time.NewTimer(r.cfg.CallTimeout)
		defer t.Stop()
		for {
			mu.Lock()
			left := len(pending)
			mu.Unlock()
			if left < n {
				return true
			}
			if recvEnded {
				return false
			}
			select {
			case <-progress:
				t.Reset(r.cfg.CallTimeout)
			case recvErr = <-recvDone:
				recvEnded = true
			case <-t.C:
				return false
			}
		}
	}

	ok := true
	for _, m := range msgs {
		if r.stop.Err() != nil {
			break
		}
		select {
		case slots <- struct{}{}:
		default:
			if ok = waitBelow(r.cfg.Window); !ok {
				break
			}
			slots <- struct{}{}
		}
		if !ok {
			break
		}
		env := &macpv1.Envelope{
			MacpVersion: sdk.ProtocolVersion, Mode: r.cfg.Mode, MessageType: m.typ, MessageId: sdk.NewMessageID(),
			SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: m.payload,
		}
		t0 := time.Now()
		mu.Lock()
		pending[env.MessageId] = pend{t0: t0, typ: m.typ}
		if st.firstAt.IsZero() {
			st.firstAt = t0
		}
		st.sends++
		mu.Unlock()
		if err := stream.Send(&macpv1.StreamSessionRequest{Envelope: env}); err != nil {
			ok = false // the stream broke; Recv reports why
			break
		}
	}
	if ok && waitBelow(1) {
		// Every envelope answered: half-close and let the runtime end the
		// call (it delivers what is durable, then returns OK).
		_ = stream.CloseSend()
		if !recvEnded {
			t := time.NewTimer(r.cfg.CallTimeout)
			select {
			case recvErr = <-recvDone:
				recvEnded = true
			case <-t.C:
			}
			t.Stop()
		}
	}
	cancel()
	if !recvEnded {
		recvErr = <-recvDone // the receiver touches st until it returns
	}
	mu.Lock()
	lost := len(pending)
	mu.Unlock()
	if lost == 0 {
		return false // stopped before sending, or everything answered
	}
	r.streamFailed(st, sid, cmp.Or(recvErr, error(errStreamSilent)), lost)
	return true
}

var errStreamSilent = errors.New("no echo within the call timeout")

// streamFailed counts n envelopes left without an answer.
func (r *runner) streamFailed(st *stats, sid string, err error, n int) {
	st.errs += int64(n)
	if r.cfg.GiveUpAfter > 0 && time.Since(time.Unix(0, r.answered.Load())) >= r.cfg.GiveUpAfter {
		r.gaveUp.Store(true)
		r.giveUp()
	}
	code := "STREAM"
	if s, ok := status.FromError(err); ok && err != nil && !errors.Is(err, errStreamSilent) {
		code = grpcCodeName(s.Code())
	}
	st.code(&st.errCodes, code)
	if st.firstErr == "" {
		st.firstErr = fmt.Sprintf("stream %s: %v", sid, err)
	}
	st.abandoned++
}

// streamReceive reads the stream until it ends, matching echoes and
// in-stream errors to the envelopes in flight. It returns the stream's
// end: nil for a clean end (io.EOF).
func (r *runner) streamReceive(stream macpv1.MACPRuntimeService_StreamSessionClient, st *stats, mu *sync.Mutex,
	pending map[string]pend, slots chan struct{}, progress chan struct{}, sid string) error {
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		t1 := time.Now()
		var id, code, why string
		if env := resp.GetEnvelope(); env != nil {
			if env.GetSessionId() != sid {
				continue // an ambient heartbeat
			}
			id = env.GetMessageId()
		} else if e := resp.GetError(); e != nil {
			id, code, why = e.GetMessageId(), cmp.Or(e.GetCode(), "NO_CODE"), e.GetMessage()
		} else {
			continue
		}
		mu.Lock()
		p, ok := pending[id]
		if !ok && code != "" && len(pending) == 1 {
			// An error without a message id: the one envelope in flight.
			for k, v := range pending {
				id, p, ok = k, v, true
			}
		}
		if !ok {
			st.unmatched++
			mu.Unlock()
			continue
		}
		delete(pending, id)
		st.lat = append(st.lat, t1.Sub(p.t0))
		st.lastAt = t1
		if code == "" {
			st.ok++
			switch p.typ {
			case sdk.TypeSessionStart:
				st.started++
			case sdk.TypeCommitment:
				st.commit++
			}
		} else {
			st.rejected++
			st.code(&st.rejCodes, code)
			if st.firstRej == "" {
				st.firstRej = fmt.Sprintf("%s %s: %s: %s", p.typ, sid, code, why)
			}
			if p.typ == sdk.TypeSessionStart {
				st.failed++
			}
		}
		mu.Unlock()
		r.answered.Store(t1.UnixNano())
		if code == "" && r.log != nil {
			r.log.Record(sid, id, 0, p.typ)
		}
		<-slots
		select {
		case progress <- struct{}{}:
		default:
		}
	}
}
