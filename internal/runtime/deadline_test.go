package runtime

import (
	"testing"
	"time"
)

// A channel from deadlines never closes before d after it was taken, and
// does close (within d plus a step, with generous slack for a busy
// machine); channels taken later close later or together; stopping leaves
// the rest open.
func TestDeadlines(t *testing.T) {
	const d = 80 * time.Millisecond
	x := newDeadlines(d)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); x.run(stop) }()

	type taken struct {
		at time.Time
		ch <-chan struct{}
	}
	var all []taken
	for range 30 {
		all = append(all, taken{time.Now(), x.after()})
		time.Sleep(d / 20)
	}
	for i, tk := range all {
		select {
		case <-tk.ch:
		case <-time.After(d + d/deadlineSteps + 5*time.Second):
			t.Fatalf("channel %d not closed", i)
		}
		if waited := time.Since(tk.at); waited < d {
			t.Fatalf("channel %d closed after %v, before %v", i, waited, d)
		}
	}
	close(stop)
	<-done
	c := x.after()
	select {
	case <-c:
		t.Fatal("the channel handed out at stop was closed")
	case <-time.After(2 * d):
	}
}
