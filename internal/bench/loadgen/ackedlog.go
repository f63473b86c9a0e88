package loadgen

import (
	"bufio"
	"io"
	"strconv"
	"sync"
	"time"
)

// AckedLog writes one line per acknowledged envelope:
//
//	session_id<TAB>message_id<TAB>stream<TAB>message_type
//
// stream numbers the sequential sender stream within the session that sent
// it (0 when a session has one sender); within one (session, stream) the
// lines are in the order the sends happened, and each send started after
// the previous line's Ack arrived, so their history order must be the same.
// Lines of different streams of one session may interleave in any order.
//
// Lines are buffered and flushed at least every flush interval and at
// Close; a line is only ever written for an ok Ack.
type AckedLog struct {
	mu   sync.Mutex
	w    *bufio.Writer
	err  error
	done chan struct{}
	wg   sync.WaitGroup
}

// NewAckedLog starts a log on w flushed every interval (default 100ms).
func NewAckedLog(w io.Writer, interval time.Duration) *AckedLog {
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	l := &AckedLog{w: bufio.NewWriterSize(w, 64<<10), done: make(chan struct{})}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				l.Flush()
			case <-l.done:
				return
			}
		}
	}()
	return l
}

// Record appends a line.
func (l *AckedLog) Record(sessionID, messageID string, stream int, messageType string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	b := l.w.AvailableBuffer()
	b = append(b, sessionID...)
	b = append(b, '\t')
	b = append(b, messageID...)
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(stream), 10)
	b = append(b, '\t')
	b = append(b, messageType...)
	b = append(b, '\n')
	_, l.err = l.w.Write(b)
}

// Flush writes the buffered lines out.
func (l *AckedLog) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = l.w.Flush()
	}
	return l.err
}

// Close stops the periodic flush and flushes; it returns the first write
// error.
func (l *AckedLog) Close() error {
	close(l.done)
	l.wg.Wait()
	return l.Flush()
}
