package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/replay/verify"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// history reads a session's stored records (nil if unknown).
func (w *world) history(id string) []session.Record {
	var out []session.Record
	err := w.st.Read(w.ctx, id, 1, func(r session.Record) error { out = append(out, r); return nil })
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		w.fail("read %s: %v", id, err)
	}
	return out
}

func msgIDs(hist []session.Record) map[string]bool {
	m := make(map[string]bool)
	for _, r := range hist {
		if r.Envelope != nil {
			m[r.Envelope.MessageId] = true
		}
	}
	return m
}

var kindLetter = map[session.Kind]string{
	session.KindStart: "S", session.KindMessage: "M", session.KindCancel: "C",
	session.KindExpire: "X", session.KindSuspend: "P", session.KindResume: "R",
}

// kinds renders a history as its record kinds (S start, M message,
// C cancel, X expire, P suspend, R resume): deterministic, unlike the
// runtime-generated message ids of control records.
func kinds(hist []session.Record) string {
	var b strings.Builder
	for _, r := range hist {
		b.WriteString(kindLetter[r.Kind])
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// recKey identifies a record for comparing what a follower got with the
// store.
func recKey(r session.Record) string {
	id := ""
	if r.Envelope != nil {
		id = r.Envelope.MessageId
	}
	return fmt.Sprintf("%d/%d/%s/%d/%d", r.Seq, r.Kind, id, r.AcceptedAtMs, r.Status)
}

// checkHistory checks one session's stored history on its own: Seq 1..N,
// a start first, at most one terminal transition and nothing after it, at
// most one Expire record, no message id twice, every acknowledged envelope
// present.
func (w *world) checkHistory(s *simSession, hist []session.Record) {
	seen := make(map[string]bool)
	terminalAt := 0
	expires := 0
	for i, r := range hist {
		if r.Seq != uint64(i+1) {
			w.fail("%s: record %d has seq %d", s.id, i+1, r.Seq)
		}
		if (i == 0) != (r.Kind == session.KindStart) {
			w.fail("%s: record %d is kind %d", s.id, r.Seq, r.Kind)
		}
		if terminalAt > 0 {
			w.fail("%s: record %d (%s) follows the terminal record %d: %s", s.id, r.Seq, kindLetter[r.Kind], terminalAt, kinds(hist))
		}
		if r.Status.Terminal() {
			terminalAt = int(r.Seq)
		}
		if r.Kind == session.KindExpire {
			expires++
		}
		if r.Envelope != nil {
			if seen[r.Envelope.MessageId] {
				w.fail("%s: message %s stored twice", s.id, r.Envelope.MessageId)
			}
			seen[r.Envelope.MessageId] = true
		}
	}
	if expires > 1 {
		w.fail("%s: %d expire records: %s", s.id, expires, kinds(hist))
	}
	for id := range s.acked {
		if !seen[id] {
			w.fail("%s: acknowledged envelope %s not in history %s", s.id, id, kinds(hist))
		}
	}
}

// settle waits until the step's effects are quiescent and checks the
// continuous invariants: every due deadline (TTL or suspension cap) has
// fired, every follower has caught up with the store and got exactly its
// history, every session's history is well formed and holds every
// acknowledged envelope.
func (w *world) settle() {
	if hits := w.inj.disarm(); hits > 0 {
		w.logf("  disk fault hit %d WAL ops", hits)
	}
	now := w.clk.NowMs()
	for _, s := range w.sessions {
		if !s.started || s.terminal {
			continue
		}
		if s.expiry > 0 && s.expiry <= now {
			var st session.Status
			if !wait(func() bool { st, _, _ = w.inspect(s); return st.Terminal() }) {
				w.fail("%s: deadline %d passed (now %d) but the session is still %s: the timer did not fire", s.id, s.expiry-epoch.UnixMilli(), now-epoch.UnixMilli(), st)
			}
		}
	}
	for _, s := range w.sessions {
		if !s.started {
			continue
		}
		hist := w.history(s.id)
		if len(hist) == 0 {
			w.fail("%s: started but no history", s.id)
		}
		w.checkHistory(s, hist)
		if s.terminal {
			continue
		}
		st, exp, _ := w.inspect(s)
		if !st.Terminal() && exp > 0 && exp <= now {
			// Started this step already past its deadline (a SessionStart
			// resent with its old timestamp): the timer fires now; wait
			// for it as for the others.
			if !wait(func() bool { st, exp, _ = w.inspect(s); return st.Terminal() }) {
				w.fail("%s: deadline %d passed (now %d) but the session is still %s: the timer did not fire", s.id, exp-epoch.UnixMilli(), now-epoch.UnixMilli(), st)
			}
		}
		if st.Terminal() && !hist[len(hist)-1].Status.Terminal() {
			// It ended between the two reads (a session started this step
			// already past its deadline): read the history again.
			hist = w.history(s.id)
			w.checkHistory(s, hist)
		}
		if st.Terminal() {
			last := hist[len(hist)-1]
			due := s.expiry
			if !s.inspected && hist[0].Start != nil {
				due = hist[0].Start.DeadlineMs // started in this step: the deadline it started with
			}
			if last.Kind == session.KindExpire && (due == 0 || last.AcceptedAtMs < due) {
				w.fail("%s: expired at %d, before its deadline %d", s.id, last.AcceptedAtMs, due)
			}
			w.logf("  %s ended %s: %s", s.id, st, kinds(hist))
			s.terminal = true
		}
		s.status, s.expiry, s.inspected = st, exp, true
	}
	for _, f := range w.followers {
		w.catchUp(f)
	}
	w.settleAttachments()
	w.settleFeeds()
}

// inspect reads a session's durable state: status, next expiry (0: none).
func (w *world) inspect(s *simSession) (session.Status, int64, uint64) {
	var (
		st  session.Status
		exp int64
		seq uint64
	)
	if cerr := w.rt.Inspect(w.ctx, s.id, func(ss *session.Session) {
		st, seq = ss.Status, ss.Seq
		if at, ok := ss.ExpiryMs(); ok {
			exp = at
		}
	}); cerr != nil {
		w.fail("inspect %s: %v", s.id, cerr)
	}
	return st, exp, seq
}

// follower is one subscriber following a session from a cursor.
type follower struct {
	n      int
	s      *simSession
	who    coord.Identity
	after  uint64
	stored uint64 // durable records when it subscribed
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	started bool
	eff     uint64 // effective cursor (OnStartAfter)
	got     []session.Record
	err     error
	ended   bool
	checked int // how many of got were compared with the store
}

// follow starts a follower of s after the cursor and waits for it to
// start and catch up. With midSync (an append of s is held in its sync:
// Follow waits for it to be durable before it starts) it only starts the
// follower; the caller then releases the sync and calls awaitStart, or
// crashes (the follower dies with the process, having got nothing).
func (w *world) follow(s *simSession, who coord.Identity, after uint64, midSync bool) *follower {
	stored, ok := w.rt.LastSeq(s.id) // durable, whatever the store shows
	if !ok {
		stored = uint64(len(w.history(s.id)))
	}
	ctx, cancel := context.WithCancel(w.ctx)
	f := &follower{n: len(w.followers) + 1, s: s, who: who, after: after, stored: stored, cancel: cancel, done: make(chan struct{})}
	rt, park := w.rt, w.park
	go func() {
		defer close(f.done)
		opts := runtime.FollowOptions{OnStartAfter: func(_, eff uint64) {
			f.mu.Lock()
			f.started, f.eff = true, eff
			f.mu.Unlock()
			if park != nil && park.where == "snapshot" {
				park.wait()
			}
		}}
		if park != nil && park.where == "registered" {
			opts.OnRegistered = park.wait
		}
		err := rt.Follow(ctx, who, s.id, after, opts, func(r session.Record) error {
			f.mu.Lock()
			f.got = append(f.got, r)
			f.mu.Unlock()
			return nil
		})
		f.mu.Lock()
		f.err, f.ended = err, true
		f.mu.Unlock()
	}()
	if midSync {
		w.followers = append(w.followers, f)
		where := "during the held sync"
		if park != nil {
			where = "to park at " + park.where
		}
		w.logf("follow f%d %s by %s after %d, %s", f.n, s.id, who.Sender, after, where)
		return f
	}
	if w.awaitStart(f) {
		w.followers = append(w.followers, f)
		w.catchUp(f)
	}
	return f
}

// awaitStart waits until f started or was refused, and checks where it
// started: at the cursor it asked for, or at the durable end if it asked
// beyond it ("live from now", no LiveSinceMs).
func (w *world) awaitStart(f *follower) bool {
	if !wait(func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.started || f.ended }) {
		w.fail("follower f%d of %s never started", f.n, f.s.id)
	}
	f.mu.Lock()
	started, eff, err := f.started, f.eff, f.err
	f.mu.Unlock()
	if !started {
		w.logf("follow f%d %s by %s after %d -> %s", f.n, f.s.id, f.who.Sender, f.after, coord.CodeOf(err))
		f.cancel = nil
		return false
	}
	w.logf("follow f%d %s by %s after %d -> from %d", f.n, f.s.id, f.who.Sender, f.after, eff)
	if want := min(f.after, f.stored); eff != want {
		w.fail("follower f%d of %s asked for records after %d with %d stored: it starts after %d, want %d", f.n, f.s.id, f.after, f.stored, eff, want)
	}
	return true
}

// catchUp waits until f has everything the store holds for its session
// (or its Follow ended), then checks what it got: the records after its
// cursor, in order, no gap, no duplicate, equal to the stored ones.
func (w *world) catchUp(f *follower) {
	if f.cancel == nil {
		return // stopped at a crash, already checked
	}
	hist := w.history(f.s.id)
	last := uint64(len(hist))
	// A follower of an ended session ends once it has the terminal record:
	// wait for that too, so whether it is logged as ended in this step
	// does not depend on the scheduler.
	over := last > 0 && hist[last-1].Status.Terminal()
	var ended bool
	ok := wait(func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		ended = f.ended
		return f.ended || (f.eff+uint64(len(f.got)) >= last && !over)
	})
	if !ok {
		f.mu.Lock()
		n := len(f.got)
		f.mu.Unlock()
		w.fail("follower f%d of %s stuck: from %d got %d records, the store has %d", f.n, f.s.id, f.eff, n, last)
	}
	w.checkFollower(f, hist)
	if ended {
		f.mu.Lock()
		err, n := f.err, len(f.got)
		f.mu.Unlock()
		if !errors.Is(err, runtime.ErrFollowEnded) {
			w.fail("follower f%d of %s ended with %v", f.n, f.s.id, err)
		}
		if f.eff+uint64(n) != last {
			w.fail("follower f%d of %s ended at %d, the history at %d", f.n, f.s.id, f.eff+uint64(n), last)
		}
		w.logf("  follower f%d of %s ended after %d records", f.n, f.s.id, n)
		f.cancel = nil
	}
}

