package runtime

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
)

// The write path. Send, read top to bottom in this file:
//  1. bind the sender to the identity and admit it (ratelimit.go: the
//     sender's rates; for ambient envelopes, that it may relate them to
//     the session they name, authz.go), then check the envelope's
//     structure (session.CheckEnvelope);
//  2. Signal and Progress are published at once and never stored
//     (sendAmbient);
//  3. a SessionStart creates the session's owner (startSessionOnce), any
//     other envelope is decided by its session's owner (stepOnce): under
//     the owner's lock (lockSession, owner.go, rebuilds a session whose
//     append failed) the core decides and the records are submitted to
//     the group committer (commit.go), then the lock is released;
//  4. the caller waits for the commit (await): only a durable record is
//     acknowledged; with a shared store a decision that lost a race with
//     another node is made again (retryShared, cluster.go).
// Cancel, at the end of the file, takes the same steps 3 and 4.

// Send admits one envelope from an authenticated identity and returns its
// Ack (RFC-MACP-0001 §7-8). The sender is always the identity's
// (RFC-MACP-0004 §3): a different self-asserted sender is overwritten.
func (r *Runtime) Send(ctx context.Context, id coord.Identity, env *macpv1.Envelope) *macpv1.Ack {
	if env == nil {
		return nackFor(nil, coord.Errorf(coord.CodeInvalidEnvelope, "envelope is required"), 0)
	}
	env.Sender = id.Sender
	// A SessionStart without session_id gets a minted one (sessionid.go).
	MintSessionID(env)
	if ack, _, ok := r.forward(ctx, id, ForwardCall{Op: "send", Env: env}); ok {
		return ack // served by the session's owner node (forward.go)
	}
	if cerr := r.admit(ctx, id, env); cerr != nil { // ratelimit.go: sender's rate, ambient relations
		return nackFor(env, cerr, 0)
	}
	if err := session.CheckNewEnvelope(env, r.opts.Limits); err != nil {
		return nackFor(env, err, 0)
	}
	switch env.MessageType {
	case coord.TypeSignal, coord.TypeProgress:
		return r.sendAmbient(ctx, id, env)
	case coord.TypeSessionStart:
		return r.startSession(ctx, id, env)
	}
	return r.step(ctx, env)
}

func (r *Runtime) sendAmbient(_ context.Context, _ coord.Identity, env *macpv1.Envelope) *macpv1.Ack {
	if err := session.CheckAmbient(env); err != nil {
		return nackFor(env, err, 0)
	}
	now := r.nowMs()
	r.Signals.Publish(cloneEnvelope(env))
	return &macpv1.Ack{Ok: true, MessageId: env.MessageId, SessionId: env.SessionId, AcceptedAtUnixMs: now}
}

func cloneEnvelope(e *macpv1.Envelope) *macpv1.Envelope {
	return &macpv1.Envelope{
		MacpVersion: e.MacpVersion, Mode: e.Mode, MessageType: e.MessageType, MessageId: e.MessageId,
		SessionId: e.SessionId, Sender: e.Sender, TimestampUnixMs: e.TimestampUnixMs, Payload: e.Payload,
	}
}

func (r *Runtime) startSession(ctx context.Context, id coord.Identity, env *macpv1.Envelope) *macpv1.Ack {
	return r.retryShared(ctx, func() (*macpv1.Ack, bool) { return r.startSessionOnce(ctx, id, env) })
}

