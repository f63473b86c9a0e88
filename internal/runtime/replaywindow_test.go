package runtime

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/memstore"
)

// FollowOptions.ReplayWindow (session/resume's replay window): a follower
// more than the window behind the session's end is moved to the end, is
// told so (OnReplayCut with the after it asked for, OnStartAfter with the
// end) and gets only later records; one within the window catches up.
func TestFollowReplayWindow(t *testing.T) {
	r := newRT(t, memstore.New(), Options{})
	sid := openSession(t, r, 0)
	for i := 2; i <= 5; i++ {
		mustOK(t, r, initID, proposalEnv(sid, fmt.Sprint("m", i)))
	}
	last, _ := r.LastSeq(sid)
	if last < 5 {
		t.Fatalf("last = %d", last)
	}
	errGot := errors.New("got it")
	follow := func(after, window uint64, want int) (cut []uint64, from uint64, got []uint64) {
		t.Helper()
		opts := FollowOptions{ReplayWindow: window,
			OnReplayCut:  func(a uint64) { cut = append(cut, a) },
			OnStartAfter: func(_, a uint64) { from = a },
		}
		err := r.Follow(context.Background(), initID, sid, after, opts, func(rec session.Record) error {
			got = append(got, rec.Seq)
			if len(got) == want {
				return errGot
			}
			return nil
		})
		if !errors.Is(err, errGot) {
			t.Fatalf("Follow = %v", err)
		}
		return cut, from, got
	}
	// Within the window: everything missed.
	cut, from, got := follow(last-3, 3, 3)
	if len(cut) != 0 || from != last-3 || got[0] != last-2 || got[2] != last {
		t.Fatalf("within: cut %v from %d got %v", cut, from, got)
	}
	// Outside: nothing missed, the next record only.
	done := make(chan struct{})
	go func() {
		defer close(done)
		cut, from, got := follow(1, 3, 1)
		if len(cut) != 1 || cut[0] != 1 || from != last || len(got) != 1 || got[0] != last+1 {
			t.Errorf("outside: cut %v from %d got %v (last %d)", cut, from, got, last)
		}
	}()
	eventually(t, 5*time.Second, "the follower", func() bool { return r.followers.Load() > 0 })
	mustOK(t, r, initID, proposalEnv(sid, "m9"))
	<-done
	// No window: everything.
	cut, from, got = follow(0, 0, int(last))
	if len(cut) != 0 || from != 0 || len(got) != int(last) {
		t.Fatalf("no window: cut %v from %d got %v", cut, from, got)
	}
}
