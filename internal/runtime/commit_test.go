package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

// The group committer on its own (commit.go), over a scripted store: every
// append waits until the test answers it, so each test decides exactly
// what is in flight and nothing depends on timing. The numbers in the
// test comments are the steps of the committer's contract.

// appendCall is one append the committer started: its records and where
// the test sends its outcome.
type appendCall struct {
	recs   []session.Record
	result chan error
}

func (c appendCall) ids() []string {
	var out []string
	for _, rec := range c.recs {
		out = append(out, fmt.Sprintf("%s/%d", rec.SessionID, rec.Seq))
	}
	return out
}

// scriptStore hands every Append to the test (calls) and returns what the
// test answers. Only Append is used by the committer.
type scriptStore struct {
	store.Store // nil: any other method would panic
	calls       chan appendCall
}

func newScriptStore() *scriptStore { return &scriptStore{calls: make(chan appendCall, 64)} }

func (s *scriptStore) Append(_ context.Context, recs []session.Record) error {
	c := appendCall{recs: slices.Clone(recs), result: make(chan error, 1)}
	s.calls <- c
	return <-c.result
}

// scriptPipe is a store.Pipeliner: AppendAsync hands the started append to
// the test at once and its wait returns what the test answers. Once a
// wait failed every later one fails too (store.ErrFailed), as the
// Pipeliner contract requires of a store that fails closed.
type scriptPipe struct {
	scriptStore
	mu     sync.Mutex
	failed bool
}

func (s *scriptPipe) AppendAsync(_ context.Context, recs []session.Record) (func() error, error) {
	c := appendCall{recs: slices.Clone(recs), result: make(chan error, 1)}
	s.calls <- c
	return func() error {
		err := <-c.result
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.failed = true
		}
		if s.failed {
			return errors.Join(store.ErrFailed, err)
		}
		return nil
	}, nil
}

// commitHarness runs a committer over st and records the order in which
// the durable hook ran.
type commitHarness struct {
	t    *testing.T
	c    *committer
	mu   sync.Mutex
	hook []string // "session/seq" of the last record of each durable request
	ran  chan struct{}
}

func newCommitHarness(t *testing.T, st store.Store) *commitHarness {
	h := &commitHarness{t: t, ran: make(chan struct{})}
	h.c = newCommitter(st, 256, defaultMaxInFlight, slog.New(slog.DiscardHandler), nil, nil, func(req *commitReq) {
		req.o.answeredWith(req.recs)
		last := req.recs[len(req.recs)-1]
		h.mu.Lock()
		h.hook = append(h.hook, fmt.Sprintf("%s/%d", last.SessionID, last.Seq))
		h.mu.Unlock()
	})
	go func() { defer close(h.ran); h.c.run() }()
	t.Cleanup(func() {
		h.c.stop()
		calls := st.(interface{ script() chan appendCall }).script()
		go func() { // answer whatever is still to come with success
			for c := range calls {
				c.result <- nil
			}
		}()
		recv(t, h.ran, "the committer to stop")
		close(calls) // run returned: no more appends
	})
	return h
}

func (s *scriptStore) script() chan appendCall { return s.calls }

func (h *commitHarness) durableOrder() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.hook)
}

// testOwner is a session owner with nothing decided yet.
func testOwner(id string) *owner {
	return &owner{id: id, initiator: "agent://init", sess: &session.Session{}, durableCh: make(chan struct{})}
}

// decide applies the session's next record, as an owner does under its
// lock, and submits it.
func (h *commitHarness) decide(o *owner) chan error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sess.Seq++
	return h.c.submit(o, []session.Record{{SessionID: o.id, Seq: o.sess.Seq}}, nil, false)
}

// barrier submits a durability barrier for o.
func (h *commitHarness) barrier(o *owner) chan error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return h.c.submit(o, nil, nil, false)
}

// unanswered fails the test if done already has an answer. Used only
// where the committer cannot have answered yet (it is held by the test),
// so a failure is a broken ordering, never a slow machine.
func unanswered(t *testing.T, done chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s answered early (%v)", what, err)
	default:
	}
}