func (r *Runtime) startSessionOnce(ctx context.Context, id coord.Identity, env *macpv1.Envelope) (*macpv1.Ack, bool) {
	if id.Caps.CannotStartSessions {
		return nackFor(env, coord.Errorf(coord.CodeForbidden, "%s may not start sessions", id.Sender), 0), false
	}
	if !id.Caps.AllowsMode(env.Mode) {
		return nackFor(env, coord.Errorf(coord.CodeForbidden, "%s may not start %s sessions", id.Sender, env.Mode), 0), false
	}
	now := r.nowMs()
	// An existing session answers for itself: a resend of its SessionStart
	// is a duplicate, anything else SESSION_ALREADY_EXISTS.
	if _, cerr := r.sessionOwner(ctx, env.SessionId); cerr == nil {
		return r.step(ctx, env), false
	} else if cerr.Code != coord.CodeSessionNotFound {
		return nackFor(env, cerr, 0), false
	}
	deps := r.deps()
	if p, _ := ctx.Value(startProfileKey{}).(string); p != "" { // forwarded (forward.go)
		deps.Limits.Profile = p
	}
	s, rec, err := session.Start(env, now, deps)
	if err != nil {
		return nackFor(env, coord.AsError(err), 0), false
	}
	o := &owner{id: env.SessionId, initiator: id.Sender, sess: s, durableCh: make(chan struct{})}
	// o is not visible to anyone until it is in the map, so locking it
	// before r.mu cannot deadlock.
	o.mu.Lock()
	r.mu.Lock()
	if _, taken := r.sessions[env.SessionId]; taken {
		r.mu.Unlock()
		o.mu.Unlock()
		return r.step(ctx, env), false
	}
	limit := r.opts.MaxOpenSessionsPerInitiator
	if id.Caps.MaxOpenSessions > 0 {
		limit = id.Caps.MaxOpenSessions
	}
	if limit > 0 && r.openBy[id.Sender] >= limit {
		r.mu.Unlock()
		o.mu.Unlock()
		return nackFor(env, coord.Errorf(coord.CodeRateLimited, "%s already has %d open sessions", id.Sender, limit), 0), false
	}
	r.sessions[env.SessionId] = o
	r.openBy[id.Sender]++
	r.openTotal++
	r.mu.Unlock()
	// Arm the deadline now, whatever the caller does next; if the start is
	// not stored the timer finds no session and does nothing.
	r.timers.add(env.SessionId, s.DeadlineMs)
	ev := LifecycleEvent{Type: macpv1.SessionLifecycleEvent_EVENT_TYPE_CREATED, Session: s.Metadata(), ObservedMs: now}
	done := r.commit.submit(o, []session.Record{rec}, []LifecycleEvent{ev}, false)
	o.mu.Unlock()
	if err := r.await(ctx, done, func(err error) {
		if err != nil {
			r.forget(o)
		}
	}); err != nil {
		if r.sharedRetry(err) {
			return nil, true
		}
		return nackFor(env, coord.Errorf(coord.CodeInternalError, "the session could not be stored"), 0), false
	}
	return &macpv1.Ack{Ok: true, MessageId: env.MessageId, SessionId: env.SessionId, AcceptedAtUnixMs: now, SessionState: macpv1.SessionState_SESSION_STATE_OPEN}, false
}

// forget removes a session whose SessionStart could not be stored, unless
// the store has it after all. Callers still holding o then see
// SESSION_NOT_FOUND (o.sess is nil), and the id is free again.
func (r *Runtime) forget(o *owner) {
	if _, err := r.store.LastSeq(context.Background(), o.id); err == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	r.mu.Lock()
	if r.sessions[o.id] == o {
		delete(r.sessions, o.id)
		if r.openBy[o.initiator] > 0 {
			r.openBy[o.initiator]--
			r.openTotal--
		}
	}
	r.mu.Unlock()
	o.sess = nil
	// A start that failed may have fenced the id (store.Fencer): once
	// what was decided on it is answered, a new start may use the id.
	if o.waitIdle(context.Background()) == nil {
		r.unfence(o.id)
	}
}

// step offers a session-scoped envelope (sender bound, structure checked) to
// its session; with a shared store it is decided again when another node
// stored first (cluster.go).
func (r *Runtime) step(ctx context.Context, env *macpv1.Envelope) *macpv1.Ack {
	return r.retryShared(ctx, func() (*macpv1.Ack, bool) { return r.stepOnce(ctx, env) })
}

func (r *Runtime) stepOnce(ctx context.Context, env *macpv1.Envelope) (*macpv1.Ack, bool) {
	return r.stepSubmit(ctx, env).finish(ctx, r)
}