func (w *world) checkFollower(f *follower, hist []session.Record) {
	f.mu.Lock()
	got := slices.Clone(f.got)
	f.mu.Unlock()
	for i, r := range got {
		want := f.eff + uint64(i) + 1
		if r.Seq != want {
			w.fail("follower f%d of %s: record %d of its feed has seq %d, want %d (gap or duplicate)", f.n, f.s.id, i+1, r.Seq, want)
		}
		if int(want) > len(hist) || recKey(hist[want-1]) != recKey(r) {
			h := "none"
			if int(want) <= len(hist) {
				h = recKey(hist[want-1])
			}
			w.fail("follower f%d of %s got %s, the history holds %s", f.n, f.s.id, recKey(r), h)
		}
	}
	f.checked = len(got)
}

// stopFollowers ends every live follower (at a crash: the process dies)
// after checking what it got; whatever it got must still be in history
// after recovery (it was published only once durable), checked by
// recheckFollowers.
func (w *world) stopFollowers() {
	for _, f := range w.followers {
		if f.cancel == nil {
			continue
		}
		f.cancel()
		select {
		case <-f.done:
		case <-waitCh():
			panic(failure{fmt.Sprintf("follower f%d did not end", f.n)})
		}
		f.cancel = nil
	}
}

// recheckFollowers compares every follower's feed with the current store:
// after crashes, what any follower saw must still be the history.
func (w *world) recheckFollowers() {
	for _, f := range w.followers {
		w.checkFollower(f, w.history(f.s.id))
	}
}

