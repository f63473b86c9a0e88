package pebblestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/record"
)

// get returns a copy of the value of key, or (nil, false) when absent.
func get(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer closer.Close()
	return bytes.Clone(v), true, nil
}

// probe is get for keys that are usually absent (the index entry and
// first record of a session that a SessionStart is about to create): a
// prefix seek with Pebble's bloom filters consulted in every level.
// Pebble's Get skips the last level's filters (they are large, and a Get
// usually finds its key), so a miss there searched the level's index and
// read a data block; for a miss the filter answers alone.
func probe(r pebble.Reader, key []byte) ([]byte, bool, error) {
	it, err := r.NewIter(&pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		return nil, false, err
	}
	defer it.Close()
	if it.SeekPrefixGE(key) && bytes.Equal(it.Key(), key) {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, false, err
		}
		return bytes.Clone(v), true, nil
	}
	return nil, false, it.Error()
}

// testHookInfoAbsent, when set (tests), runs in Info between finding a
// session absent and recording it (noteAbsent).
var testHookInfoAbsent func(id string)

// quarantined returns a session's quarantine reason ("" if none), from
// the in-memory copy of the marks (Store.marks).
func (s *Store) quarantined(id string) string {
	s.marks.RLock()
	defer s.marks.RUnlock()
	return s.marks.m[id]
}

// checkedIndex returns a session's index entry, checked against its last
// record: ErrNotFound when the session has neither, a corruption error
// (with what could be read) otherwise.
func (s *Store) checkedIndex(r pebble.Reader, id string) (store.SessionInfo, error) {
	raw, ok, err := probe(r, indexKey(id))
	if err != nil {
		return store.SessionInfo{SessionID: id}, err
	}
	if !ok {
		// No index entry: usually a session that does not exist (every
		// SessionStart checks). Two point lookups, which Pebble's bloom
		// filters answer without reading the tables, instead of an
		// iterator, which seeks in every level: a session has an index
		// entry from its first batch on, so records without one are
		// damage, and such damage keeps the first record (package doc:
		// index entry). Only if record 1 is there too is the history
		// summarized, and reported corrupt.
		if _, has, err := probe(r, histKey(id, 1)); err != nil || !has {
			if err == nil {
				err = store.ErrNotFound
			}
			return store.SessionInfo{SessionID: id}, err
		}
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: histStart(id), UpperBound: histEnd(id)})
	if err != nil {
		return store.SessionInfo{SessionID: id}, err
	}
	defer it.Close()
	return summarize(it, id, raw, ok)
}

// summarize builds a session's summary from its raw index entry (hasIndex
// false: none) and an iterator over the h/ space that includes the
// session's records. The index entry is checked against the records
// (package doc: index entry): a terminal one, or one naming the last
// record, must match the last record exactly; an OPEN one may lag the
// history, and then the record it names must match it and the last
// record, which gives the summary, must be later and have the same
// status.
func summarize(it *pebble.Iterator, id string, raw []byte, hasIndex bool) (store.SessionInfo, error) {
	info := store.SessionInfo{SessionID: id}
	var last *session.Record
	if it.SeekLT(histEnd(id)) && bytes.HasPrefix(it.Key(), histStart(id)) {
		rec, err := decodeAt(it, id)
		if err != nil {
			return info, err
		}
		last = &rec
	}
	if err := it.Error(); err != nil {
		return info, err
	}
	switch {
	case !hasIndex && last == nil:
		return info, store.ErrNotFound
	case !hasIndex:
		return record.InfoOf(*last), record.Corruptf(id, 0, "records without an index entry")
	}
	idx, err := record.DecodeIndex(raw, id)
	if err != nil {
		return info, err
	}
	if last == nil {
		return idx, record.Corruptf(id, 0, "index entry without records")
	}
	if idx.Status.Terminal() || last.Seq <= idx.LastSeq {
		if err := record.CheckIndex(idx, *last); err != nil {
			return idx, err
		}
		return idx, nil
	}
	// An index entry that lags the history: written with the session's
	// first batch, or its last change of status.
	if last.Status != idx.Status {
		return idx, record.Corruptf(id, last.Seq, "the last record is %s, the index entry (at record %d) says %s", last.Status, idx.LastSeq, idx.Status)
	}
	named := histKey(id, idx.LastSeq)
	if !it.SeekGE(named) || !bytes.Equal(it.Key(), named) {
		if err := it.Error(); err != nil {
			return idx, err
		}
		return idx, record.Corruptf(id, idx.LastSeq, "missing record: the index entry names it")
	}
	at, err := decodeAt(it, id)
	if err != nil {
		return idx, err
	}
	if err := record.CheckIndex(idx, at); err != nil {
		return idx, err
	}
	return record.InfoOf(*last), nil
}

