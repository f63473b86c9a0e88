package runtime

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// owner is the single owner of one session. mu serializes decisions; the
// committer never takes mu.
type owner struct {
	id        string
	initiator string // immutable
	mu        sync.Mutex
	sess      *session.Session // nil only while the owner is being created
	// epoch increments each time the session is rebuilt from the store
	// after a failed append; guarded by mu.
	epoch  uint64
	broken atomic.Uint64 // epoch+1 of a failed append, 0 if none

	durableMu  sync.Mutex
	durableSeq uint64
	pending    int           // commit requests queued and not yet answered
	durableCh  chan struct{} // closed and replaced when durableSeq or pending changes
	followers  int           // registered followers (follow.go); guarded by durableMu
	tail       followTail    // recent durable records, shared by the followers (follow.go)
}

// durable returns the sequence number of the session's last durable record.
func (o *owner) durable() uint64 {
	o.durableMu.Lock()
	defer o.durableMu.Unlock()
	return o.durableSeq
}

// answered records that one of o's commit requests was answered; seq > 0
// is the sequence number it made durable. Waiters are woken.
func (o *owner) answered(seq uint64) {
	o.durableMu.Lock()
	if seq > 0 {
		o.durableSeq = seq
	}
	o.pending--
	close(o.durableCh)
	o.durableCh = make(chan struct{})
	o.durableMu.Unlock()
}

// waitIdle waits until none of o's commit requests is in flight. The
// caller holds o.mu, so no new request can be queued meanwhile; the
// committer never takes o.mu, so this cannot deadlock.
func (o *owner) waitIdle(ctx context.Context) error {
	for {
		o.durableMu.Lock()
		n, ch := o.pending, o.durableCh
		o.durableMu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// heal rebuilds o.sess from the store after a failed append; caller holds
// o.mu. It first waits for the session's in-flight requests to be
// answered: they were decided on the failed state and are refused by the
// store's sequence check, and waiting keeps their (failed) answers from
// marking the rebuilt owner broken or slipping past a barrier.
func (r *Runtime) heal(ctx context.Context, o *owner) error {
	if o.broken.Load() != o.epoch+1 {
		return nil
	}
	if err := o.waitIdle(ctx); err != nil {
		return err
	}
	r.unfence(o.id) // decided on what replay reads
	s, err := r.replay(ctx, o.id, o.sess.Seq)
	if err != nil {
		return err
	}
	o.sess = s
	o.epoch++
	o.broken.Store(0)
	o.durableMu.Lock()
	o.durableSeq = s.Seq
	o.durableMu.Unlock()
	r.healedShared(ctx, o) // cluster.go: records other nodes stored reach the followers
	// The failed append may have been the expiry itself.
	r.armExpiry(s)
	r.log.Warn("session rebuilt from store after a failed append", "session_id", o.id, "seq", s.Seq)
	return nil
}

// unfence tells a shared store that fences a session after a failed
// append (store.Fencer) that the session's next appends are decided anew:
// called with nothing of the session in flight.
func (r *Runtime) unfence(id string) {
	if f, ok := r.store.(store.Fencer); ok {
		f.Unfence(id)
	}
}

// lookup returns the owner of a session, or nil.
func (r *Runtime) lookup(id string) *owner {
	r.mu.RLock()
	o := r.sessions[id]
	r.mu.RUnlock()
	return o
}

// lockSession finds and locks a session's owner, healing it if a previous
// append failed. It returns nil if the session is unknown.
func (r *Runtime) lockSession(ctx context.Context, id string) (*owner, *coord.Error) {
	o, cerr := r.sessionOwner(ctx, id)
	if cerr != nil {
		return nil, cerr
	}
	o.mu.Lock()
	if o.sess == nil {
		o.mu.Unlock()
		return nil, coord.Errorf(coord.CodeSessionNotFound, "session %s not found", id)
	}
	if err := r.heal(ctx, o); err != nil {
		o.mu.Unlock()
		r.log.Error("rebuilding session failed", "session_id", id, "err", err)
		return nil, coord.Errorf(coord.CodeInternalError, "session %s is unavailable", id)
	}
	return o, nil
}
