package replay

import (
	"context"

	"github.com/macpd/macpd/internal/session"
)

// Reader is the part of store.Store a replay reads: Read calls fn for
// each record of session id from sequence number from on, in order, until
// fn returns an error (which Read returns). store.Store satisfies it.
type Reader interface {
	Read(ctx context.Context, id string, from uint64, fn func(session.Record) error) error
}

// Options are a fold's lookups and limits.
type Options struct {
	// Modes resolves the modes stored sessions are bound to (for the
	// runtime, retired extension modes included).
	Modes session.Modes
	// Limits are the admission limits the records are re-applied under.
	Limits session.Limits
	// Records is the history's expected length when known (0 if not): it
	// sizes the session's dedup set up front (session.Reserve) when above 1.
	Records uint64
	// Check, if set, runs once per record after the record was folded:
	// the record's checks beyond the fold itself (package verify compares
	// what each record says about the session with the replay). An error
	// it returns ends the fold and is returned as is.
	Check func(Step) error
}

// Step is one folded record, for Options.Check.
type Step struct {
	// N counts the records folded so far, this one included (1 for the
	// SessionStart record).
	N uint64
	// Record is the record just folded.
	Record session.Record
	// Before is the session's status before Record (0 for record 1).
	Before session.Status
	// Session is the session after Record. It is the fold's own: a Check
	// reads it and must not change it.
	Session *session.Session
}

// Error is a record the core refused to fold: the history diverges from
// the core's decisions or binds a mode this build lacks. Its text is the
// core's error; errors.As reaches the core's *coord.Error through Unwrap.
type Error struct {
	// N is the refused record's place in the fold (1 = the first).
	N   uint64
	Seq uint64
	Err error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Fold is one session's history being folded through the core, one record
// at a time. The zero Fold is not usable; start one with New.
type Fold struct {
	opts Options
	n    uint64
	s    *session.Session
}

// New starts a fold with opts.
func New(opts Options) *Fold { return &Fold{opts: opts} }

// Add folds the next record: the first restores the session from its
// SessionStart record (session.Restore: the bound versions, the resolved
// policy, the deadline and the profile the record carries, never a live
// registry or the clock), every later one is re-applied with its recorded
// time (session.Apply: messages, cancel, expiry, suspend, resume and the
// runtime's implicit actions alike, under the session's recorded
// profile). A record the core refuses is an *Error; then Options.Check
// runs, and its error is returned as is.
func (f *Fold) Add(rec session.Record) error {
	f.n++
	var before session.Status
	if f.s == nil {
		s, err := session.Restore(rec, f.opts.Modes)
		if err != nil {
			return &Error{N: f.n, Seq: rec.Seq, Err: err}
		}
		if f.opts.Records > 1 {
			s.Reserve(int(min(f.opts.Records, 1<<30)))
		}
		f.s = s
	} else {
		before = f.s.Status
		if err := f.s.Apply(rec, f.opts.Limits); err != nil {
			return &Error{N: f.n, Seq: rec.Seq, Err: err}
		}
	}
	if f.opts.Check != nil {
		return f.opts.Check(Step{N: f.n, Record: rec, Before: before, Session: f.s})
	}
	return nil
}

// Session is the session folded so far; nil before the first record.
func (f *Fold) Session() *session.Session { return f.s }

// Records folds recs (records 1..N of one session, in order) and returns
// the session; nil and no error when recs is empty. Options.Records, when
// 0, is taken as len(recs).
func Records(recs []session.Record, opts Options) (*session.Session, error) {
	if opts.Records == 0 {
		opts.Records = uint64(len(recs))
	}
	f := New(opts)
	for _, rec := range recs {
		if err := f.Add(rec); err != nil {
			return nil, err
		}
	}
	return f.s, nil
}

// Stored reads session id's history from st, from record 1, and folds it.
// It returns nil and no error when st has no record of it but Read does
// not fail; Read's own errors (store.ErrNotFound among them) are returned
// as they are.
func Stored(ctx context.Context, st Reader, id string, opts Options) (*session.Session, error) {
	f := New(opts)
	if err := st.Read(ctx, id, 1, f.Add); err != nil {
		return nil, err
	}
	return f.s, nil
}
