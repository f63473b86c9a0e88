package snapshot

import (
	"context"
	"errors"
	"fmt"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"google.golang.org/protobuf/proto"
)

// InputFromHistory builds the Input from stored records without replaying
// them: the binding from the SessionStart record (its payload and the
// bound policy descriptor), the state from the last record. For a history
// that verifies (macpctl verify) it equals InputFromRecords; the running
// server uses it because its records were decided by this core already.
func InputFromHistory(recs []session.Record) (Input, error) {
	if len(recs) == 0 || recs[0].Kind != session.KindStart || recs[0].Envelope == nil || recs[0].Start == nil {
		return Input{}, fmt.Errorf("%w: history does not begin with a SessionStart record", ErrInput)
	}
	start := recs[0].Envelope
	var sp macpv1.SessionStartPayload
	if err := proto.Unmarshal(start.Payload, &sp); err != nil {
		return Input{}, fmt.Errorf("%w: SessionStart payload: %v", ErrInput, err)
	}
	in := Input{
		SessionID:            start.SessionId,
		Mode:                 start.Mode,
		ModeVersion:          sp.ModeVersion,
		ConfigurationVersion: sp.ConfigurationVersion,
		PolicyVersion:        recs[0].Start.Policy.ID,
		State:                lastStatus(recs).Proto(),
		Initiator:            start.Sender,
		Participants:         sp.Participants,
		Envelopes:            make([]*macpv1.Envelope, 0, len(recs)),
	}
	for i, rec := range recs {
		if rec.Seq != uint64(i+1) {
			return Input{}, fmt.Errorf("%w: record %d has sequence number %d", ErrInput, i+1, rec.Seq)
		}
		if rec.Envelope != nil {
			in.Envelopes = append(in.Envelopes, rec.Envelope)
		}
	}
	return in, nil
}

// lastStatus is the session's state after its last record: the
// record's Status, or, for a record written without one, what its kind
// implies (an expiry or cancel ends the session EXPIRED; an accepted
// Commitment always resolves it).
func lastStatus(recs []session.Record) session.Status {
	last := recs[len(recs)-1]
	if last.Status != 0 {
		return last.Status
	}
	switch {
	case last.Kind == session.KindExpire || last.Kind == session.KindCancel:
		return session.Expired
	case last.Kind == session.KindMessage && last.Envelope.GetMessageType() == coord.TypeCommitment:
		return session.Resolved
	}
	return session.Open
}

// Source gives a session's durable history.
type Source interface {
	// Records returns the session's durable records in order (store
	// ErrNotFound for an unknown session).
	Records(ctx context.Context, sessionID string) ([]session.Record, error)
	// Starts lists every session's SessionStart (once, to build the
	// index cross_session_decay windows read).
	Starts(ctx context.Context) ([]Start, error)
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
func (s StoreSource) Starts(ctx context.Context) ([]Start, error) {
	var ids []string
	if err := s.Store.List(ctx, func(info store.SessionInfo) error {
		ids = append(ids, info.SessionID)
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]Start, 0, len(ids))
	for _, id := range ids {
		err := s.Store.Read(ctx, id, 1, func(rec session.Record) error {
			if rec.Envelope != nil {
				var sp macpv1.SessionStartPayload
				_ = proto.Unmarshal(rec.Envelope.Payload, &sp) // stored: it decoded when accepted
				out = append(out, Start{SessionID: id, Initiator: rec.Envelope.Sender, Participants: sp.Participants, AcceptedAtMs: rec.AcceptedAtMs})
			}
			return errStop
		})
		if err != nil && !errors.Is(err, errStop) && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
	}
	return out, nil
}