// stepped is a session-scoped envelope decided under its owner's lock and
// submitted to the group committer (step 3); finish waits for the commit
// (step 4). ack is set instead when it was answered without a commit.
type stepped struct {
	env   *macpv1.Envelope
	ack   *macpv1.Ack
	o     *owner
	out   session.Outcome
	now   int64
	seen  uint64
	state session.Status
	done  chan error
}

func (r *Runtime) stepSubmit(ctx context.Context, env *macpv1.Envelope) *stepped {
	o, cerr := r.lockSession(ctx, env.SessionId)
	if cerr != nil {
		return &stepped{ack: nackFor(env, cerr, 0)}
	}
	if cerr := r.authorizeStep(o.sess, env); cerr != nil { // authz.go: members only, before dedup
		o.mu.Unlock()
		return &stepped{ack: nackFor(env, cerr, 0)}
	}
	now := r.nowMs()
	before, seen := o.sess.Status, o.sess.Seq
	implicitBefore, _ := o.sess.ImplicitDueMs()
	out := o.sess.Step(env, now, r.opts.Limits)
	if at, ok := o.sess.ImplicitDueMs(); ok && at != implicitBefore {
		r.timers.add(o.id, at) // a mode's implicit action became pending
	}
	state := o.sess.Status
	closes := !before.Terminal() && state.Terminal()
	var events []LifecycleEvent
	if closes {
		events = append(events, r.terminalEvent(o.sess, now))
	}
	done := r.commit.submit(o, out.Records, events, closes)
	o.mu.Unlock()
	return &stepped{env: env, o: o, out: out, now: now, seen: seen, state: state, done: done}
}

func (p *stepped) finish(ctx context.Context, r *Runtime) (*macpv1.Ack, bool) {
	if p.ack != nil {
		return p.ack, false
	}
	env, out, now, state := p.env, p.out, p.now, p.state
	if err := r.await(ctx, p.done, nil); err != nil {
		if r.sharedRetry(err) {
			return nil, true
		}
		if len(out.Records) == 0 {
			return nackFor(env, coord.Errorf(coord.CodeInternalError, "an earlier message of the session could not be stored; retry"), 0), false
		}
		return nackFor(env, coord.Errorf(coord.CodeInternalError, "the message could not be stored"), 0), false
	}
	if len(out.Records) == 0 && r.staleCopy(ctx, p.o, p.seen) { // cluster.go
		return nil, true
	}
	switch {
	case out.Duplicate:
		return &macpv1.Ack{Ok: true, Duplicate: true, MessageId: env.MessageId, SessionId: env.SessionId, AcceptedAtUnixMs: now, SessionState: state.Proto()}, false
	case out.Err != nil:
		return nackFor(env, out.Err, state.Proto()), false
	}
	return &macpv1.Ack{Ok: true, MessageId: env.MessageId, SessionId: env.SessionId, AcceptedAtUnixMs: now, SessionState: state.Proto()}, false
}

// await waits for a commit; if ctx ends first the commit still completes in
// the background, but the caller gets an error and must not ack. then, if
// not nil, runs with the commit's outcome either way (in the background if
// ctx ended first), so follow-ups do not depend on the caller's patience.
func (r *Runtime) await(ctx context.Context, done chan error, then func(error)) error {
	var expired <-chan struct{} // nil: no bound but ctx
	if r.deadlines != nil {
		expired = r.deadlines.after()
	}
	var err error
	select {
	case err := <-done:
		if then != nil {
			then(err)
		}
		return err
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = errCommitTimeout
	}
	if then != nil {
		go func() { then(<-done) }()
	}
	return err
}

// errCommitTimeout: a commit took longer than Options.CommitTimeout.
var errCommitTimeout = fmt.Errorf("runtime: the store did not confirm the write in time: %w", context.DeadlineExceeded)

