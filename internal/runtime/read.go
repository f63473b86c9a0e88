package runtime

import (
	"context"
	"slices"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// visible reports whether id may read session s.
func visible(id coord.Identity, s *session.Session) bool {
	return id.Caps.IsObserver || s.MayObserve(id.Sender)
}

// readDurable locks the session once everything decided so far is durable
// and calls fn with it.
func (r *Runtime) readDurable(ctx context.Context, o *owner, fn func(*session.Session)) *coord.Error {
	for {
		o.mu.Lock()
		if o.sess == nil {
			o.mu.Unlock()
			return coord.Errorf(coord.CodeSessionNotFound, "session %s not found", o.id)
		}
		if err := r.heal(ctx, o); err != nil {
			o.mu.Unlock()
			return coord.Errorf(coord.CodeInternalError, "session %s is unavailable", o.id)
		}
		o.durableMu.Lock()
		durable, ch := o.durableSeq, o.durableCh
		o.durableMu.Unlock()
		if durable >= o.sess.Seq {
			fn(o.sess)
			o.mu.Unlock()
			return nil
		}
		o.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(50 * time.Millisecond): // re-check: an append may have failed
		case <-ctx.Done():
			return coord.Errorf(coord.CodeInternalError, "request cancelled")
		}
	}
}

// GetSession returns a session's durable metadata if id may see it
// (initiator, declared participant, observer).
func (r *Runtime) GetSession(ctx context.Context, id coord.Identity, sessionID string) (*macpv1.SessionMetadata, *coord.Error) {
	o := r.lookup(sessionID)
	if o == nil {
		// A terminal session on disk answers from its final metadata.
		if md, ok := r.storedMetadata(ctx, sessionID); ok {
			if !MayObserveMetadata(id, md) {
				return nil, coord.Errorf(coord.CodeForbidden, "%s may not read session %s", id.Sender, sessionID)
			}
			return md, nil
		}
		var cerr *coord.Error
		if o, cerr = r.sessionOwner(ctx, sessionID); cerr != nil {
			return nil, cerr
		}
	}
	var md *macpv1.SessionMetadata
	allowed := false
	if err := r.readDurable(ctx, o, func(s *session.Session) {
		if allowed = visible(id, s); allowed {
			md = s.Metadata()
		}
	}); err != nil {
		return nil, err
	}
	if !allowed {
		return nil, coord.Errorf(coord.CodeForbidden, "%s may not read session %s", id.Sender, sessionID)
	}
	return md, nil
}

// Inspect calls fn with the durable session under its lock, without
// authorization (for in-process tests and tools).
func (r *Runtime) Inspect(ctx context.Context, sessionID string, fn func(*session.Session)) *coord.Error {
	o, cerr := r.sessionOwner(ctx, sessionID)
	if cerr != nil {
		return cerr
	}
	return r.readDurable(ctx, o, fn)
}

// ListSessions returns the metadata of every session id may see, OPEN and
// terminal, sorted by start time then id.
func (r *Runtime) ListSessions(ctx context.Context, id coord.Identity) []*macpv1.SessionMetadata {
	// The store lists every durable session; resident sessions answer with
	// their live durable state, terminal ones on disk with their final
	// metadata, quarantined ones (to observers) with their id only.
	var infos []store.SessionInfo
	if err := r.store.List(ctx, func(info store.SessionInfo) error {
		infos = append(infos, info)
		return nil
	}); err != nil {
		r.log.Error("listing sessions failed", "err", err)
	}
	out := make([]*macpv1.SessionMetadata, 0, len(infos))
	for _, info := range infos {
		if _, q := r.quarantineReason(info.SessionID); q || info.Quarantined != "" {
			if id.Caps.IsObserver {
				out = append(out, &macpv1.SessionMetadata{SessionId: info.SessionID})
			}
			continue
		}
		o := r.lookup(info.SessionID)
		if o == nil && info.Final != nil {
			if MayObserveMetadata(id, info.Final) {
				out = append(out, info.Final)
			}
			continue
		}
		if o == nil {
			var cerr *coord.Error
			if o, cerr = r.sessionOwner(ctx, info.SessionID); cerr != nil {
				continue
			}
		}
		_ = r.readDurable(ctx, o, func(s *session.Session) {
			if visible(id, s) {
				out = append(out, s.Metadata())
			}
		})
	}
	slices.SortFunc(out, func(a, b *macpv1.SessionMetadata) int {
		if a.StartedAtUnixMs != b.StartedAtUnixMs {
			if a.StartedAtUnixMs < b.StartedAtUnixMs {
				return -1
			}
			return 1
		}
		if a.SessionId < b.SessionId {
			return -1
		}
		if a.SessionId > b.SessionId {
			return 1
		}
		return 0
	})
	return out
}

// MayObserveSession reports whether id may see the session's lifecycle.
func MayObserveMetadata(id coord.Identity, md *macpv1.SessionMetadata) bool {
	return id.Caps.IsObserver || md.Initiator == id.Sender || slices.Contains(md.Participants, id.Sender)
}

// LastSeq returns the sequence number of the session's last durable record.
func (r *Runtime) LastSeq(sessionID string) (uint64, bool) {
	o := r.lookup(sessionID)
	if o == nil {
		return 0, false
	}
	return o.durable(), true
}
