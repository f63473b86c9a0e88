package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/macpd/macpd/internal/hub"
	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clock/clocktest"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
	"github.com/macpd/macpd/internal/testutil"
)

// Identities used throughout. Alice and Bob are the declared participants
// of every test session; the initiator is not a participant (Decision lets
// it propose and commit anyway).
var (
	initID     = coord.Identity{Sender: "agent://init"}
	aliceID    = coord.Identity{Sender: "agent://alice"}
	bobID      = coord.Identity{Sender: "agent://bob"}
	outsiderID = coord.Identity{Sender: "agent://outsider"}
	observerID = coord.Identity{Sender: "agent://observer", Caps: coord.Capabilities{IsObserver: true}}
)

const cfgVersion = testutil.DefaultCfgVersion

// errInjected is what faultStore returns for an injected failure.
var errInjected = errors.New("faultstore: injected append failure")

// fault is one scripted behaviour of faultStore.Append. A fault matches an
// Append whose batch holds a record of session ("" matches every append);
// the first matching fault with times != 0 applies (times < 0 = forever).
// If gate is non-nil the append signals entered and then waits for gate to
// close; then it fails with err (nothing written) or, if err is nil,
// proceeds to the inner store.
type fault struct {
	session string
	times   int
	gate    chan struct{}
	entered chan struct{} // buffered; one value per append that waits
	err     error
	// early writes the batch to the inner store before waiting on gate:
	// the records are readable before Append returns, as with Pebble,
	// which makes a batch visible before its WAL sync completes.
	early bool
	once  sync.Once
}

// release opens the gate (idempotent).
func (f *fault) release() {
	if f.gate != nil {
		f.once.Do(func() { close(f.gate) })
	}
}

// faultStore wraps a memstore and injects Append failures and stalls. It
// counts calls and records so tests can reason about group commit.
type faultStore struct {
	store.Store

	mu     sync.Mutex
	faults []*fault

	appends atomic.Int64 // Append calls that reached the inner store
	records atomic.Int64 // records those calls carried
	calls   atomic.Int64 // every Append call

	oneIn atomic.Int64 // > 0: each Append fails at random, one in oneIn
}

// failRandomly makes each Append fail with probability 1/n (0: never),
// on top of the scripted faults.
func (s *faultStore) failRandomly(n int) { s.oneIn.Store(int64(n)) }

func newFaultStore() *faultStore { return &faultStore{Store: memstore.New()} }

func wrapStore(inner store.Store) *faultStore { return &faultStore{Store: inner} }

// inject adds a scripted fault and returns it.
func (s *faultStore) inject(f *fault) *fault {
	if f.gate != nil && f.entered == nil {
		f.entered = make(chan struct{}, 64)
	}
	s.mu.Lock()
	s.faults = append(s.faults, f)
	s.mu.Unlock()
	return f
}

// failNext makes the next n appends touching sessionID ("" = any) fail.
func (s *faultStore) failNext(sessionID string, n int) *fault {
	return s.inject(&fault{session: sessionID, times: n, err: errInjected})
}

// block makes the next append touching sessionID wait for the returned
// fault's gate; fail decides whether it then fails.
func (s *faultStore) block(sessionID string, fail bool) *fault {
	f := &fault{session: sessionID, times: 1, gate: make(chan struct{})}
	if fail {
		f.err = errInjected
	}
	return s.inject(f)
}

// clear removes every fault that has not fired yet.
func (s *faultStore) clear() {
	s.mu.Lock()
	s.faults = nil
	s.mu.Unlock()
}

// releaseAll opens every gate, so a failed test does not leave the
// committer stuck (and Close hanging).
func (s *faultStore) releaseAll() {
	s.mu.Lock()
	fs := s.faults
	s.faults = nil
	s.mu.Unlock()
	for _, f := range fs {
		f.release()
	}
}

func (s *faultStore) Append(ctx context.Context, recs []session.Record) error {
	s.calls.Add(1)
	if n := s.oneIn.Load(); n > 0 && rand.Int64N(n) == 0 {
		return errInjected
	}
	s.mu.Lock()
	var f *fault
	for _, c := range s.faults {
		if c.times == 0 {
			continue
		}
		if c.session == "" || slices.ContainsFunc(recs, func(r session.Record) bool { return r.SessionID == c.session }) {
			f = c
			if f.times > 0 {
				f.times--
			}
			break
		}
	}
	s.mu.Unlock()
	if f != nil && f.early {
		s.appends.Add(1)
		s.records.Add(int64(len(recs)))
		err := s.Store.Append(ctx, recs)
		f.entered <- struct{}{}
		<-f.gate
		return err
	}
	if f != nil {
		if f.gate != nil {
			f.entered <- struct{}{}
			<-f.gate
		}
		if f.err != nil {
			return f.err
		}
	}
	s.appends.Add(1)
	s.records.Add(int64(len(recs)))
	return s.Store.Append(ctx, recs)
}

// waitEntered waits until an append is stalled on f's gate.
func waitEntered(t *testing.T, f *fault) {
	t.Helper()
	select {
	case <-f.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no append reached the stalled fault")
	}
}