// terminalEvent is the lifecycle event of a session that just ended, or
// that was just suspended or resumed.
func (r *Runtime) terminalEvent(s *session.Session, now int64) LifecycleEvent {
	t := macpv1.SessionLifecycleEvent_EVENT_TYPE_EXPIRED
	switch s.Status {
	case session.Resolved:
		t = macpv1.SessionLifecycleEvent_EVENT_TYPE_RESOLVED
	case session.Cancelled:
		t = macpv1.SessionLifecycleEvent_EVENT_TYPE_CANCELLED
	case session.Suspended:
		t = macpv1.SessionLifecycleEvent_EVENT_TYPE_SUSPENDED
	case session.Open:
		t = macpv1.SessionLifecycleEvent_EVENT_TYPE_RESUMED
	}
	return LifecycleEvent{Type: t, Session: s.Metadata(), ObservedMs: now}
}

// closedOpen updates the per-initiator OPEN count after a session ended.
func (r *Runtime) closedOpen(o *owner) {
	r.mu.Lock()
	if r.openBy[o.initiator] > 0 {
		r.openBy[o.initiator]--
		r.openTotal--
	}
	r.mu.Unlock()
}

// completed runs after req's records are durable, in commit order: the
// durable sequence advances, a session that ended releases its initiator's
// slot, then lifecycle events are published.
func (r *Runtime) completed(req *commitReq) {
	req.o.answeredWith(req.recs)
	if req.closes {
		r.closedOpen(req.o)
	}
	for _, ev := range req.events {
		r.Lifecycle.Publish(ev)
	}
}

// nackFor builds a failure Ack.
func nackFor(env *macpv1.Envelope, err *coord.Error, state macpv1.SessionState) *macpv1.Ack {
	ack := &macpv1.Ack{Ok: false, SessionState: state, Error: &macpv1.MACPError{Code: string(err.Code), Message: err.Message}}
	if env != nil {
		ack.MessageId, ack.SessionId = env.MessageId, env.SessionId
		ack.Error.MessageId, ack.Error.SessionId = env.MessageId, env.SessionId
	}
	if len(err.Reasons) > 0 {
		ack.Error.Details = reasonsJSON(err.Reasons)
	}
	return ack
}

// Cancel cancels a session on behalf of id (RFC-MACP-0001 §7.3): OPEN or
// SUSPENDED -> EXPIRED (profile 2026-04) or CANCELLED (profile latest) with
// a runtime-emitted SessionCancel record. Only the initiator may cancel
// (FORBIDDEN); unknown sessions are SESSION_NOT_FOUND; an already terminal
// session is answered ok with its state.
func (r *Runtime) Cancel(ctx context.Context, id coord.Identity, sessionID, reason string) (*macpv1.Ack, *coord.Error) {
	if ack, cerr, ok := r.forward(ctx, id, ForwardCall{Op: "cancel", SessionID: sessionID, Reason: reason}); ok {
		return ack, cerr
	}
	var cerr *coord.Error
	ack := r.retryShared(ctx, func() (ack *macpv1.Ack, retry bool) {
		ack, cerr, retry = r.cancelOnce(ctx, id, sessionID, reason)
		return ack, retry
	})
	return ack, cerr
}

func (r *Runtime) cancelOnce(ctx context.Context, id coord.Identity, sessionID, reason string) (*macpv1.Ack, *coord.Error, bool) {
	o, cerr := r.lockSession(ctx, sessionID)
	if cerr != nil {
		return nil, cerr, false
	}
	now := r.nowMs()
	before := o.sess.Status
	out := o.sess.Cancel(id.Sender, reason, uuid.NewString(), now)
	if out.Err != nil {
		o.mu.Unlock()
		return nil, out.Err, false
	}
	state := o.sess.Status
	closes := !before.Terminal() && state.Terminal()
	var events []LifecycleEvent
	if closes {
		events = append(events, r.terminalEvent(o.sess, now))
	}
	done := r.commit.submit(o, out.Records, events, closes)
	o.mu.Unlock()
	if err := r.await(ctx, done, nil); err != nil {
		if r.sharedRetry(err) {
			return nil, nil, true
		}
		return &macpv1.Ack{Ok: false, SessionId: sessionID, Error: &macpv1.MACPError{Code: string(coord.CodeInternalError), Message: "the cancellation could not be stored", SessionId: sessionID}}, nil, false
	}
	ack := &macpv1.Ack{Ok: true, SessionId: sessionID, AcceptedAtUnixMs: now, SessionState: state.Proto()}
	if len(out.Records) > 0 && out.Records[0].Envelope != nil {
		ack.MessageId = out.Records[0].Envelope.MessageId
	}
	return ack, nil, false
}