// 2, 4, 5: requests queued while an append is in progress go together in
// the next append, in queue order; each is answered only after its own
// append returned nil, after the durable hook ran for it, and in order. A
// barrier is answered after its session's earlier records.
func TestCommitterGroupsAndAnswersOnlyWhenDurable(t *testing.T) {
	st := newScriptStore()
	h := newCommitHarness(t, st)
	a, b := testOwner("a"), testOwner("b")

	a1 := h.decide(a)
	call1 := recv(t, st.calls, "append of a1")
	if got := call1.ids(); !slices.Equal(got, []string{"a/1"}) {
		t.Fatalf("first append %v", got)
	}
	b1 := h.decide(b)
	a2 := h.decide(a)
	bar := h.barrier(a) // a has records in flight: queued behind a2
	unanswered(t, a1, "a1 (its append is in progress)")
	unanswered(t, bar, "the barrier")
	if got := h.durableOrder(); len(got) != 0 {
		t.Fatalf("durable hook ran before any append returned: %v", got)
	}

	call1.result <- nil
	if err := recv(t, a1, "a1's answer"); err != nil {
		t.Fatalf("a1: %v", err)
	}
	if got := h.durableOrder(); !slices.Equal(got, []string{"a/1"}) {
		t.Fatalf("a1 answered before its durable hook ran: hook %v", got)
	}
	call2 := recv(t, st.calls, "the grouped append")
	if got := call2.ids(); !slices.Equal(got, []string{"b/1", "a/2"}) {
		t.Fatalf("second append %v, want b1 and a2 grouped in queue order", got)
	}
	unanswered(t, b1, "b1 (its append is in progress)")
	unanswered(t, a2, "a2 (its append is in progress)")
	call2.result <- nil
	for name, ch := range map[string]chan error{"b1": b1, "a2": a2, "barrier": bar} {
		if err := recv(t, ch, name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if got := h.durableOrder(); !slices.Equal(got, []string{"a/1", "b/1", "a/2"}) {
		t.Fatalf("durable hook order %v", got)
	}
	if a.durable() != 2 || b.durable() != 1 {
		t.Fatalf("durable seqs a=%d b=%d", a.durable(), b.durable())
	}
	// Nothing in flight: a barrier is answered at once, without an append.
	if err := recv(t, h.barrier(a), "an idle barrier"); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-st.calls:
		t.Fatalf("a barrier with nothing in flight appended %v", c.ids())
	default:
	}
}

// 3, 6: a failed append fails its requests and marks their session
// broken; the session's records queued behind it are left out of the next
// append (answered errLost, as is a barrier behind them) while another
// session's records in the same group are stored; the failed records are
// never appended again nor reported durable.
func TestCommitterFailedAppendIsFinal(t *testing.T) {
	st := newScriptStore()
	h := newCommitHarness(t, st)
	a, b := testOwner("a"), testOwner("b")

	a1 := h.decide(a)
	call1 := recv(t, st.calls, "append of a1")
	a2 := h.decide(a) // decided on a1, which will be lost
	b1 := h.decide(b)
	bar := h.barrier(a)
	call1.result <- errors.New("disk gone")
	if err := recv(t, a1, "a1's answer"); err == nil {
		t.Fatal("a1 acknowledged after its append failed")
	}
	if a.broken.Load() != a.epoch+1 {
		t.Fatalf("session a not marked broken (broken=%d epoch=%d)", a.broken.Load(), a.epoch)
	}
	call2 := recv(t, st.calls, "the next append")
	if got := call2.ids(); !slices.Equal(got, []string{"b/1"}) {
		t.Fatalf("next append %v, want only b1 (a2 is doomed)", got)
	}
	call2.result <- nil
	if err := recv(t, a2, "a2's answer"); !errors.Is(err, errLost) {
		t.Fatalf("a2: %v, want errLost", err)
	}
	if err := recv(t, bar, "the barrier"); !errors.Is(err, errLost) {
		t.Fatalf("barrier behind a lost record: %v, want errLost", err)
	}
	if err := recv(t, b1, "b1's answer"); err != nil {
		t.Fatalf("b1 failed with another session's append: %v", err)
	}
	if got := h.durableOrder(); !slices.Equal(got, []string{"b/1"}) {
		t.Fatalf("durable hook ran for %v, want only b1", got)
	}
	if a.durable() != 0 {
		t.Fatalf("session a durable at %d after its only append failed", a.durable())
	}
	a.durableMu.Lock()
	pending := a.pending
	a.durableMu.Unlock()
	if pending != 0 {
		t.Fatalf("session a still has %d requests pending", pending)
	}
}

// 5, 6 with a pipelining store: the next group is started while the
// previous one syncs; groups are answered in the order they were started
// even when a later one is durable first; a failed sync fails its group
// and, the store having failed closed, every group started after it;
// nothing of them reaches the durable hook. At most defaultMaxInFlight+2 groups
// are started and unanswered at once.
func TestCommitterPipelinedOrderAndFailedSync(t *testing.T) {
	st := &scriptPipe{scriptStore: *newScriptStore()}
	h := newCommitHarness(t, st)
	a, b := testOwner("a"), testOwner("b")

	a1 := h.decide(a)
	callA := recv(t, st.calls, "append a1 started")
	b1 := h.decide(b)
	callB := recv(t, st.calls, "append b1 started while a1 syncs")
	callB.result <- nil // b1 is durable first
	unanswered(t, a1, "a1 (not durable)")
	// The completer waits for a1's group first, so b1 cannot be answered.
	unanswered(t, b1, "b1 (an earlier group is not durable)")
	callA.result <- nil
	if err := recv(t, a1, "a1"); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, b1, "b1"); err != nil {
		t.Fatal(err)
	}
	if got := h.durableOrder(); !slices.Equal(got, []string{"a/1", "b/1"}) {
		t.Fatalf("durable hook order %v", got)
	}

	// The bound: while the oldest group syncs, the committer starts
	// groups until the completer's queue is full, then waits.
	var dones []chan error
	var calls []appendCall
	for range defaultMaxInFlight + 2 {
		dones = append(dones, h.decide(a))
		calls = append(calls, recv(t, st.calls, "a pipelined append"))
	}
	extra := h.decide(b) // queued: the committer is blocked handing on the last group
	// A negative check: it cannot fail on a slow machine, only when the
	// committer starts a group it must not.
	nothingFor(t, st.calls, 20*time.Millisecond, "a group beyond defaultMaxInFlight+2 in flight")

	// The first of them fails: it and every later group are refused.
	calls[0].result <- errors.New("sync failed")
	for _, c := range calls[1:] {
		c.result <- nil // durable as far as the script goes; the store failed closed
	}
	for i, d := range dones {
		if err := recv(t, d, "a pipelined answer"); err == nil {
			t.Fatalf("group %d acknowledged after an earlier sync failed", i)
		}
	}
	callX := recv(t, st.calls, "the queued group, started once there is room")
	callX.result <- nil
	if err := recv(t, extra, "the queued group's answer"); err == nil {
		t.Fatal("a group started after a failed sync was acknowledged")
	}
	if got := h.durableOrder(); !slices.Equal(got, []string{"a/1", "b/1"}) {
		t.Fatalf("durable hook ran for failed groups: %v", got)
	}
}

