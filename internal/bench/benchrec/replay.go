package benchrec

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/macpd/macpd/internal/replay"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// ReplayResult is one offline pass over a data directory.
type ReplayResult struct {
	Sessions     int   `json:"sessions"`
	OpenSessions int   `json:"open_sessions"`
	Records      int64 `json:"records"`
	Envelopes    int64 `json:"envelopes"`
	// ListSeconds lists every session's summary (what boot does first).
	ListSeconds float64 `json:"list_s"`
	// ReadSeconds reads every record with the chain checked (the store
	// alone, after an untimed pass that warms the caches); ReplaySeconds
	// reads again and replays every session through
	// the core (Restore, Reserve, Apply), as recovery and verify do.
	ReadSeconds   float64 `json:"read_s"`
	ReplaySeconds float64 `json:"replay_s"`
	// Envelopes per second of each pass, and of the core alone (the
	// difference of the two passes).
	ReadEnvelopesPerSec   float64 `json:"read_envelopes_per_s"`
	ReplayEnvelopesPerSec float64 `json:"replay_envelopes_per_s"`
	CoreEnvelopesPerSec   float64 `json:"core_envelopes_per_s"`
	// OpenHeapBytes is the Go heap the OPEN sessions hold once replayed
	// (live heap after a GC, store closed, minus the same before opening
	// it): what recovery keeps resident. OpenHeapPerSession divides it.
	OpenHeapBytes      uint64  `json:"open_heap_bytes"`
	OpenHeapPerSession float64 `json:"open_heap_per_session"`
}

// Replay reads and replays every session of dir in-process (the store
// opened read-only: macpd must not be running on it).
func Replay(ctx context.Context, dir string) (*ReplayResult, error) {
	base := liveHeap()
	st, err := pebblestore.Open(dir, pebblestore.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	res := &ReplayResult{}
	t0 := time.Now()
	var infos []store.SessionInfo
	if err := st.List(ctx, func(info store.SessionInfo) error {
		if info.Quarantined != "" {
			return fmt.Errorf("benchrec: session %s is quarantined: %s", info.SessionID, info.Quarantined)
		}
		infos = append(infos, info)
		return nil
	}); err != nil {
		return nil, err
	}
	res.ListSeconds = time.Since(t0).Seconds()
	res.Sessions = len(infos)

	// Pass 1: the store alone, twice: the first warms the caches (the OS
	// page cache, Pebble's block cache) for both timed passes.
	for pass := range 2 {
		res.Records, res.Envelopes = 0, 0
		t0 = time.Now()
		for _, info := range infos {
			if err := st.Read(ctx, info.SessionID, 1, func(rec session.Record) error {
				res.Records++
				if rec.Envelope != nil {
					res.Envelopes++
				}
				return nil
			}); err != nil {
				return nil, err
			}
		}
		if pass == 1 {
			res.ReadSeconds = time.Since(t0).Seconds()
		}
	}

	// Pass 2: read and replay; keep the open sessions, as boot does.
	modes := Modes()
	lim := session.DefaultLimits()
	var open []*session.Session
	t0 = time.Now()
	for _, info := range infos {
		s, err := replay.Stored(ctx, st, info.SessionID, replay.Options{Modes: modes, Limits: lim, Records: info.LastSeq})
		if err != nil {
			return nil, fmt.Errorf("benchrec: replaying %s: %w", info.SessionID, err)
		}
		if s.Status != info.Status {
			return nil, fmt.Errorf("benchrec: session %s replays to %s, stored %s", info.SessionID, s.Status, info.Status)
		}
		if s.Status == session.Open {
			open = append(open, s)
		}
	}
	res.ReplaySeconds = time.Since(t0).Seconds()
	res.OpenSessions = len(open)
	if err := st.Close(); err != nil {
		return nil, err
	}
	if held := liveHeap(); held > base {
		res.OpenHeapBytes = held - base
	}
	runtime.KeepAlive(open)
	if len(open) > 0 {
		res.OpenHeapPerSession = float64(res.OpenHeapBytes) / float64(len(open))
	}
	e := float64(res.Envelopes)
	res.ReadEnvelopesPerSec = e / res.ReadSeconds
	res.ReplayEnvelopesPerSec = e / res.ReplaySeconds
	if core := res.ReplaySeconds - res.ReadSeconds; core > 0 {
		res.CoreEnvelopesPerSec = e / core
	}
	return res, nil
}

// liveHeap is the live Go heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