// testModes is the registry every test runtime uses: the Decision Mode.
func testModes() *mode.Registry {
	return mode.NewRegistry(mode.Entry{Mode: decision.New(), Kind: mode.Standard, BuiltIn: true})
}

// newRT builds and starts a Runtime over st; it is closed at cleanup.
func newRT(t *testing.T, st store.Store, opts Options) *Runtime {
	t.Helper()
	r := New(st, testModes(), policy.DefaultOnly{}, opts)
	if err := r.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if fs, ok := st.(*faultStore); ok {
			fs.releaseAll()
		}
		r.Close()
	})
	return r
}

// newRTHeldTimers is newRT whose TTL timer loop hands each due session id
// to the returned channel instead of expiring the session: the test
// decides when the timer's expiry runs (r.expireByTimer(id)), so it can
// check what happens before it without racing the timer.
func newRTHeldTimers(t *testing.T, st store.Store, opts Options) (*Runtime, <-chan string) {
	t.Helper()
	r := New(st, testModes(), policy.DefaultOnly{}, opts)
	due := make(chan string, 1024)
	r.timers.fire = func(id string) { due <- id }
	if err := r.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(r.Close)
	return r, due
}

// heapHas reports whether the timer heap holds session id at atMs.
func heapHas(r *Runtime, id string, atMs int64) bool {
	r.timers.mu.Lock()
	defer r.timers.mu.Unlock()
	return slices.Contains(r.timers.items, deadlineItem{atMs: atMs, id: id})
}

// startAt is startEnv stamped with the fake clock's instant (the deadline
// is timestamp + ttl).
func startAt(clk *clocktest.Fake, sid, msgID string, ttlMs int64) *macpv1.Envelope {
	env := startEnv(sid, msgID, ttlMs)
	env.TimestampUnixMs = clk.NowMs()
	return env
}

func mustMarshal(m proto.Message) []byte { return testutil.Marshal(m) }

func newSID() string { return uuid.NewString() }

// startEnv is a valid Decision SessionStart with participants alice and bob.
func startEnv(sid, msgID string, ttlMs int64) *macpv1.Envelope {
	return testutil.DecisionStart(sid, msgID, ttlMs, aliceID.Sender, bobID.Sender)
}

func sessionEnv(sid, msgID, typ string, payload []byte) *macpv1.Envelope {
	return testutil.DecisionEnv(sid, msgID, typ, payload)
}

// proposalEnv proposes option proposal_id "p-"+msgID (unique per message).
func proposalEnv(sid, msgID string) *macpv1.Envelope { return testutil.DecisionProposal(sid, msgID) }

func voteEnv(sid, msgID, proposalID string) *macpv1.Envelope {
	return testutil.DecisionVote(sid, msgID, proposalID)
}

// commitEnv is a valid negative Commitment (always allowed once a proposal
// exists) with commitment_id cid.
func commitEnv(sid, msgID, cid string) *macpv1.Envelope {
	return testutil.DecisionRejection(sid, msgID, cid)
}

func signalEnv(msgID, signalType string) *macpv1.Envelope {
	return &macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion, MessageType: coord.TypeSignal, MessageId: msgID,
		TimestampUnixMs: time.Now().UnixMilli(),
		Payload:         mustMarshal(&macpv1.SignalPayload{SignalType: signalType, Data: []byte("d")}),
	}
}

// mustOK sends and fails the test unless the Ack is ok and not a duplicate.
func mustOK(t *testing.T, r *Runtime, id coord.Identity, env *macpv1.Envelope) *macpv1.Ack {
	t.Helper()
	ack := r.Send(context.Background(), id, env)
	if !ack.Ok || ack.Duplicate {
		t.Fatalf("Send %s %s: want ok, got %v", env.MessageType, env.MessageId, ack)
	}
	return ack
}

// wantCode fails unless ack is a rejection with code.
func wantCode(t *testing.T, ack *macpv1.Ack, code coord.Code) {
	t.Helper()
	if ack.Ok || ack.Error == nil || ack.Error.Code != string(code) {
		t.Fatalf("want ok=false %s, got %v", code, ack)
	}
}

// openSession starts a session (ttl 1 min unless ttl > 0) with one
// accepted proposal "m1" from the initiator, so a Commitment is valid.
func openSession(t *testing.T, r *Runtime, ttl int64) string {
	t.Helper()
	if ttl <= 0 {
		ttl = 60_000
	}
	sid := newSID()
	mustOK(t, r, initID, startEnv(sid, "m0", ttl))
	mustOK(t, r, initID, proposalEnv(sid, "m1"))
	return sid
}

// sendAsync sends in a goroutine; the Ack arrives on the channel.
func sendAsync(r *Runtime, ctx context.Context, id coord.Identity, env *macpv1.Envelope) <-chan *macpv1.Ack {
	ch := make(chan *macpv1.Ack, 1)
	go func() { ch <- r.Send(ctx, id, env) }()
	return ch
}

