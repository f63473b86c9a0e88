package pebblestore

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/record"
)

// Append implements store.Store: the whole batch is validated, then
// written with its index updates in one Pebble batch and one WAL sync.
func (s *Store) Append(ctx context.Context, recs []session.Record) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if len(recs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := s.prepare(b, recs); err != nil {
		return err
	}
	if err := s.commit(b); err != nil {
		return err
	}
	s.advance()
	return nil
}

// AppendAsync implements store.Pipeliner with Pebble's ApplyNoSyncWait:
// the batch is sequenced, written to the WAL and applied under wmu, and
// the WAL sync is awaited by wait, outside it. Pebble syncs its WAL in
// order, so a batch is durable only once every earlier one is; the
// session tips advance when the batch is queued, as the next append
// continues from it. A failed sync fails the store (fail closed): that
// wait and every later one, and every later call, return the error.
func (s *Store) AppendAsync(ctx context.Context, recs []session.Record) (func() error, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	done := func() error { s.leave(); return nil }
	if len(recs) == 0 {
		return done, nil
	}
	if err := ctx.Err(); err != nil {
		s.leave()
		return nil, err
	}
	s.wmu.Lock()
	if err := s.writable(); err != nil {
		s.wmu.Unlock()
		s.leave()
		return nil, err
	}
	b := s.db.NewBatch()
	err := s.prepare(b, recs)
	if err == nil {
		if err = s.guard(func() error { return s.db.ApplyNoSyncWait(b, pebble.Sync) }); err != nil {
			s.fail.set(err)
			s.log.Error("store write failed; restart required", "err", err)
			err = s.fail.get()
			// Not queued: nothing to wait for.
			s.wmu.Unlock()
			s.leave()
			return nil, err
		}
		s.advance()
	}
	s.wmu.Unlock()
	if err != nil {
		_ = b.Close()
		s.leave()
		return nil, err
	}
	return func() error {
		defer s.leave()
		err := b.SyncWait()
		if err != nil {
			s.fail.set(err)
			s.log.Error("store sync failed; restart required", "err", err)
		}
		_ = b.Close()
		return s.fail.get()
	}, nil
}

// prepare validates recs against the session tips and writes them, with
// their index updates, into b; the caller holds wmu. The new tips are left
// in s.scratch for advance once b is committed (or queued).
//
// A session's index entry is written only by a batch that starts the
// session or changes its status (package doc: index entry): the first
// batch, and the one that ends it. Other batches write records only, so
// an OPEN session's index entry lags its history and readers take the tip
// from the last record (summarize). The batches that write the index
// entry also add the session to the open set, or remove it once the
// session ends.
func (s *Store) prepare(b *pebble.Batch, recs []session.Record) error {
	sc := &s.scratch
	clear(sc.pos)
	clear(sc.sess) // drop references to earlier callers' records
	sc.sess = sc.sess[:0]
	for _, r := range recs {
		id := r.SessionID
		p, ok := sc.pos[id]
		if !ok {
			if !store.ValidSessionID(id) {
				return fmt.Errorf("%w: session id %q", store.ErrInvalid, id)
			}
			t, err := s.loadTip(id)
			if err != nil {
				return err
			}
			p = len(sc.sess)
			sc.pos[id] = p
			sc.sess = append(sc.sess, pendingTip{tip: t, from: t})
		}
		ps := &sc.sess[p]
		if r.Seq != ps.tip.seq+1 {
			return fmt.Errorf("%w: session %s record %d, expected %d", store.ErrConflict, id, r.Seq, ps.tip.seq+1)
		}
		v, err := sc.enc.EncodeTo(sc.value, r, ps.tip.hash[:])
		if err != nil {
			return err
		}
		sc.value = v
		sc.key = appendHistKey(sc.key[:0], id, r.Seq)
		if err := b.Set(sc.key, v, nil); err != nil { // Set copies key and value
			return err
		}
		ps.tip.seq, ps.tip.status = r.Seq, r.Status
		copy(ps.tip.hash[:], v[len(v)-record.HashSize:])
		ps.last = r
	}
	for i := range sc.sess {
		ps := &sc.sess[i]
		if !ps.indexed() && !s.indexEveryBatch {
			continue
		}
		last := ps.last
		last.Hash = ps.tip.hash[:]
		v, err := record.EncodeIndexTo(sc.index, record.InfoOf(last))
		if err != nil {
			return err
		}
		sc.index = v
		sc.key = append(append(sc.key[:0], indexPrefix...), last.SessionID...)
		if err := b.Set(sc.key, v, nil); err != nil {
			return err
		}
		// The open set follows the index entry's status (package doc:
		// open set).
		sc.key = append(append(sc.key[:0], openPrefix...), last.SessionID...)
		if ps.tip.status.Terminal() {
			err = b.Delete(sc.key, nil)
		} else {
			err = b.Set(sc.key, nil, nil)
		}
		if err != nil {
			return err
		}
	}
	if b.Len() > maxBatchBytes {
		return fmt.Errorf("pebblestore: batch of %d bytes exceeds %d", b.Len(), maxBatchBytes)
	}
	return nil
}

