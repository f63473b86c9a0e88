package pebblestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/record"
)

// Options configure Open. The zero value is the production configuration.
type Options struct {
	// FS is the filesystem (default: the OS's). Tests pass vfs.NewMem(),
	// vfs.NewCrashableMem() or an errorfs wrapper.
	FS vfs.FS
	// Logger receives Pebble's messages (Info at Debug level) and the
	// store's own errors (default: discarded).
	Logger *slog.Logger
	// ReadOnly opens an existing store for reading (macpctl verify):
	// writes return an error and corruption found is reported but not
	// marked in the store.
	ReadOnly bool
	// CacheSize is the block cache for table blocks (default 64 MiB).
	// Pebble reserves its memtables' memory from the same cache, so the
	// cache is created larger by their worst case (cacheCapacity).
	CacheSize int64
	// MemTableSize is Pebble's memtable size (default 32 MiB).
	MemTableSize uint64

	// tune, set by tests only (export_test.go), edits Pebble's options
	// last, for benchmarks of other settings.
	tune func(*pebble.Options)
	// indexEveryBatch, set by tests only (export_test.go), writes every
	// session's index entry with every batch, as stores did before the
	// index entry was written only on changes of status.
	indexEveryBatch bool
}

// Defaults (package doc: tuning).
const (
	defaultCacheSize    = 64 << 20
	defaultMemTableSize = 32 << 20
	// L0 compaction starts at 8 sublevels instead of Pebble's 4, and
	// writes stop at 24 instead of 12 (BenchmarkHotPath: less compaction
	// CPU per record, as random session ids make every flushed table span
	// the whole key space, so each L0 compaction rewrites much of Lbase).
	l0CompactionThreshold = 8
	l0StopWritesThreshold = 24
	// maxBatchBytes caps one Append's encoded size well below Pebble's
	// 4 GiB batch limit (exceeding that is a plain error, not a failure).
	maxBatchBytes = 1 << 30
	// memTableStopWrites is Pebble's default (2): writes stall while
	// that many memtables are queued for flushing.
	memTableStopWrites = 2
)

// cacheCapacity is the Pebble cache to create for blocks bytes of table
// blocks: Pebble reserves every memtable's size from the cache (the
// mutable one, those queued for flushing, and one kept for reuse), so a
// cache of blocks bytes with 32 MiB memtables held no block at all once
// two or three memtables were allocated (block cache hits 7k, misses
// 111k, bytes in use 0 after 15 s at 64 sessions): every point lookup
// read and decoded its tables' index and filter blocks with a pread.
func cacheCapacity(blocks int64, memTableSize uint64) int64 {
	return blocks + int64(memTableStopWrites+1)*int64(memTableSize)
}

// Store is the Pebble-backed store.Store.
type Store struct {
	dir      string
	db       *pebble.DB
	log      *slog.Logger
	readOnly bool
	// indexEveryBatch: Options.indexEveryBatch (tests).
	indexEveryBatch bool
	fail            *failState
	wedged          atomic.Bool // a Pebble commit panicked (guard): Pebble must not be closed
	events          *events     // counted by the EventListener (metrics.go)
	// openSet: the store keeps the open set (o/), so ListOpen reads it;
	// false only for a read-only store written before the open set
	// existed, where ListOpen reads every session (package doc: open
	// set). Set by Open.
	openSet bool
	// formatV1: the format marker still says macpd.store.v1 (a read-only
	// open of a store written before the open set; Open upgrades a
	// writable one).
	formatV1 bool

	// life tracks calls in progress so that Close waits for them (Pebble
	// panics on use after Close).
	life struct {
		sync.Mutex
		closed bool
		ops    sync.WaitGroup
	}

	// wmu serializes every write (Append, Purge, meta, quarantine marks)
	// and guards tips.
	wmu sync.Mutex
	// tips caches the last seq and hash of sessions appended to since
	// Open, except terminal ones (they take no more records); others are
	// loaded on demand from the index entry and the last record.
	tips map[string]tip
	// scratch is Append's reusable working memory (guarded by wmu).
	scratch appendScratch

	// absent holds sessions Info found absent, for the tip of the
	// SessionStart append that usually follows (package doc: absent
	// sessions); commits counts the batches applied. Both change under
	// its lock together.
	absent struct {
		sync.Mutex
		m       map[string]struct{}
		commits atomic.Uint64
	}

	// marks mirrors the quarantine marks (q/<id> -> reason): loaded at
	// Open, added to by markLocked once its mark is committed (marks are
	// never deleted), so that Append, Info and Purge need no Pebble read
	// to check for one. Written under wmu and mu; read under mu.
	marks struct {
		sync.RWMutex
		m map[string]string
	}
}

