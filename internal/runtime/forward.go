package runtime

import (
	"context"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
)

// Forwarder serves each session on one node (internal/cluster: partitioned ownership).
type Forwarder interface {
	// Forward serves call on the session's owner node; !served: serve it here.
	Forward(ctx context.Context, id coord.Identity, call ForwardCall) (ack *macpv1.Ack, cerr *coord.Error, served bool)
	// Owns: only a session's owner recovers it, adopts it from the feed and fires its deadline.
	Owns(sessionID string) bool
}

// ForwardCall is one call of the runtime API: Op "send" (Env), or
// "cancel", "suspension", "resumption" (SessionID, Reason).
type ForwardCall struct {
	Op, SessionID, Reason string
	Env                   *macpv1.Envelope
}

type startProfileKey struct{}

// WithStartProfile makes a SessionStart sent with ctx bind profile p
// instead of Options.Limits.Profile ("" = no change): a start forwarded by
// another node keeps the profile of the node the client reached.
func WithStartProfile(ctx context.Context, p string) context.Context {
	return context.WithValue(ctx, startProfileKey{}, p)
}

func (r *Runtime) forward(ctx context.Context, id coord.Identity, c ForwardCall) (*macpv1.Ack, *coord.Error, bool) {
	if r.opts.Forwarder == nil {
		return nil, nil, false
	}
	return r.opts.Forwarder.Forward(ctx, id, c)
}

func (r *Runtime) owns(id string) bool { return r.opts.Forwarder == nil || r.opts.Forwarder.Owns(id) }

// Release runs evictIdle now: it drops idle sessions another node owns.
func (r *Runtime) Release() int { return r.evictIdle() }

// Resident is how many sessions are in memory.
func (r *Runtime) Resident() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.sessions)
}

// idle: o has nothing in flight, no followers and is not broken (o.mu held).
func (o *owner) idle() bool {
	o.durableMu.Lock()
	defer o.durableMu.Unlock()
	return o.sess != nil && o.broken.Load() == 0 && o.pending == 0 && o.followers == 0 && o.durableSeq == o.sess.Seq
}
