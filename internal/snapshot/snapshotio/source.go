package snapshotio

import (
	"context"
	"errors"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/snapshot"
	"github.com/macpd/macpd/internal/store"
	"google.golang.org/protobuf/proto"
)

// Source gives a session's durable history.
type Source interface {
	// Records returns the session's durable records in order (store
	// ErrNotFound for an unknown session).
	Records(ctx context.Context, sessionID string) ([]session.Record, error)
	// Starts lists every session's SessionStart (once, to build the
	// index cross_session_decay windows read).
	Starts(ctx context.Context) ([]snapshot.Start, error)
}

// StoreSource reads a store.Store. Durable, when set, bounds what is read
// to the records made durable (a running server: runtime.LastSeq, since a
// store may show a batch before its sync); a false second result means
// the session is not resident and everything stored is durable.
type StoreSource struct {
	Store   store.Store
	Durable func(sessionID string) (uint64, bool)
}

var errStop = errors.New("stop")

// Records implements Source.
func (s StoreSource) Records(ctx context.Context, sessionID string) ([]session.Record, error) {
	limit := ^uint64(0)
	if s.Durable != nil {
		if n, ok := s.Durable(sessionID); ok {
			limit = n
		}
	}
	var recs []session.Record
	err := s.Store.Read(ctx, sessionID, 1, func(rec session.Record) error {
		if rec.Seq > limit {
			return errStop
		}
		recs = append(recs, rec)
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, store.ErrNotFound
	}
	return recs, nil
}

// Starts implements Source: the first record of every stored session.
func (s StoreSource) Starts(ctx context.Context) ([]snapshot.Start, error) {
	var ids []string
	if err := s.Store.List(ctx, func(info store.SessionInfo) error {
		ids = append(ids, info.SessionID)
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]snapshot.Start, 0, len(ids))
	for _, id := range ids {
		err := s.Store.Read(ctx, id, 1, func(rec session.Record) error {
			if rec.Envelope != nil {
				var sp macpv1.SessionStartPayload
				_ = proto.Unmarshal(rec.Envelope.Payload, &sp) // stored: it decoded when accepted
				out = append(out, snapshot.Start{SessionID: id, Initiator: rec.Envelope.Sender, Participants: sp.Participants, AcceptedAtMs: rec.AcceptedAtMs})
			}
			return errStop
		})
		if err != nil && !errors.Is(err, errStop) && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
	}
	return out, nil
}