// recv waits for a value (bounded).
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testutil.Recv(t, ch, what)
}

// nothingFor asserts ch yields nothing for d.
func nothingFor[T any](t *testing.T, ch <-chan T, d time.Duration, what string) {
	t.Helper()
	testutil.NothingFor(t, ch, d, what)
}

// stored returns a session's stored records (nil if unknown).
func stored(t *testing.T, st store.Store, sid string) []session.Record {
	t.Helper()
	var out []session.Record
	err := st.Read(context.Background(), sid, 1, func(rec session.Record) error { out = append(out, rec); return nil })
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Read %s: %v", sid, err)
	}
	return out
}

// storedIDs returns the message ids of a session's stored envelopes, in
// order, and checks the history invariants: Seq is 1..N without gaps,
// record 1 is the start, nothing follows a terminal record, and no
// message_id is stored twice (IDEM-5, ADM-24, ADM-31).
func storedIDs(t *testing.T, st store.Store, sid string) []string {
	t.Helper()
	recs := stored(t, st, sid)
	seen := make(map[string]bool)
	var ids []string
	for i, rec := range recs {
		if rec.Seq != uint64(i+1) || rec.SessionID != sid {
			t.Fatalf("session %s: record %d has seq %d session %s", sid, i+1, rec.Seq, rec.SessionID)
		}
		if (i == 0) != (rec.Kind == session.KindStart) {
			t.Fatalf("session %s: record %d is %s", sid, rec.Seq, rec.Kind)
		}
		if i > 0 && terminalRecord(recs[i-1]) {
			t.Fatalf("session %s: record %d follows the terminal record %d", sid, rec.Seq, rec.Seq-1)
		}
		if rec.Envelope == nil {
			continue
		}
		if seen[rec.Envelope.MessageId] {
			t.Fatalf("session %s: message %s stored twice", sid, rec.Envelope.MessageId)
		}
		seen[rec.Envelope.MessageId] = true
		ids = append(ids, rec.Envelope.MessageId)
	}
	return ids
}

// terminalRecord reports whether rec ended its session.
func terminalRecord(rec session.Record) bool {
	switch rec.Kind {
	case session.KindCancel, session.KindExpire:
		return true
	case session.KindMessage:
		return rec.Envelope.MessageType == coord.TypeCommitment
	}
	return false
}

func countTerminal(recs []session.Record) int {
	n := 0
	for _, rec := range recs {
		if terminalRecord(rec) {
			n++
		}
	}
	return n
}

// inspect returns a copy of what the test needs from the durable session.
type view struct {
	status   session.Status
	seq      uint64
	seen     []string
	activity []session.Activity
	deadline int64
}

func inspect(t *testing.T, r *Runtime, sid string) view {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var v view
	if err := r.Inspect(ctx, sid, func(s *session.Session) {
		v = view{status: s.Status, seq: s.Seq, seen: s.SeenIDs(), activity: s.Activity(), deadline: s.DeadlineMs}
	}); err != nil {
		t.Fatalf("Inspect %s: %v", sid, err)
	}
	return v
}

// eventually is the bounded polling helper of these tests: it polls cond
// every 5 ms for up to d (a bound against a hang; a condition that holds
// never waits it out).
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	pollUntil(t, d, 5*time.Millisecond, what, cond)
}

// pollUntil is eventually with its polling interval (the benchmarks poll
// more often, so that the poll does not dominate what they measure). It
// is the only place in this package's tests that sleeps.
func pollUntil(tb testing.TB, d, every time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(every)
	}
}

// getState returns GetSession's state for id, or the error code.
func getState(r *Runtime, id coord.Identity, sid string) (macpv1.SessionState, coord.Code) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	md, err := r.GetSession(ctx, id, sid)
	if err != nil {
		return 0, err.Code
	}
	return md.State, ""
}

// nextEvent returns the next lifecycle event for sid, skipping others.
func nextEvent(t *testing.T, sub *hub.Sub[LifecycleEvent], sid string) LifecycleEvent {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-sub.C:
			if ev.Session.SessionId == sid {
				return ev
			}
		case <-timeout:
			t.Fatalf("no lifecycle event for %s", sid)
		}
	}
}

// noEvent asserts no lifecycle event for sid arrives within d.
func noEvent(t *testing.T, sub *hub.Sub[LifecycleEvent], sid string, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev := <-sub.C:
			if ev.Session.SessionId == sid {
				t.Fatalf("unexpected lifecycle event %v for %s", ev.Type, sid)
			}
		case <-timeout:
			return
		}
	}
}

func msgID(prefix string, i int) string { return fmt.Sprintf("%s-%d", prefix, i) }

// waitGroupOrFail waits for wg, failing the test if that takes too long
// (a goroutine is stuck).
func waitGroupOrFail(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("goroutines still blocked after 10 s")
	}
}

var defaultPolicies policy.Lookup = policy.DefaultOnly{}

// emptyModes is a registry without any mode.
func emptyModes() *mode.Registry { return mode.NewRegistry() }
