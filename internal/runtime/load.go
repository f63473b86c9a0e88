package runtime

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/replay"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// Loading, recovery, quarantine and housekeeping.
//
// Memory holds the OPEN sessions (all of them, from boot on) and the
// terminal sessions someone touched recently. A terminal session that is
// not in memory is answered from the store: GetSession and ListSessions
// from its stored final metadata, anything else (a resent message, a
// subscription) by loading it through replay. So startup time and memory
// grow with open sessions, not with all history (issue #4).
//
// A session whose history fails integrity checks or does not replay is
// quarantined: it stays listed (to observers) and queryable, every
// operation on it answers INTERNAL_ERROR naming the reason, and it is
// never dropped or purged. With Options.StrictRecovery the runtime refuses
// to start instead.

func quarantineErr(id, reason string) *coord.Error {
	return coord.Errorf(coord.CodeInternalError, "session %s is quarantined: %s", id, reason)
}

func (r *Runtime) quarantine(id, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.quarantined[id]; !ok {
		r.log.Error("session quarantined", "session_id", id, "reason", reason)
	}
	r.quarantined[id] = reason
}

func (r *Runtime) quarantineReason(id string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	reason, ok := r.quarantined[id]
	return reason, ok
}

// Quarantined lists quarantined sessions and why (diagnostics, tests).
func (r *Runtime) Quarantined() map[string]string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make(map[string]string, len(r.quarantined))
	for k, v := range r.quarantined {
		out[k] = v
	}
	return out
}

// sessionOwner returns a session's owner, loading the session from the
// store if it is not in memory. Unknown sessions are SESSION_NOT_FOUND,
// quarantined ones INTERNAL_ERROR.
func (r *Runtime) sessionOwner(ctx context.Context, id string) (*owner, *coord.Error) {
	if !coord.ValidSessionID(id) {
		// The same answer on every call that names a session (Send,
		// StreamSession, GetSession, CancelSession): no session can have
		// this id.
		return nil, coord.Errorf(coord.CodeInvalidSessionID,
			"session_id must be a lowercase UUID v4/v7 or at least 22 base64url characters")
	}
	if o := r.lookup(id); o != nil {
		return o, nil
	}
	if reason, q := r.quarantineReason(id); q {
		return nil, quarantineErr(id, reason)
	}
	info, err := r.store.Info(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid):
		return nil, coord.Errorf(coord.CodeSessionNotFound, "session %s not found", id)
	case err != nil:
		r.log.Error("reading session summary failed", "session_id", id, "err", err)
		return nil, coord.Errorf(coord.CodeInternalError, "session %s is unavailable", id)
	case info.Quarantined != "":
		r.quarantine(id, info.Quarantined)
		return nil, quarantineErr(id, info.Quarantined)
	}
	s, err := r.replay(ctx, id, info.LastSeq)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, coord.Errorf(coord.CodeSessionNotFound, "session %s not found", id)
		}
		if ctx.Err() != nil {
			return nil, coord.Errorf(coord.CodeInternalError, "request cancelled")
		}
		if !damaged(err) {
			// The store failed to answer (a timeout, a lost connection):
			// nothing says the history is bad, so the next call loads it
			// again instead of finding it quarantined until a restart.
			r.log.Error("loading session failed", "session_id", id, "err", err)
			return nil, coord.Errorf(coord.CodeInternalError, "session %s is unavailable", id)
		}
		r.quarantine(id, err.Error())
		return nil, quarantineErr(id, err.Error())
	}
	return r.adopt(s), nil
}

// damaged: err says that a stored history is bad (a record that fails its
// checks, store.ErrCorrupt, or one the core refuses, *replay.Error), not
// that the store failed to serve it. Only such a session is quarantined.
func damaged(err error) bool {
	var refused *replay.Error
	return errors.Is(err, store.ErrCorrupt) || errors.As(err, &refused)
}

// adopt makes a replayed session resident, unless another goroutine did
// first (then that owner wins).
func (r *Runtime) adopt(s *session.Session) *owner {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o := r.sessions[s.ID]; o != nil {
		return o
	}
	o := &owner{id: s.ID, initiator: s.Binding.Initiator, sess: s, durableSeq: s.Seq, durableCh: make(chan struct{})}
	r.sessions[s.ID] = o
	if !s.Status.Terminal() {
		r.openBy[s.Binding.Initiator]++
		r.openTotal++
		r.armExpiry(s)
	}
	return o
}

