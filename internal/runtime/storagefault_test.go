package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// diskFault fails writes or syncs of Pebble's WAL while armed, with err.
type diskFault struct {
	armed atomic.Bool
	kinds []errorfs.OpKind
	err   error
	hits  atomic.Int64
}

func (f *diskFault) String() string { return fmt.Sprintf("disk fault %v: %v", f.kinds, f.err) }

func (f *diskFault) MaybeError(op errorfs.Op) error {
	if !f.armed.Load() || !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	for _, k := range f.kinds {
		if op.Kind == k {
			f.hits.Add(1)
			return f.err
		}
	}
	return nil
}

// Storage faults through the whole runtime (checklist ADM-24 "storage
// failure -> INTERNAL_ERROR"; design "an acknowledgement means durable";
// docs/security.md "Storage faults"): a failing fdatasync, and a full disk
// (ENOSPC on the WAL write), under concurrent Sends on many sessions.
// Nothing is acknowledged that is not durable: after a crash (only synced
// data survives) every acknowledged envelope is in its session's history,
// exactly once, in order; the store is never used again after the failure
// (fail closed: no retried fsync that "succeeds"), every later Send is
// INTERNAL_ERROR, and Failed reports it (what /healthz and
// macpd_store_failed show).
func TestStorageFaultsNeverAcknowledgeUndurable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kinds []errorfs.OpKind
		err   error
	}{
		{"fdatasync fails", []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}, errorfs.ErrInjected},
		{"disk full", []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt}, syscall.ENOSPC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			fault := &diskFault{kinds: tc.kinds, err: tc.err}
			ps, err := pebblestore.Open("db", pebblestore.Options{FS: errorfs.Wrap(mem, fault)})
			if err != nil {
				t.Fatal(err)
			}
			r := New(ps, testModes(), nil, Options{})
			if err := r.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			const sessions, perSession = 8, 40
			sids := make([]string, sessions)
			var (
				mu    sync.Mutex
				acked = map[string][]string{} // session -> acknowledged message ids, in order
				nacks atomic.Int64
			)
			for i := range sids {
				sids[i] = newSID()
				ack := r.Send(context.Background(), initID, startEnv(sids[i], "start-"+sids[i], 600000))
				if !ack.Ok {
					t.Fatalf("start: %v", ack.Error)
				}
				acked[sids[i]] = []string{"start-" + sids[i]}
			}
			var wg sync.WaitGroup
			for i, sid := range sids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range perSession {
						if i == 0 && j == perSession/4 {
							fault.armed.Store(true) // the disk fails mid-run
						}
						id := msgID(sid[:8], j)
						ack := r.Send(context.Background(), initID, proposalEnv(sid, id))
						if ack.Ok {
							mu.Lock()
							acked[sid] = append(acked[sid], id)
							mu.Unlock()
							continue
						}
						nacks.Add(1)
						if c := ack.GetError().GetCode(); c != string(coord.CodeInternalError) {
							t.Errorf("Send after the disk failed: %s, want INTERNAL_ERROR", c)
						}
					}
				}()
			}
			wg.Wait()
			if fault.hits.Load() == 0 || nacks.Load() == 0 {
				t.Fatalf("fault hit %d times, %d Sends refused: the failure was never seen", fault.hits.Load(), nacks.Load())
			}
			if !errors.Is(ps.Failed(), store.ErrFailed) {
				t.Fatalf("Failed() = %v after a %s, want ErrFailed", ps.Failed(), tc.name)
			}
			// Fail closed, even once the disk works again: the store is
			// not used again without reopening.
			fault.armed.Store(false)
			hitsBefore := fault.hits.Load()
			ack := r.Send(context.Background(), initID, proposalEnv(sids[1], "after-the-failure"))
			if ack.Ok || ack.GetError().GetCode() != string(coord.CodeInternalError) {
				t.Fatalf("Send on a failed store: %v, want INTERNAL_ERROR", ack)
			}
			if err := ps.Append(context.Background(), nil); !errors.Is(err, store.ErrFailed) {
				t.Fatalf("Append on a failed store: %v", err)
			}
			crashed := mem.CrashClone(vfs.CrashCloneCfg{}) // only what was synced
			r.Close()
			_ = ps.Close()
			if fault.hits.Load() != hitsBefore {
				t.Fatal("the failed store touched the WAL again")
			}

			// Restart: exactly the acknowledged history, plus at most
			// envelopes whose Send was not acknowledged, never a gap.
			ps2, err := pebblestore.Open("db", pebblestore.Options{FS: crashed})
			if err != nil {
				t.Fatalf("reopen after the failure: %v", err)
			}
			defer ps2.Close()
			lost := 0
			for _, sid := range sids {
				got := storedIDs(t, ps2, sid)
				pos := map[string]int{}
				for k, id := range got {
					pos[id] = k
				}
				last := -1
				for _, id := range acked[sid] {
					k, ok := pos[id]
					if !ok {
						lost++
						t.Errorf("session %s: acknowledged %s is not in the history after restart", sid, id)
						continue
					}
					if k < last {
						t.Errorf("session %s: %s out of order", sid, id)
					}
					last = k
				}
				for _, id := range got {
					if !strings.HasPrefix(id, "start-") && !strings.HasPrefix(id, sid[:8]) {
						t.Errorf("session %s: %s was never sent", sid, id)
					}
				}
			}
			n := 0
			for _, ids := range acked {
				n += len(ids)
			}
			t.Logf("%s: %d acknowledged, %d refused, %d lost after restart", tc.name, n, nacks.Load(), lost)
		})
	}
}
