package httpapi_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// One cursor everywhere (RFC-MACP-0006 §3.2 subscribe, §4-5; docs/resume.md):
// a follower cut off at a random point on one transport resumes on a
// randomly chosen other transport with the last sequence number it saw,
// while senders keep writing over gRPC and HTTP. Every trial receives
// exactly the accepted envelopes after its starting cursor, in order,
// with no gap and no duplicate, each byte-equal to the stored envelope
// (the polling feed's canonical view is re-encoded first: its payloads
// are decoded objects).
func TestCrossTransportResume(t *testing.T) {
	trials := 300
	if testing.Short() {
		trials = 60
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MACP_CROSS_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (MACP_CROSS_SEED to replay the choices)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	e := startApp(t, testConfig())
	sids := []string{e.startSession(t, "coord", "alice", "bob"), e.startSession(t, "coord", "alice", "bob")}

	// Senders: one over gRPC, one over HTTP, per session, until the end.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent atomic.Int64
	for i, sid := range sids {
		for j, via := range []string{"grpc", "http"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("s%d-%s-%d-%d", i, via, j, n)
					// Refused SESSION_NOT_OPEN while the session is SUSPENDED.
					if via == "grpc" {
						if ack := e.grpcProposal(t, "coord", sid, id); !ack.Ok {
							if ack.GetError().GetCode() != "SESSION_NOT_OPEN" {
								t.Errorf("grpc send: %v", ack)
								return
							}
							time.Sleep(time.Millisecond)
							continue
						}
					} else if code, b := e.post(t, "coord", proposalJSON(sid, id, id)); code != 200 {
						if code != 409 || !bytes.Contains(b, []byte("SESSION_NOT_OPEN")) {
							t.Errorf("http send: %d %s", code, b)
							return
						}
						time.Sleep(time.Millisecond)
						continue
					}
					sent.Add(1)
				}
			}()
		}
	}
	// The initiator suspends and resumes the sessions meanwhile: every
	// transport delivers the runtime's SessionSuspend / SessionResume
	// records and keeps following a SUSPENDED session.
	toggles := e.toggleSuspend(t, sids, seed, stop, &wg)
	defer func() { close(stop); wg.Wait() }()
	for sent.Load() < 50 {
		time.Sleep(time.Millisecond)
	}

	type got struct {
		seq uint64
		b   []byte
		via string
	}
	pairs := map[string]int{}
	dur := map[string]time.Duration{}
	for trial := range trials {
		sid := sids[rng.IntN(len(sids))]
		last, _ := e.a.Runtime().LastSeq(sid)
		// A cursor in the last 200 records, or anywhere in the first
		// trials (a push feed sends the whole backlog after it, which
		// only costs time).
		lo := uint64(0)
		if last > 200 {
			lo = last - 200
		}
		start := lo + rng.Uint64N(last-lo+1)
		a := transports[rng.IntN(len(transports))]
		b := a
		for b == a {
			b = transports[rng.IntN(len(transports))]
		}
		pairs[a+">"+b]++
		n1, n2 := 1+rng.IntN(8), 1+rng.IntN(8)
		agent := []string{"alice", "bob", "coord"}[rng.IntN(3)]
		var seen []got
		read := func(via string, after uint64, n int) uint64 {
			t0 := time.Now()
			f := e.open(t, via, agent, sid, after)
			defer func() { f.close(); dur[via] += time.Since(t0) }()
			for range n {
				seq, env, err := f.next()
				if err != nil {
					t.Fatalf("trial %d %s: %v", trial, via, err)
				}
				seen = append(seen, got{seq, wireBytes(t, env), via})
				after = seq
			}
			return after // the cursor at the cut
		}
		cut := read(a, start, n1)
		read(b, cut, n2)
		stored := e.storedRange(t, sid, start+1, len(seen))
		for i, g := range seen {
			if want := start + uint64(i) + 1; g.seq != want {
				t.Fatalf("trial %d (%s then %s from %d): envelope %d has seq %d, want %d", trial, a, b, start, i, g.seq, want)
			}
			if !bytes.Equal(g.b, stored[g.seq]) {
				t.Fatalf("trial %d: seq %d via %s differs from storage", trial, g.seq, g.via)
			}
		}
	}
	t.Logf("time per transport %v", dur)
	if toggles.Load() == 0 {
		t.Fatal("no session was suspended during the trials")
	}
	t.Logf("%d trials, transport pairs %v, %d envelopes sent and %d suspensions/resumptions meanwhile", trials, pairs, sent.Load(), toggles.Load())
}