// recover loads every OPEN session by replay (the registries, package
// registry, restored their durable registrations before). Terminal sessions stay on disk until
// asked for, and are not even listed: the store's ListOpen visits the OPEN
// and quarantined sessions only, so boot grows with them, not with all
// history. With StrictRecovery every stored session's summary is checked
// (List), and any failure refuses the start. A session whose deadline
// passed while the runtime was down expires right away (its timer is
// already due) with an Expire record.
func (r *Runtime) recover(ctx context.Context) error {
	start := time.Now()
	var open, terminal, quarantined int
	var infos []store.SessionInfo
	listing, what := r.store.ListOpen, "listing open sessions"
	if r.opts.StrictRecovery {
		listing, what = r.store.List, "listing stored sessions"
	}
	err := listing(ctx, func(info store.SessionInfo) error {
		switch {
		case info.Quarantined != "":
			quarantined++
			if r.opts.StrictRecovery {
				return fmt.Errorf("session %s: %s", info.SessionID, info.Quarantined)
			}
			r.quarantined[info.SessionID] = info.Quarantined
			r.log.Error("session quarantined", "session_id", info.SessionID, "reason", info.Quarantined)
		case !info.Status.Terminal():
			if r.owns(info.SessionID) { // else its owner node loads it (Forwarder)
				infos = append(infos, info)
			}
		default: // only List (strict) gives terminal sessions
			terminal++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("runtime: %s: %w", what, err)
	}
	replayed, err := r.replayAll(ctx, infos)
	if err != nil {
		return err
	}
	for i, info := range infos {
		s, err := replayed[i].s, replayed[i].err
		if err != nil {
			quarantined++
			r.quarantined[info.SessionID] = err.Error()
			r.log.Error("session quarantined", "session_id", info.SessionID, "reason", err.Error())
			continue
		}
		r.adopt(s)
		open++
	}
	if open+terminal+quarantined > 0 {
		attrs := []any{"open_sessions", open, "quarantined", quarantined, "took", time.Since(start).Round(time.Millisecond)}
		if r.opts.StrictRecovery {
			// Only a strict boot lists (and checks) the terminal sessions.
			attrs = append(attrs, "terminal_sessions_on_disk", terminal)
		}
		r.log.Info("recovered", attrs...)
	}
	return nil
}

// replayResult is one session's replay at boot.
type replayResult struct {
	s   *session.Session
	err error
}

// replayAll replays the sessions of infos at boot, on up to GOMAXPROCS
// goroutines (sessions are independent, and nothing else touches them
// before Start returns; the store serves concurrent reads), and returns
// their results in infos order. With StrictRecovery the first failure, in
// infos order, is returned as the error and the other replays are
// abandoned.
func (r *Runtime) replayAll(ctx context.Context, infos []store.SessionInfo) ([]replayResult, error) {
	out := make([]replayResult, len(infos))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(goruntime.GOMAXPROCS(0), len(infos)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(infos) {
					return
				}
				s, err := r.replay(rctx, infos[i].SessionID, infos[i].LastSeq)
				out[i] = replayResult{s, err}
				if err != nil && r.opts.StrictRecovery {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.opts.StrictRecovery {
		// Replays cut short by cancel() report context.Canceled; the
		// failure that caused it is the first other error.
		for i, res := range out {
			if res.err != nil && !errors.Is(res.err, context.Canceled) {
				return nil, fmt.Errorf("runtime: recovering session %s: %w", infos[i].SessionID, res.err)
			}
		}
	}
	return out, nil
}

// housekeeping runs retention and eviction until stop closes.
func (r *Runtime) housekeeping() {
	every := time.Minute
	if r.opts.Retention > 0 && r.opts.Retention/10 < every {
		every = max(r.opts.Retention/10, 10*time.Millisecond)
	}
	if r.opts.EvictAfter > 0 && r.opts.EvictAfter < every {
		every = max(r.opts.EvictAfter, 10*time.Millisecond)
	}
	t := r.opts.Clock.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C():
			r.evictIdle()
			if r.opts.Retention > 0 {
				r.purgeExpired(context.Background())
			}
		}
	}
}

// evictIdle drops idle sessions (nothing in flight, no followers, not
// broken) that ended more than EvictAfter ago or that another node owns
// (Options.Forwarder); they are reloaded from the store if touched again
// (their dedup set included). It returns how many stay resident.
func (r *Runtime) evictIdle() int {
	cutoff := r.nowMs() - r.opts.EvictAfter.Milliseconds()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, o := range r.sessions {
		if !o.mu.TryLock() {
			continue
		}
		old := r.opts.EvictAfter > 0 && o.sess != nil && o.sess.Status.Terminal() && o.sess.ClosedAtMs < cutoff
		if (old || !r.owns(id)) && o.idle() {
			delete(r.sessions, id)
			if !o.sess.Status.Terminal() && r.openBy[o.initiator] > 0 {
				r.openBy[o.initiator]--
				r.openTotal--
			}
		}
		o.mu.Unlock()
	}
	return len(r.sessions)
}

// purgeExpired deletes whole terminal sessions that ended more than
// Retention ago (never part of one; never quarantined ones).
func (r *Runtime) purgeExpired(ctx context.Context) {
	cutoff := r.nowMs() - r.opts.Retention.Milliseconds()
	var victims []string
	_ = r.store.List(ctx, func(info store.SessionInfo) error {
		if info.Quarantined == "" && info.Status.Terminal() && info.LastAcceptedMs < cutoff {
			victims = append(victims, info.SessionID)
		}
		return nil
	})
	for _, id := range victims {
		if err := r.store.Purge(ctx, id); err != nil {
			r.log.Error("retention purge failed", "session_id", id, "err", err)
			continue
		}
		r.mu.Lock()
		delete(r.sessions, id)
		r.mu.Unlock()
		r.log.Info("session purged by retention", "session_id", id)
	}
}

// storedMetadata answers GetSession for a terminal session that is not in
// memory from its stored final metadata.
func (r *Runtime) storedMetadata(ctx context.Context, id string) (*macpv1.SessionMetadata, bool) {
	info, err := r.store.Info(ctx, id)
	if err != nil || info.Quarantined != "" || info.Final == nil {
		return nil, false
	}
	return info.Final, true
}