// 7: after stop, submit refuses at once and marks the session broken; the
// append in progress finishes and is answered; a request queued behind it
// is either appended first or answered store.ErrClosed, never left
// waiting; run returns once all are answered.
func TestCommitterStop(t *testing.T) {
	st := newScriptStore()
	c := newCommitter(st, 256, defaultMaxInFlight, slog.New(slog.DiscardHandler), nil, nil, func(req *commitReq) { req.o.answeredWith(req.recs) })
	ran := make(chan struct{})
	go func() { defer close(ran); c.run() }()
	h := &commitHarness{t: t, c: c}
	a, b := testOwner("a"), testOwner("b")

	a1 := h.decide(a)
	call1 := recv(t, st.calls, "append of a1")
	b1 := h.decide(b)
	c.stop()
	c.stop() // idempotent
	late := h.decide(a)
	if err := recv(t, late, "a request after stop"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("after stop: %v, want store.ErrClosed", err)
	}
	if a.broken.Load() != a.epoch+1 {
		t.Fatal("a refused request whose records the owner applied did not mark the session broken")
	}
	call1.result <- nil
	if err := recv(t, a1, "a1, whose append was in progress"); err != nil {
		t.Fatalf("a1: %v", err)
	}
	// b1 may still be appended (the loop saw it before the stop) or not.
	go func() {
		for c := range st.calls {
			c.result <- nil
		}
	}()
	switch err := recv(t, b1, "b1"); {
	case err == nil:
		if b.durable() != 1 {
			t.Fatal("b1 acknowledged but not durable")
		}
	case errors.Is(err, store.ErrClosed):
		if b.broken.Load() != b.epoch+1 {
			t.Fatal("b1 refused at stop without marking its session broken")
		}
	default:
		t.Fatalf("b1: %v", err)
	}
	recv(t, ran, "run to return")
	close(st.calls)
}