// tip is a session's last record: its seq, hash and status (the status
// its index entry holds, package doc: index entry).
type tip struct {
	seq    uint64
	hash   [record.HashSize]byte
	status session.Status
}

var _ store.Store = (*Store)(nil)

// failState holds the first fatal failure (package doc: fail closed).
type failState struct {
	err atomic.Pointer[error]
}

func (f *failState) set(cause error) {
	err := fmt.Errorf("%w: %v", store.ErrFailed, cause)
	f.err.CompareAndSwap(nil, &err)
}

func (f *failState) get() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

// pebbleLogger routes Pebble's logging to slog. Fatalf does not exit: it
// marks the store failed (package doc).
type pebbleLogger struct {
	log  *slog.Logger
	fail *failState
}

func (l pebbleLogger) Infof(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug(fmt.Sprintf(format, args...), "component", "pebble")
	}
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.fail.set(errors.New(msg))
	l.log.Error("store failed; restart required", "component", "pebble", "err", msg)
}

// Open opens (creating if needed, unless read-only) the store in dir.
func Open(dir string, o Options) (*Store, error) {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CacheSize <= 0 {
		o.CacheSize = defaultCacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = defaultMemTableSize
	}
	fail := &failState{}
	ev := &events{}
	log := o.Logger
	po := &pebble.Options{
		FS:                          o.FS,
		Logger:                      pebbleLogger{log: log, fail: fail},
		ReadOnly:                    o.ReadOnly,
		CacheSize:                   cacheCapacity(o.CacheSize, o.MemTableSize),
		MemTableSize:                o.MemTableSize,
		MemTableStopWritesThreshold: memTableStopWrites,
		FlushDelayDeleteRange:       10 * time.Second,
		L0CompactionThreshold:       l0CompactionThreshold,
		L0StopWritesThreshold:       l0StopWritesThreshold,
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) {
				log.Error("pebble background error", "component", "pebble", "err", err)
			},
			// Fatal by default; here the read that found it reports
			// ErrCorrupt for its session.
			DataCorruption: func(info pebble.DataCorruptionInfo) {
				log.Error("pebble found corrupt data", "component", "pebble", "path", info.Path, "err", info.Details)
			},
			WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
				ev.writeStalls.Add(1)
				log.Warn("pebble write stall", "component", "pebble", "reason", info.Reason)
			},
			WriteStallEnd: func() { log.Info("pebble write stall ended", "component", "pebble") },
			DiskSlow: func(info pebble.DiskSlowInfo) {
				ev.diskSlow.Add(1)
				log.Warn("slow disk operation", "component", "pebble", "path", info.Path, "op", info.OpType.String(), "duration", info.Duration)
			},
		},
	}
	if !o.ReadOnly {
		po.FormatMajorVersion = pebble.FormatNewest
	}
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		po.Levels[i].FilterType = pebble.TableFilter
	}
	if o.tune != nil {
		o.tune(po)
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		if lerr := lockedError(dir, err, o.FS == vfs.Default); lerr != nil {
			return nil, lerr
		}
		if pebble.IsCorruptionError(err) {
			return nil, fmt.Errorf("pebblestore: open %s: %w: %w", dir, store.ErrCorrupt, err)
		}
		return nil, fmt.Errorf("pebblestore: open %s: %w", dir, err)
	}
	s := &Store{dir: dir, db: db, log: log, readOnly: o.ReadOnly, indexEveryBatch: o.indexEveryBatch, fail: fail, events: ev, tips: make(map[string]tip), scratch: appendScratch{pos: make(map[string]int)}}
	s.absent.m = make(map[string]struct{})
	if err := s.checkFormat(); err != nil {
		_ = s.closeDB()
		return nil, err
	}
	if err := s.loadMarks(); err != nil {
		_ = s.closeDB()
		return nil, err
	}
	if err := s.loadOpenSet(); err != nil {
		_ = s.closeDB()
		return nil, err
	}
	return s, nil
}