// decodeAt decodes the record at it (positioned on a key of session id's
// h/ range).
func decodeAt(it *pebble.Iterator, id string) (session.Record, error) {
	_, seq, ok := parseHistKey(it.Key())
	if !ok {
		return session.Record{}, record.Corruptf(id, 0, "malformed record key %q", it.Key())
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return session.Record{}, err
	}
	return record.Decode(v, id, seq)
}

// Read implements store.Store.
func (s *Store) Read(ctx context.Context, id string, from uint64, fn func(session.Record) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if !store.ValidSessionID(id) {
		return store.ErrNotFound
	}
	err, found := s.read(ctx, id, max(from, 1), fn)
	if found != nil {
		return s.corrupted(id, found)
	}
	return err
}

// read does Read's work on a snapshot. found is a failure of the stored
// data (corruption or an I/O error reading it); err anything else,
// including fn's errors, returned as they are.
func (s *Store) read(ctx context.Context, id string, from uint64, fn func(session.Record) error) (err, found error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	it, ierr := snap.NewIter(&pebble.IterOptions{LowerBound: histStart(id), UpperBound: histEnd(id)})
	if ierr != nil {
		return ierr, nil
	}
	defer it.Close()
	raw, hasIndex, gerr := get(snap, indexKey(id))
	if gerr != nil {
		return nil, gerr
	}
	idx, serr := summarize(it, id, raw, hasIndex)
	if errors.Is(serr, store.ErrNotFound) {
		return store.ErrNotFound, nil
	}
	if serr != nil {
		return nil, serr
	}
	if from > idx.LastSeq+1 {
		return nil, nil
	}
	chain := record.NewChain(id)
	var last session.Record
	start := from
	if from > 1 {
		start = from - 1 // the predecessor anchors the chain check
	}
	n := 0
	for ok := it.SeekGE(histKey(id, start)); ok; ok = it.Next() {
		_, seq, kok := parseHistKey(it.Key())
		if !kok {
			return nil, record.Corruptf(id, 0, "malformed record key %q", it.Key())
		}
		v, verr := it.ValueAndErr()
		if verr != nil {
			return nil, verr
		}
		rec, derr := record.Decode(v, id, seq)
		if derr != nil {
			return nil, derr
		}
		if seq == start && start < from {
			chain.Seq, chain.Hash = rec.Seq, rec.Hash
			last = rec
			continue
		}
		if cerr := chain.Next(rec); cerr != nil {
			if seq == from && from > 1 {
				return nil, record.Corruptf(id, from-1, "missing record")
			}
			return nil, cerr
		}
		last = rec
		if n++; n%256 == 0 {
			if cerr := ctx.Err(); cerr != nil {
				return cerr, nil
			}
		}
		if ferr := fn(rec); ferr != nil {
			return ferr, nil
		}
	}
	if ierr := it.Error(); ierr != nil {
		return nil, ierr
	}
	if chain.Seq != idx.LastSeq {
		return nil, record.Corruptf(id, chain.Seq+1, "missing record: the history ends at %d, the index at %d", chain.Seq, idx.LastSeq)
	}
	if cerr := record.CheckIndex(idx, last); cerr != nil {
		return nil, cerr
	}
	return nil, nil
}

// LastSeq implements store.Store.
func (s *Store) LastSeq(ctx context.Context, id string) (uint64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave()
	if !store.ValidSessionID(id) {
		return 0, store.ErrNotFound
	}
	raw, ok, err := get(s.db, indexKey(id))
	switch {
	case err != nil:
		return 0, s.corrupted(id, err)
	case !ok:
		return 0, store.ErrNotFound
	}
	info, err := record.DecodeIndex(raw, id)
	if err != nil {
		return 0, s.corrupted(id, err)
	}
	if info.Status.Terminal() {
		return info.LastSeq, nil
	}
	// An OPEN session's index entry may lag its history: the last record
	// has the last seq, read with the index entry from one snapshot.
	snap := s.db.NewSnapshot()
	info, err = s.checkedIndex(snap, id)
	snap.Close()
	switch {
	case errors.Is(err, store.ErrNotFound): // purged since
		return 0, err
	case err != nil:
		return 0, s.corrupted(id, err)
	}
	return info.LastSeq, nil
}

