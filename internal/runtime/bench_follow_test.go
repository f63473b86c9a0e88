package runtime

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/memstore"
)

// followBaseline holds, per sender count, the accept and deliver ns per
// message of the 0-follower case of the current BenchmarkFollowFanout run,
// so the other cases report ratios against a baseline measured in the
// same run (the machine is shared and noisy; absolute figures drift).
var followBaseline = map[int][3]float64{}

// BenchmarkFollowFanout: one session receives messages (from 1 or 8
// concurrent senders) while 0, 10, 100 or 1000 passive followers
// (runtime.Follow, each with its own consumer goroutine) are attached.
//
// Reported per accepted message: ns/op = acceptance (the senders' Sends,
// durable in a memstore, acked); deliver-ns/msg = until every follower
// has every record; x-accept and x-deliver = the same against the
// 0-follower case of the same run; cpu-ns/msg = CPU time of the whole
// process (senders, committer, followers) while the timed Sends ran, and
// x-cpu its ratio. In the "stalled" case the followers' consumers block
// in their first delivery until every Send was acked: the timed phase
// shows acceptance with 1000 stalled followers attached (the shared tail
// overflows meanwhile, so they fall out of it), and deliver-ns/msg is
// their catch-up (from the store, then the tail) once they run, per
// message. Every follower must receive every record, in order, exactly
// once, or the benchmark fails.
//
//	go test ./internal/runtime -run '^$' -bench BenchmarkFollowFanout -benchtime 3000x -count 3
func BenchmarkFollowFanout(b *testing.B) {
	for _, senders := range []int{1, 8} {
		for _, followers := range []int{0, 10, 100, 1000} {
			b.Run(fmt.Sprintf("senders=%d/followers=%d", senders, followers), func(b *testing.B) {
				benchFollowFanout(b, senders, followers, false)
			})
		}
		b.Run(fmt.Sprintf("senders=%d/followers=1000-stalled", senders), func(b *testing.B) {
			benchFollowFanout(b, senders, 1000, true)
		})
	}
}

// benchFollower counts what one follower received.
type benchFollower struct {
	last atomic.Uint64 // sequence number of the last record delivered
}

func benchFollowFanout(b *testing.B, senders, followers int, stalled bool) {
	r := New(memstore.New(), testModes(), policy.DefaultOnly{}, Options{})
	if err := r.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sid := newSID()
	if ack := r.Send(ctx, initID, startEnv(sid, "m0", 3_600_000)); !ack.Ok {
		b.Fatal(ack.Error)
	}
	o := r.lookup(sid)
	first := o.durable()

	fs := make([]*benchFollower, followers)
	errs := make(chan error, followers)
	gate := make(chan struct{}) // stalled consumers wait for it
	if !stalled {
		close(gate)
	}
	var wg sync.WaitGroup
	for i := range fs {
		f := &benchFollower{}
		fs[i] = f
		f.last.Store(first)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.Follow(ctx, observerID, sid, first, FollowOptions{}, func(rec session.Record) error {
				<-gate
				if want := f.last.Load() + 1; rec.Seq != want {
					return fmt.Errorf("record %d, want %d", rec.Seq, want)
				}
				f.last.Store(rec.Seq)
				return nil
			})
			if ctx.Err() == nil {
				errs <- err
			}
		}()
	}
	// Wait until every follower is registered (reading the shared tail).
	pollUntil(b, 30*time.Second, time.Millisecond, "every follower live", func() bool {
		o.durableMu.Lock()
		defer o.durableMu.Unlock()
		return o.followers == followers
	})

	// An untimed warm-up, delivered before timing starts, so every case
	// starts warm. Stalled followers take its first record and block.
	warmup := 200
	total := warmup + b.N
	envs := make([]*macpv1.Envelope, total)
	for i := range envs {
		envs[i] = proposalEnv(sid, fmt.Sprintf("b%d", i))
	}
	var next atomic.Int64
	var failed atomic.Pointer[macpv1.Ack]
	send := func(upto int) {
		var sw sync.WaitGroup
		for range senders {
			sw.Add(1)
			go func() {
				defer sw.Done()
				for {
					i := next.Add(1) - 1
					if i >= int64(upto) {
						next.Add(-1)
						return
					}
					if ack := r.Send(ctx, initID, envs[i]); !ack.Ok {
						failed.Store(ack)
						return
					}
				}
			}()
		}
		sw.Wait()
		if ack := failed.Load(); ack != nil {
			b.Fatalf("send failed: %v", ack.Error)
		}
	}
	send(warmup)
	if !stalled {
		waitFollowers(b, fs, errs, first+uint64(warmup))
	}
	goruntime.GC()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	send(total)
	accepted, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	caughtUp := time.Now()
	if stalled {
		close(gate)
	}
	final := o.durable()
	if final != first+uint64(total) {
		b.Fatalf("last sequence %d, want %d", final, first+uint64(total))
	}
	waitFollowers(b, fs, errs, final)
	delivered := time.Since(start)
	if stalled {
		// Catch-up from the store of everything, per message.
		delivered = time.Since(caughtUp) * time.Duration(b.N) / time.Duration(total)
	}
	cancel()
	wg.Wait()
	for i, f := range fs {
		if f.last.Load() != final {
			b.Fatalf("follower %d ended at %d, want %d", i, f.last.Load(), final)
		}
	}

	acceptNs := float64(accepted.Nanoseconds()) / float64(b.N)
	deliverNs := float64(delivered.Nanoseconds()) / float64(b.N)
	cpuNs := float64(cpu.Nanoseconds()) / float64(b.N)
	b.ReportMetric(deliverNs, "deliver-ns/msg")
	b.ReportMetric(cpuNs, "cpu-ns/msg")
	if followers == 0 {
		followBaseline[senders] = [3]float64{acceptNs, deliverNs, cpuNs}
	} else if base, ok := followBaseline[senders]; ok && base[0] > 0 {
		b.ReportMetric(acceptNs/base[0], "x-accept")
		b.ReportMetric(deliverNs/base[1], "x-deliver")
		b.ReportMetric(cpuNs/base[2], "x-cpu")
	}
}

// waitFollowers waits until every follower delivered record seq.
func waitFollowers(b *testing.B, fs []*benchFollower, errs <-chan error, seq uint64) {
	pollUntil(b, 120*time.Second, 100*time.Microsecond, fmt.Sprintf("every follower to receive record %d", seq), func() bool {
		select {
		case err := <-errs:
			b.Fatalf("a follower failed: %v", err)
		default:
		}
		for _, f := range fs {
			if f.last.Load() < seq {
				return false
			}
		}
		return true
	})
}

// cpuTime returns the CPU time (user + system) the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
