package verify

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/replay"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"google.golang.org/protobuf/proto"
)

// SessionResult is the outcome for one session.
type SessionResult struct {
	SessionID string
	// Records is the number of records read (all of them when Err is nil).
	Records uint64
	// Status is the replayed status (0 when replay did not get that far).
	Status session.Status
	// FinalHash is the Hash of the last record: the final session hash of a
	// terminal session, the current head of an open one.
	FinalHash []byte
	// Err is nil when the session verified, else why not (errors.Is
	// store.ErrCorrupt for integrity failures; replay divergence is a
	// *coord.Error).
	Err error
}

// OK reports whether the session verified.
func (r SessionResult) OK() bool { return r.Err == nil }

// HashString renders a hash as "sha256:<hex>".
func HashString(h []byte) string { return "sha256:" + hex.EncodeToString(h) }

// Verify checks every session of st, in id order, calling report once per
// session, and returns how many verified and how many failed. err is only
// for failures of the store as a whole (it cannot be listed, it was
// closed, ctx ended); a damaged session is a failed result, not an error.
//
// Per session: List's summary must not be quarantined; Read returns every
// record with the chain checked (record 1 chained to zeros, each record to
// the one before, each hash over its bytes); package replay folds the
// records through the core with their recorded times (modes resolve the bound
// modes; lim as configured); each record's stored Status must equal the
// replayed one, its Final must be absent unless the record ended the
// session and then equal the replayed Metadata(); and the summary (last
// seq, status, last hash, final metadata) must match the last record.
func Verify(ctx context.Context, st store.Store, modes session.Modes, lim session.Limits, report func(SessionResult)) (ok, failed int, err error) {
	var infos []store.SessionInfo
	if err := st.List(ctx, func(info store.SessionInfo) error {
		infos = append(infos, info)
		return nil
	}); err != nil {
		return 0, 0, fmt.Errorf("verify: listing sessions: %w", err)
	}
	for _, info := range infos {
		if err := ctx.Err(); err != nil {
			return ok, failed, err
		}
		res := Session(ctx, st, info, modes, lim)
		if res.Err != nil && (errors.Is(res.Err, store.ErrClosed) || errors.Is(res.Err, store.ErrFailed) || ctx.Err() != nil) {
			return ok, failed, res.Err
		}
		if res.OK() {
			ok++
		} else {
			failed++
		}
		if report != nil {
			report(res)
		}
	}
	return ok, failed, nil
}

// Session verifies one session given its summary from List (see Verify).
func Session(ctx context.Context, st store.Store, info store.SessionInfo, modes session.Modes, lim session.Limits) SessionResult {
	res := SessionResult{SessionID: info.SessionID}
	var last session.Record
	check := func(step replay.Step) error {
		rec, s := step.Record, step.Session
		res.Records = step.N
		if step.N == 1 && rec.Status != 0 && rec.Status != s.Status {
			return fmt.Errorf("replay diverged at record 1: the record says %s, replay says %s", rec.Status, s.Status)
		}
		res.Status = s.Status
		res.FinalHash = rec.Hash
		last = rec
		ended := !step.Before.Terminal() && s.Status.Terminal()
		switch {
		case rec.Final != nil && !ended:
			return fmt.Errorf("record %d carries final metadata but did not end the session", rec.Seq)
		case ended && rec.Status != 0 && rec.Final == nil:
			return fmt.Errorf("record %d ended the session without final metadata", rec.Seq)
		case ended && rec.Final != nil && !proto.Equal(rec.Final, s.Metadata()):
			return fmt.Errorf("record %d: stored final metadata differs from the replay: stored %v, replayed %v", rec.Seq, rec.Final, s.Metadata())
		}
		return nil
	}
	s, err := replay.Stored(ctx, st, info.SessionID, replay.Options{Modes: modes, Limits: lim, Check: check})
	if ferr := (*replay.Error)(nil); errors.As(err, &ferr) {
		res.Records = ferr.N
		err = fmt.Errorf("replay: %w", ferr.Err)
	}
	switch {
	case err != nil:
		res.Err = err
	case s == nil:
		res.Err = fmt.Errorf("no records")
	case info.Quarantined != "":
		res.Err = fmt.Errorf("%w: quarantined: %s", store.ErrCorrupt, info.Quarantined)
	case info.LastSeq != last.Seq || !bytes.Equal(info.LastHash, last.Hash):
		res.Err = fmt.Errorf("%w: the summary says the last record is %d, the history ends at %d", store.ErrCorrupt, info.LastSeq, last.Seq)
	case last.Status != 0 && info.Status != s.Status:
		res.Err = fmt.Errorf("the summary says %s, replay says %s", info.Status, s.Status)
	case s.Status.Terminal() && last.Status != 0 && !proto.Equal(info.Final, s.Metadata()):
		res.Err = fmt.Errorf("the summary's final metadata differs from the replay")
	}
	if res.Err != nil && info.Quarantined != "" && !errors.Is(res.Err, store.ErrCorrupt) {
		res.Err = fmt.Errorf("%w (quarantined: %s)", res.Err, info.Quarantined)
	}
	return res
}

// StoredModes returns base plus the extension modes registered durably in
// st (package registry writes them), in every state,
// retired ones included: sessions bound to a mode that was
// unregistered still replay. A built-in mode of base wins over a stored
// one of the same id.
func StoredModes(ctx context.Context, st store.Store, base *mode.Registry) (*mode.Registry, error) {
	reg, retired, err := registry.LoadModes(ctx, st, base)
	if err != nil {
		return nil, fmt.Errorf("verify: reading stored extension modes: %w", err)
	}
	ids := make([]string, 0, len(retired))
	for id := range retired {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		reg = reg.With(retired[id])
	}
	return reg, nil
}