// final runs the end-of-run checks: quiescence, every follower's feed
// against the final store, and offline verification (chain and replay) of
// every stored session, whose replayed state must be what the runtime
// serves.
func (w *world) final() {
	w.settle()
	w.recheckFollowers()
	w.recheckAttachments()
	w.recheckFeeds()
	results := make(map[string]verify.SessionResult)
	ok, failed, err := verify.Verify(w.ctx, w.st, w.modes, w.lim, func(r verify.SessionResult) { results[r.SessionID] = r })
	if err != nil {
		w.fail("verify: %v", err)
	}
	if failed > 0 {
		for _, id := range sortedKeys(results) {
			if r := results[id]; !r.OK() {
				w.fail("verify %s: %v", id, r.Err)
			}
		}
	}
	started := 0
	for _, s := range w.sessions {
		if !s.started {
			continue
		}
		started++
		r, ok := results[s.id]
		if !ok {
			w.fail("verify did not list %s", s.id)
		}
		st, _, seq := w.inspect(s)
		if r.Status != st || r.Records != seq {
			w.fail("%s: replays to %s at %d records, the runtime serves %s at %d", s.id, r.Status, r.Records, st, seq)
		}
		w.logf("end %s %s %s", s.id, st, kinds(w.history(s.id)))
	}
	if ok != started {
		w.fail("verify: %d sessions verified, %d started", ok, started)
	}
	w.logf("end: %d sessions, %d followers, %d attachments on %d connections (%s), %s, %d crashes, %d disk faults, %d held syncs, %d policies, simulated %s",
		started, len(w.followers), len(w.atts), len(w.conns), w.attStats, w.sseStats, w.crashes, w.faults, w.heldSyncs, len(w.policies), w.clk.Now().Sub(epoch))
}