// advance records the tips left in s.scratch by prepare, once its batch
// is committed (or queued); the caller holds wmu. A session that ended
// takes no more records: its tip is dropped.
func (s *Store) advance() {
	for i := range s.scratch.sess {
		ps := &s.scratch.sess[i]
		if ps.last.Status.Terminal() {
			delete(s.tips, ps.last.SessionID)
		} else {
			s.tips[ps.last.SessionID] = ps.tip
		}
	}
	// The batch is visible: no Info that read before it may now record
	// its sessions as absent, and none recorded before stays (absent).
	s.absent.Lock()
	s.absent.commits.Add(1)
	for i := range s.scratch.sess {
		delete(s.absent.m, s.scratch.sess[i].last.SessionID)
	}
	s.absent.Unlock()
}

// noteAbsent records that Info found no session id in a snapshot taken
// after commits was w0, unless a batch was applied since (it may have
// written the session after the snapshot): Append's tip for id then needs
// no store read (package doc: absent sessions).
func (s *Store) noteAbsent(id string, w0 uint64) {
	s.absent.Lock()
	if s.absent.commits.Load() == w0 && len(s.absent.m) < maxAbsent {
		s.absent.m[id] = struct{}{}
	}
	s.absent.Unlock()
}

// takeAbsent reports (and forgets) whether Info recorded id as absent
// with no batch applied since that wrote it; the caller holds wmu.
func (s *Store) takeAbsent(id string) bool {
	s.absent.Lock()
	_, ok := s.absent.m[id]
	if ok {
		delete(s.absent.m, id)
	}
	s.absent.Unlock()
	return ok
}

// maxAbsent bounds the absent set: entries are normally taken by the
// SessionStart that follows the Info, but a start refused after its
// Info leaves one behind.
const maxAbsent = 4096

// appendScratch is prepare's reusable working memory (guarded by wmu).
type appendScratch struct {
	pos               map[string]int // session id -> index in sess
	sess              []pendingTip   // sessions of the batch, first-seen order
	key, value, index []byte
	enc               record.Encoder
}

// pendingTip is one session's tip after the records prepared so far.
type pendingTip struct {
	tip  tip
	from tip // before the batch
	last session.Record
}

// indexed reports whether the batch writes the session's index entry: it
// starts the session, changes its status (the index entry holds the
// status of the last record), or ends it (a terminal index entry holds
// exactly the last record). A batch after the terminal record, which the
// store does not refuse, changes the status or ends the session again.
func (ps *pendingTip) indexed() bool {
	return ps.from.seq == 0 || ps.tip.status != ps.from.status || ps.tip.status.Terminal()
}