// Info implements store.Store.
func (s *Store) Info(ctx context.Context, id string) (store.SessionInfo, error) {
	if err := s.enter(); err != nil {
		return store.SessionInfo{}, err
	}
	defer s.leave()
	if !store.ValidSessionID(id) {
		return store.SessionInfo{}, store.ErrNotFound
	}
	reason := s.quarantined(id)
	// The index entry and the last record are read from one snapshot, as
	// they are checked against each other.
	w0 := s.absent.commits.Load() // before the snapshot (noteAbsent)
	snap := s.db.NewSnapshot()
	info, err := s.checkedIndex(snap, id)
	snap.Close()
	switch {
	case errors.Is(err, store.ErrNotFound) && reason == "":
		if testHookInfoAbsent != nil {
			testHookInfoAbsent(id)
		}
		if !s.readOnly {
			s.noteAbsent(id, w0)
		}
		return store.SessionInfo{}, err
	case errors.Is(err, store.ErrNotFound):
		// Purged, or never stored, but marked: say so.
		return store.SessionInfo{SessionID: id, Quarantined: reason}, nil
	case err != nil:
		cerr, ok := asCorrupt(id, err)
		if !ok {
			return store.SessionInfo{}, err
		}
		_ = s.corrupted(id, cerr)
		if reason == "" {
			reason = cerr.Error()
		}
	}
	info.Quarantined = reason
	return info, nil
}

// List implements store.Store: a merge of the index entries and the
// sessions found among the records, so that a session missing from
// either side is listed (quarantined), not lost.
func (s *Store) List(ctx context.Context, fn func(store.SessionInfo) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	return s.marking(func(visit func(store.SessionInfo, error) error) error {
		return s.list(ctx, visit)
	}, fn)
}

// ListOpen implements store.Store: the sessions of the open set (o/) and
// the quarantined ones, in id order, each summarized as List does (package
// doc: open set). A read-only store written before the open set existed
// has none: its every session is read, as List does, and filtered.
func (s *Store) ListOpen(ctx context.Context, fn func(store.SessionInfo) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	filtered := func(info store.SessionInfo) error {
		if info.Status.Terminal() && info.Quarantined == "" {
			return nil
		}
		return fn(info)
	}
	return s.marking(func(visit func(store.SessionInfo, error) error) error {
		if !s.openSet {
			return s.list(ctx, visit)
		}
		return s.listOpen(ctx, visit)
	}, filtered)
}

// marking runs a listing, passing each summary to fn, and marks the
// sessions it found corrupt afterwards (not while the listing's snapshot
// and iterators are open).
func (s *Store) marking(listing func(func(store.SessionInfo, error) error) error, fn func(store.SessionInfo) error) error {
	var found []error
	var ids []string
	err := listing(func(info store.SessionInfo, corrupt error) error {
		if corrupt != nil {
			ids, found = append(ids, info.SessionID), append(found, corrupt)
		}
		return fn(info)
	})
	for i, id := range ids {
		_ = s.corrupted(id, found[i])
	}
	return err
}

// readMarks returns the quarantine marks r holds (the store's Pebble or a
// snapshot of it).
func readMarks(r pebble.Reader) (map[string]string, error) {
	marks := make(map[string]string)
	qit, err := r.NewIter(prefixBounds(quarPrefix))
	if err != nil {
		return nil, err
	}
	for ok := qit.First(); ok; ok = qit.Next() {
		v, err := qit.ValueAndErr()
		if err != nil {
			qit.Close()
			return nil, err
		}
		marks[suffix(qit.Key(), quarPrefix)] = string(v)
	}
	if err := errors.Join(qit.Error(), qit.Close()); err != nil {
		return nil, err
	}
	return marks, nil
}

