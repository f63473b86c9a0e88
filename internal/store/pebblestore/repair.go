package pebblestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"github.com/cockroachdb/pebble/v2/record"

	"github.com/macpd/macpd/internal/store"
)

// Repair (macpctl repair, README "Damaged data"): Pebble refuses to
// open a store whose write-ahead log holds a damaged record that is not
// the log's torn tail, and macpd then does not start. Repair makes such a
// store start again without ever serving wrong data:
//
//  1. It opens the store; if that works there is nothing to repair.
//  2. Otherwise, for a corruption, it reads every WAL file record by record
//     up to its first damaged chunk and moves each file that holds damage out
//     of the data directory into a sibling directory
//     <dir>.repair-<time>/ (never deleting anything). The session ids of
//     every readable record in those files are collected.
//  3. It opens the store without them and quarantines (store quarantine
//     marks, as for a session that fails verification) every session the
//     damaged files touched, and every session that is OPEN: a damaged
//     chunk may have held records of any session active when it was
//     written, and an OPEN session is the only kind whose history could
//     have continued there (a terminal session whose ending was lost looks
//     OPEN). Quarantined sessions answer INTERNAL_ERROR with the reason and
//     are never replayed or extended; every other session is intact (its
//     records are in the store's tables).
//
// A session created entirely within a damaged chunk is lost without a
// trace; the moved files keep its bytes for forensics.

// RepairReport says what Repair did.
type RepairReport struct {
	// Opened: the store opened as it was; nothing was changed.
	Opened bool
	// MovedTo is the directory the damaged WAL files were moved to.
	MovedTo string
	// Moved are the WAL files moved there.
	Moved []string
	// Quarantined are the sessions marked quarantined.
	Quarantined []string
}

// Repair repairs the store in dir (see above). The store must not be open
// elsewhere.
func Repair(dir string, log *slog.Logger) (RepairReport, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var rep RepairReport
	s, err := Open(dir, Options{Logger: log})
	if err == nil {
		rep.Opened = true
		return rep, s.Close()
	}
	if !errors.Is(err, pebble.ErrCorruption) && !errors.Is(err, store.ErrCorrupt) {
		return rep, fmt.Errorf("the store does not open, and not because of a damaged log: %w", err)
	}
	openErr := err
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return rep, err
	}
	sort.Strings(logs)
	suspects := map[string]bool{}
	var damaged []string
	for _, p := range logs {
		ids, bad, err := scanWAL(p)
		if err != nil {
			return rep, err
		}
		if bad {
			damaged = append(damaged, p)
			for id := range ids {
				suspects[id] = true
			}
		}
	}
	if len(damaged) == 0 {
		return rep, fmt.Errorf("no damaged write-ahead log found; the store's own error: %w", openErr)
	}
	rep.MovedTo = fmt.Sprintf("%s.repair-%s", filepath.Clean(dir), time.Now().UTC().Format("20060102T150405Z"))
	if err := os.MkdirAll(rep.MovedTo, 0o755); err != nil {
		return rep, err
	}
	for _, p := range damaged {
		to := filepath.Join(rep.MovedTo, filepath.Base(p))
		if err := os.Rename(p, to); err != nil {
			return rep, err
		}
		rep.Moved = append(rep.Moved, to)
		log.Warn("moved a damaged write-ahead log out of the store", "from", p, "to", to)
	}
	s, err = Open(dir, Options{Logger: log})
	if err != nil {
		return rep, fmt.Errorf("the store still does not open without the damaged log (data files damaged?): %w", err)
	}
	defer s.Close()
	if err := s.listOpen(context.Background(), func(info store.SessionInfo, err error) error {
		suspects[info.SessionID] = true
		return nil
	}); err != nil {
		return rep, err
	}
	ids := make([]string, 0, len(suspects))
	for id := range suspects {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	s.wmu.Lock()
	for _, id := range ids {
		if s.quarantined(id) != "" {
			continue
		}
		s.markLocked(id, fmt.Errorf("repair: its history may have lost records in a damaged write-ahead log (moved to %s)", rep.MovedTo))
		rep.Quarantined = append(rep.Quarantined, id)
	}
	s.wmu.Unlock()
	if err := s.fail.get(); err != nil {
		return rep, err
	}
	return rep, nil
}

// newRecordReader calls record.NewReader with the log number as its
// (internal) file number type.
func newRecordReader[T ~uint64](newReader func(io.Reader, T) *record.Reader, r io.Reader, n uint64) *record.Reader {
	return newReader(r, T(n))
}

// scanWAL reads a WAL file record by record, skipping damaged chunks, and
// returns the session ids its readable batches name and whether it holds
// damage (a torn tail counts: the file is moved either way, so nothing in
// it is half-applied).
func scanWAL(path string) (map[string]bool, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	num, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".log"), 10, 64)
	if err != nil {
		return nil, false, fmt.Errorf("%s: not a WAL file name", path)
	}
	rr := newRecordReader(record.NewReader, f, num)
	ids := map[string]bool{}
	bad := false
	for {
		r, err := rr.Next()
		if err == nil {
			var b []byte
			if b, err = io.ReadAll(r); err == nil {
				br := batchrepr.Read(b)
				for {
					_, k, _, ok, err := br.Next()
					if err != nil {
						bad = true
					}
					if !ok || err != nil {
						break
					}
					if id, _, ok := parseHistKey(k); ok {
						ids[id] = true
					} else if id, ok := keySuffix(k, indexPrefix); ok {
						ids[id] = true
					}
				}
				continue
			}
		}
		if errors.Is(err, io.EOF) {
			return ids, bad, nil
		}
		// Damage (or a torn tail): the rest of the file cannot be read
		// reliably; its sessions are covered by the OPEN rule.
		return ids, true, nil
	}
}