// loadTip returns a session's last seq, hash and status (0, ZeroHash and
// 0 for a new session), from the cache or the store (the index entry and
// the last record, summarize); the caller holds wmu. A quarantined or
// corrupt session is ErrCorrupt.
func (s *Store) loadTip(id string) (tip, error) {
	if t, ok := s.tips[id]; ok {
		return t, nil
	}
	if reason := s.quarantined(id); reason != "" {
		return tip{}, record.Corruptf(id, 0, "quarantined: %s", reason)
	}
	if s.takeAbsent(id) {
		return tip{}, nil // a new session: Info just looked
	}
	info, err := s.checkedIndex(s.db, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return tip{}, nil // seq 0, and the zero hash (store.ZeroHash)
	case err != nil:
		return tip{}, s.corruptedLocked(id, err)
	}
	if len(info.LastHash) != record.HashSize {
		return tip{}, s.corruptedLocked(id, record.Corruptf(id, info.LastSeq, "last hash has %d bytes", len(info.LastHash)))
	}
	t := tip{seq: info.LastSeq, status: info.Status}
	copy(t.hash[:], info.LastHash)
	return t, nil
}

// Purge implements store.Store.
func (s *Store) Purge(ctx context.Context, id string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if err := ctx.Err(); err != nil {
		return err
	}
	if !store.ValidSessionID(id) {
		return store.ErrNotFound
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	if reason := s.quarantined(id); reason != "" {
		return record.Corruptf(id, 0, "quarantined, kept as evidence: %s", reason)
	}
	info, err := s.checkedIndex(s.db, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return err
	case err != nil:
		return s.corruptedLocked(id, err)
	case !info.Status.Terminal():
		return fmt.Errorf("%w: session %s is %s", store.ErrNotTerminal, id, info.Status)
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(histStart(id), histEnd(id), nil); err != nil {
		return err
	}
	if err := b.Delete(indexKey(id), nil); err != nil {
		return err
	}
	// A terminal session has no open-set entry, unless a build without
	// the open set ended it (package doc: open set).
	if err := b.Delete(openKey(id), nil); err != nil {
		return err
	}
	if err := s.commit(b); err != nil {
		return err
	}
	delete(s.tips, id)
	return nil
}

// PutMeta implements store.Store.
func (s *Store) PutMeta(ctx context.Context, key string, val []byte) error {
	if key == "" {
		if err := s.enter(); err != nil {
			return err
		}
		s.leave()
		return fmt.Errorf("%w: empty meta key", store.ErrInvalid)
	}
	return s.writeMeta(ctx, func(b *pebble.Batch) error { return b.Set(metaKey(key), val, nil) })
}

// DeleteMeta implements store.Store.
func (s *Store) DeleteMeta(ctx context.Context, key string) error {
	return s.writeMeta(ctx, func(b *pebble.Batch) error { return b.Delete(metaKey(key), nil) })
}

func (s *Store) writeMeta(ctx context.Context, op func(*pebble.Batch) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if err := ctx.Err(); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := op(b); err != nil {
		return err
	}
	return s.commit(b)
}

// corrupted handles an error found while reading session id: corruption
// (ours or Pebble's) is marked ErrCorrupt and the session quarantined;
// other errors pass through.
func (s *Store) corrupted(id string, err error) error {
	err, ok := asCorrupt(id, err)
	if ok && !s.readOnly {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		s.markLocked(id, err)
	}
	return err
}

// corruptedLocked is corrupted for a caller holding wmu.
func (s *Store) corruptedLocked(id string, err error) error {
	err, ok := asCorrupt(id, err)
	if ok && !s.readOnly {
		s.markLocked(id, err)
	}
	return err
}

func asCorrupt(id string, err error) (error, bool) {
	switch {
	case errors.Is(err, store.ErrCorrupt):
		return err, true
	case pebble.IsCorruptionError(err):
		return record.Corruptf(id, 0, "%v", err), true
	}
	return err, false
}

// markLocked writes the quarantine mark of a session (once) and adds it
// to s.marks once committed; the caller holds wmu. A failure to write it
// fails the store like any write.
func (s *Store) markLocked(id string, cause error) {
	if s.writable() != nil {
		return
	}
	delete(s.tips, id)
	if s.quarantined(id) != "" {
		return
	}
	s.log.Error("session quarantined: its history failed verification", "session", id, "err", cause)
	reason := cause.Error()
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(quarKey(id), []byte(reason), nil); err != nil {
		return
	}
	if s.commit(b) != nil {
		return
	}
	s.marks.Lock()
	s.marks.m[id] = reason
	s.marks.Unlock()
}