// listed summarizes one listed session (summarize over look, an iterator
// on the h/ space): a corrupt one comes back with Quarantined set and the
// corruption as corrupt, a marked one with its mark's reason. Other
// errors (not the data's) are err.
func listed(look *pebble.Iterator, id string, raw []byte, hasIndex bool, mark string) (info store.SessionInfo, corrupt, err error) {
	info, err = summarize(look, id, raw, hasIndex)
	if err != nil {
		c, ok := asCorrupt(id, err)
		if !ok {
			return info, nil, err
		}
		corrupt = c
		info.SessionID = id
		info.Quarantined = c.Error()
	}
	if mark != "" {
		info.Quarantined = mark
	}
	return info, corrupt, nil
}

func (s *Store) list(ctx context.Context, fn func(store.SessionInfo, error) error) error {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	marks, err := readMarks(snap)
	if err != nil {
		return err
	}
	histBounds := prefixBounds(histPrefix)
	iit, err := snap.NewIter(prefixBounds(indexPrefix))
	if err != nil {
		return err
	}
	defer iit.Close()
	scan, err := snap.NewIter(histBounds) // walks the sessions of the h/ space
	if err != nil {
		return err
	}
	defer scan.Close()
	look, err := snap.NewIter(histBounds) // finds last records
	if err != nil {
		return err
	}
	defer look.Close()

	iok, hok := iit.First(), scan.First()
	var hid string
	if hok {
		hid, _, _ = parseHistKey(scan.Key())
	}
	for n := 0; iok || hok; n++ {
		if n%256 == 255 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		var iid string
		if iok {
			iid = suffix(iit.Key(), indexPrefix)
		}
		id := iid
		if !iok || (hok && hid < iid) {
			id = hid
		}
		var raw []byte
		hasIndex := iok && iid == id
		if hasIndex {
			v, err := iit.ValueAndErr()
			if err != nil {
				return err
			}
			raw = bytes.Clone(v)
			iok = iit.Next()
		}
		if hok && hid == id {
			hok = scan.SeekGE(histEnd(id))
			if hok {
				hid, _, _ = parseHistKey(scan.Key())
			}
		}
		info, corrupt, err := listed(look, id, raw, hasIndex, marks[id])
		if err != nil {
			return err
		}
		if err := fn(info, corrupt); err != nil {
			return err
		}
	}
	return errors.Join(iit.Error(), scan.Error())
}

// listOpen is list over the open set and the quarantine marks only: in id
// order, each session of either once, summarized as list does. An
// open-set entry of a session that has neither index entry nor records
// (purged by a build without the open set) is skipped, as list would not
// see the session; a terminal one is passed on (ListOpen leaves it out).
func (s *Store) listOpen(ctx context.Context, fn func(store.SessionInfo, error) error) error {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	marks, err := readMarks(snap)
	if err != nil {
		return err
	}
	marked := make([]string, 0, len(marks))
	for id := range marks {
		marked = append(marked, id)
	}
	slices.Sort(marked)
	oit, err := snap.NewIter(prefixBounds(openPrefix))
	if err != nil {
		return err
	}
	defer oit.Close()
	look, err := snap.NewIter(prefixBounds(histPrefix))
	if err != nil {
		return err
	}
	defer look.Close()

	ook := oit.First()
	for n := 0; ook || len(marked) > 0; n++ {
		if n%256 == 255 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		var id string
		switch {
		case !ook:
			id, marked = marked[0], marked[1:]
		default:
			id = suffix(oit.Key(), openPrefix)
			if len(marked) > 0 && marked[0] <= id {
				if marked[0] == id {
					ook = oit.Next()
				}
				id, marked = marked[0], marked[1:]
			} else {
				ook = oit.Next()
			}
		}
		raw, hasIndex, err := get(snap, indexKey(id))
		var info store.SessionInfo
		var corrupt error
		if err != nil {
			c, ok := asCorrupt(id, err)
			if !ok {
				return err
			}
			info, corrupt = store.SessionInfo{SessionID: id, Quarantined: c.Error()}, c
			if mark := marks[id]; mark != "" {
				info.Quarantined = mark
			}
		} else {
			info, corrupt, err = listed(look, id, raw, hasIndex, marks[id])
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
		}
		if err := fn(info, corrupt); err != nil {
			return err
		}
	}
	return oit.Error()
}

// ListMeta implements store.Store.
func (s *Store) ListMeta(ctx context.Context, prefix string, fn func(string, []byte) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	lower := metaKey(prefix)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := fn(suffix(it.Key(), metaPrefix), v); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("pebblestore: listing meta: %w", err)
	}
	return nil
}