// loadOpenSet sets s.openSet from the marker, building the open set first
// in a writable store written before it existed (package doc: open set):
// one batch adds every session whose index entry is not terminal (or does
// not decode: ListOpen then finds the damage) and the marker, with one
// sync.
func (s *Store) loadOpenSet() error {
	_, ok, err := get(s.db, []byte(openSetKey))
	switch {
	case err != nil:
		return fmt.Errorf("pebblestore: reading the open-set marker: %w", err)
	case ok && (s.readOnly || !s.formatV1):
		s.openSet = true
		return nil
	case ok:
		// The set was built by a build that kept the v1 format marker:
		// ratchet the format.
		b := s.db.NewBatch()
		defer b.Close()
		if err := b.Set([]byte(formatKey), []byte(formatValue), nil); err != nil {
			return err
		}
		if err := s.commit(b); err != nil {
			return fmt.Errorf("pebblestore: writing the format marker: %w", err)
		}
		s.openSet, s.formatV1 = true, false
		return nil
	case s.readOnly:
		return nil // ListOpen reads every session
	}
	start := time.Now()
	b := s.db.NewBatch()
	defer b.Close()
	it, err := s.db.NewIter(prefixBounds(indexPrefix))
	if err != nil {
		return err
	}
	var sessions, open int
	var verr error
	for ok := it.First(); ok; ok = it.Next() {
		sessions++
		id := suffix(it.Key(), indexPrefix)
		v, err := it.ValueAndErr()
		if err != nil {
			verr = err
			break
		}
		if info, err := record.DecodeIndex(v, id); err != nil || !info.Status.Terminal() {
			open++
			if err := b.Set(openKey(id), nil, nil); err != nil {
				_ = it.Close()
				return err
			}
		}
	}
	if err := errors.Join(verr, it.Error(), it.Close()); err != nil {
		// Unreadable index entries: without the marker, ListOpen reads
		// every session (and reports the damage it finds), and the next
		// writable Open tries again.
		s.log.Error("pebblestore: could not build the open-session set; listing open sessions reads every session", "err", err)
		return s.fail.get()
	}
	if err := errors.Join(b.Set([]byte(openSetKey), []byte(openSetValue), nil), b.Set([]byte(formatKey), []byte(formatValue), nil)); err != nil {
		return err
	}
	if err := s.commit(b); err != nil {
		return fmt.Errorf("pebblestore: writing the open-session set: %w", err)
	}
	s.openSet, s.formatV1 = true, false
	s.log.Info("pebblestore: built the open-session set (once, for a store written before it)",
		"sessions", sessions, "open", open, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// loadMarks reads every quarantine mark into s.marks (Open).
func (s *Store) loadMarks() error {
	marks, err := readMarks(s.db)
	if err != nil {
		return fmt.Errorf("pebblestore: reading the quarantine marks: %w", err)
	}
	s.marks.m = marks
	return s.fail.get()
}

// checkFormat writes the format marker into a new store and refuses a
// store of another format.
func (s *Store) checkFormat() error {
	if err := s.fail.get(); err != nil {
		return err
	}
	v, closer, err := s.db.Get([]byte(formatKey))
	switch {
	case err == nil:
		defer closer.Close()
		switch string(v) {
		case formatValue:
		case formatV1:
			s.formatV1 = true // loadOpenSet upgrades it
		default:
			return fmt.Errorf("pebblestore: %s holds format %q, this build reads %q and %q", s.dir, v, formatValue, formatV1)
		}
		return nil
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("pebblestore: reading the format marker: %w", err)
	}
	// No marker: a new store, or not ours.
	it, err := s.db.NewIter(nil)
	if err != nil {
		return err
	}
	empty := !it.First()
	if err := it.Close(); err != nil {
		return err
	}
	if !empty {
		return fmt.Errorf("pebblestore: %s holds a Pebble store without the %q format marker", s.dir, formatValue)
	}
	if s.readOnly {
		return nil
	}
	// A new store keeps the open set from the start.
	b := s.db.NewBatch()
	defer b.Close()
	if err := errors.Join(b.Set([]byte(formatKey), []byte(formatValue), nil), b.Set([]byte(openSetKey), []byte(openSetValue), nil)); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("pebblestore: writing the format marker: %w", err)
	}
	return s.fail.get()
}

// Dir returns the directory the store was opened in.
func (s *Store) Dir() string { return s.dir }

// enter admits a call: ErrClosed after Close, ErrFailed after a failure.
// A nil result must be paired with leave.
func (s *Store) enter() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.life.closed {
		return store.ErrClosed
	}
	if err := s.fail.get(); err != nil {
		return err
	}
	s.life.ops.Add(1)
	return nil
}

