package snapshotio

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

// Writer writes a session's snapshot (default profile: payload under its
// content address, report under the session id) into a directory after
// the session ended. It runs on its own goroutine, fed by Enqueue, which
// never blocks: the acceptance path never waits for it. The queue is
// bounded; a session that does not fit is counted in Dropped and logged
// (its snapshot can still be had from the Service or macpctl).
type Writer struct {
	svc *Service
	dir string
	log *slog.Logger

	queue   chan string
	dropped atomic.Int64
	written atomic.Int64
	failed  atomic.Int64

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// WriterQueue is the Writer's queue length.
const WriterQueue = 4096

// NewWriter returns a Writer into dir; start it with Run.
func NewWriter(svc *Service, dir string, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Writer{svc: svc, dir: dir, log: log, queue: make(chan string, WriterQueue), stop: make(chan struct{}), done: make(chan struct{})}
}

// Enqueue asks for sessionID's snapshot; false if the queue is full.
func (w *Writer) Enqueue(sessionID string) bool {
	select {
	case w.queue <- sessionID:
		return true
	default:
		if w.dropped.Add(1) == 1 || w.dropped.Load()%1000 == 0 {
			w.log.Warn("snapshot writer queue full; snapshots skipped", "dropped", w.dropped.Load())
		}
		return false
	}
}

// Run writes queued snapshots until Close (then it drains what is queued)
// or ctx ends.
func (w *Writer) Run(ctx context.Context) {
	defer close(w.done)
	for {
		select {
		case id := <-w.queue:
			w.write(ctx, id)
		case <-ctx.Done():
			return
		case <-w.stop:
			for {
				select {
				case id := <-w.queue:
					w.write(ctx, id)
				default:
					return
				}
			}
		}
	}
}

func (w *Writer) write(ctx context.Context, id string) {
	sealed, err := w.svc.Snapshot(ctx, id, Query{})
	if err == nil {
		err = WriteFiles(w.dir, id, sealed)
	}
	if err != nil {
		w.failed.Add(1)
		w.log.Warn("snapshot not written", "session_id", id, "err", err)
		return
	}
	w.written.Add(1)
}

// Close stops Run after the queue is drained and waits for it; Run must
// have been started.
func (w *Writer) Close() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

// Stats returns how many snapshots were written, failed and dropped.
func (w *Writer) Stats() (written, failed, dropped int64) {
	return w.written.Load(), w.failed.Load(), w.dropped.Load()
}