// Suspend suspends an OPEN session on behalf of id (RFC-MACP-0001 §7.5):
// OPEN -> SUSPENDED with a runtime-emitted SessionSuspend record; the TTL
// stops and the suspension cap starts. Only the initiator may suspend
// (FORBIDDEN); unknown sessions are SESSION_NOT_FOUND; a session that is
// not OPEN is SESSION_NOT_OPEN.
func (r *Runtime) Suspend(ctx context.Context, id coord.Identity, sessionID, reason string) (*macpv1.Ack, *coord.Error) {
	return r.control(ctx, id, sessionID, reason, (*session.Session).Suspend, "suspension")
}

// Resume resumes a SUSPENDED session on behalf of id (RFC-MACP-0001 §7.5):
// SUSPENDED -> OPEN with a runtime-emitted SessionResume record and the
// deadline moved by the suspended time. A session suspended longer than
// its cap expires instead (SESSION_NOT_OPEN, the EXPIRE record stored).
func (r *Runtime) Resume(ctx context.Context, id coord.Identity, sessionID, reason string) (*macpv1.Ack, *coord.Error) {
	return r.control(ctx, id, sessionID, reason, (*session.Session).Resume, "resumption")
}

type controlFunc func(s *session.Session, caller, reason, messageID string, nowMs int64) session.Outcome

func (r *Runtime) control(ctx context.Context, id coord.Identity, sessionID, reason string, op controlFunc, what string) (*macpv1.Ack, *coord.Error) {
	if ack, cerr, ok := r.forward(ctx, id, ForwardCall{Op: what, SessionID: sessionID, Reason: reason}); ok {
		return ack, cerr
	}
	var cerr *coord.Error
	ack := r.retryShared(ctx, func() (ack *macpv1.Ack, retry bool) {
		ack, cerr, retry = r.controlOnce(ctx, id, sessionID, reason, op, what)
		return ack, retry
	})
	return ack, cerr
}

func (r *Runtime) controlOnce(ctx context.Context, id coord.Identity, sessionID, reason string, op controlFunc, what string) (*macpv1.Ack, *coord.Error, bool) {
	o, cerr := r.lockSession(ctx, sessionID)
	if cerr != nil {
		return nil, cerr, false
	}
	now := r.nowMs()
	before, seen := o.sess.Status, o.sess.Seq
	out := op(o.sess, id.Sender, reason, uuid.NewString(), now)
	if len(out.Records) == 0 {
		o.mu.Unlock()
		if out.Err != nil && r.staleCopy(ctx, o, seen) { // cluster.go: decide again on a fresh copy
			return nil, nil, true
		}
		return nil, out.Err, false
	}
	state := o.sess.Status
	closes := !before.Terminal() && state.Terminal()
	events := []LifecycleEvent{r.terminalEvent(o.sess, now)}
	r.armExpiry(o.sess)
	done := r.commit.submit(o, out.Records, events, closes)
	o.mu.Unlock()
	if err := r.await(ctx, done, nil); err != nil {
		if r.sharedRetry(err) {
			return nil, nil, true
		}
		return &macpv1.Ack{Ok: false, SessionId: sessionID, Error: &macpv1.MACPError{Code: string(coord.CodeInternalError), Message: "the " + what + " could not be stored", SessionId: sessionID}}, nil, false
	}
	if out.Err != nil { // the session expired instead (its record is stored)
		return nil, out.Err, false
	}
	ack := &macpv1.Ack{Ok: true, SessionId: sessionID, AcceptedAtUnixMs: now, SessionState: state.Proto()}
	if env := out.Records[0].Envelope; env != nil {
		ack.MessageId = env.MessageId
	}
	return ack, nil, false
}