func (s *Store) leave() { s.life.ops.Done() }

// writable admits a write; the caller holds wmu.
func (s *Store) writable() error {
	if s.readOnly {
		return errors.New("pebblestore: opened read-only")
	}
	return s.fail.get()
}

// commit writes b with one WAL sync. Any error, or a Fatalf from Pebble
// during the commit, fails the store (package doc: fail closed).
func (s *Store) commit(b *pebble.Batch) error {
	err := s.guard(func() error { return b.Commit(pebble.Sync) })
	if err != nil {
		s.fail.set(err)
		s.log.Error("store write failed; restart required", "err", err)
	}
	return s.fail.get()
}

// guard runs one Pebble commit. Pebble panics when its WAL writer has
// already failed: a write error in the background flush of an earlier
// batch (ENOSPC on a full disk) is handed to the next batch's WAL write,
// and Pebble answers that with a panic, holding its commit pipeline's lock.
// The panic becomes the store's failure (fail closed: every later call
// returns ErrFailed, nothing more is acknowledged), and Close then leaves
// Pebble as it is: its Close would wait for that lock forever. The
// process must restart to use the directory again, which recovers what
// was synced.
func (s *Store) guard(apply func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pebblestore: the write-ahead log failed: %v", r)
			s.wedged.Store(true)
			s.fail.set(err)
		}
	}()
	return apply()
}

// Close waits for calls in progress and closes Pebble. Later calls return
// ErrClosed.
func (s *Store) Close() error {
	s.life.Lock()
	if s.life.closed {
		s.life.Unlock()
		return store.ErrClosed
	}
	s.life.closed = true
	s.life.Unlock()
	s.life.ops.Wait()
	return s.closeDB()
}

// closeDB closes Pebble. After a fatal error Pebble's state is its own;
// closing must not take the process down, so a panic becomes an error.
func (s *Store) closeDB() (err error) {
	if s.wedged.Load() {
		return fmt.Errorf("pebblestore: Pebble was left locked by a failed write-ahead log write and is not closed: %w", s.fail.get())
	}
	if s.fail.get() != nil {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("pebblestore: closing a failed store: %v", r)
			}
		}()
	}
	return s.db.Close()
}
