package runtime

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
)

// pipeStore is a store.Pipeliner over a memstore: AppendAsync writes at
// once (readable) and its wait blocks until the test releases that append;
// a failed wait fails every later one (fail closed, as the contract says).
type pipeStore struct {
	store.Store
	mu      sync.Mutex
	gates   []chan error // one per started append, in order
	started chan int     // the index of each started append
	failed  bool
}

func newPipeStore() *pipeStore {
	return &pipeStore{Store: memstore.New(), started: make(chan int, 64)}
}

func (p *pipeStore) AppendAsync(ctx context.Context, recs []session.Record) (func() error, error) {
	if err := p.Store.Append(ctx, recs); err != nil {
		return nil, err
	}
	gate := make(chan error, 1)
	p.mu.Lock()
	p.gates = append(p.gates, gate)
	n := len(p.gates) - 1
	p.mu.Unlock()
	p.started <- n
	return func() error {
		err := <-gate
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			p.failed = true
		}
		if p.failed {
			return errors.Join(store.ErrFailed, err)
		}
		return nil
	}, nil
}

// release ends the wait of append n with err.
func (p *pipeStore) release(n int, err error) {
	p.mu.Lock()
	g := p.gates[n]
	p.mu.Unlock()
	g <- err
}

// With a pipelining store the committer starts the next group while the
// previous one is not durable, and the groups are answered strictly in
// order, each only after its wait returned (issue #4: durable before ack,
// group commit with pipelining).
func TestPipelinedCommitsAnswerInOrder(t *testing.T) {
	st := newPipeStore()
	r := newRT(t, st, Options{})
	defer func() { // never leave the completer waiting
		st.mu.Lock()
		n := len(st.gates)
		st.mu.Unlock()
		for i := range n {
			select {
			case st.gates[i] <- nil:
			default:
			}
		}
	}()
	// Open two sessions (each append released as it starts).
	var sids []string
	for range 2 {
		sid := newSID()
		ack := sendAsync(r, context.Background(), initID, startEnv(sid, "m0", 60_000))
		st.release(<-st.started, nil)
		if a := recv(t, ack, "start ack"); !a.Ok {
			t.Fatal(a.Error)
		}
		sids = append(sids, sid)
	}
	// A (session 0) is in flight; B (session 1) starts while A syncs.
	ackA := sendAsync(r, context.Background(), initID, proposalEnv(sids[0], "a"))
	nA := recv(t, st.started, "append A started")
	ackB := sendAsync(r, context.Background(), initID, proposalEnv(sids[1], "b"))
	nB := recv(t, st.started, "append B started while A is in flight")
	// B is durable first, but may not be answered before A.
	st.release(nB, nil)
	nothingFor(t, ackB, 100*time.Millisecond, "B's ack before A's")
	nothingFor(t, ackA, 0, "A's ack before its sync")
	st.release(nA, nil)
	if a := recv(t, ackA, "A's ack"); !a.Ok {
		t.Fatal(a.Error)
	}
	if b := recv(t, ackB, "B's ack"); !b.Ok {
		t.Fatal(b.Error)
	}

	// A failed sync: that group and the one started after it are refused,
	// and nothing of them is acknowledged.
	ackC := sendAsync(r, context.Background(), initID, proposalEnv(sids[0], "c"))
	nC := recv(t, st.started, "append C started")
	ackD := sendAsync(r, context.Background(), initID, proposalEnv(sids[1], "d"))
	nD := recv(t, st.started, "append D started")
	st.release(nD, nil)
	st.release(nC, errors.New("disk gone"))
	for name, ch := range map[string]<-chan *macpv1.Ack{"C": ackC, "D": ackD} {
		a := recv(t, ch, name+"'s answer")
		if a.Ok || coord.Code(a.GetError().GetCode()) != coord.CodeInternalError {
			t.Fatalf("%s after a failed sync: ok=%v %v, want INTERNAL_ERROR", name, a.Ok, a.GetError())
		}
	}
}
