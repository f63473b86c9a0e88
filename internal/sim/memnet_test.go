package sim

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// An in-memory network for the HTTP listener (attach_test.go): the real
// httpapi handler served by net/http over connections that are byte
// buffers, so nothing touches the kernel and a client can stall.
//
// A connection is two half-duplex buffers of memBufCap bytes. A write
// waits while its buffer is full (the client's "socket buffer" is small,
// so a client that does not read backs the server's writer up within a
// few messages); a read waits while its buffer is empty or, on the
// client's side, while the client is stalled: a stalled client takes no
// byte, whatever is buffered, and does not see the server close the
// connection either (an SSE response that ended) until it reads again,
// so what it received is exactly what it had taken when the stall
// began. Deadlines in the future are ignored (no
// wall-clock timeout may decide anything); a read deadline in the past
// wakes a waiting read with a timeout, which net/http needs to hijack a
// connection (it aborts its background read that way).

const memBufCap = 2048

type memBuf struct {
	mu      sync.Mutex
	limit   int // capacity: memBufCap unless set smaller
	cond    *sync.Cond
	b       []byte
	closed  bool // no more writes: the reader takes what is buffered, then EOF
	gone    bool // the reader's own end closed: its reads fail at once
	stalled bool // the reader takes nothing, not even a close (client side only)
	expired bool // a read deadline in the past
}

func newMemBuf() *memBuf {
	m := &memBuf{limit: memBufCap}
	m.cond = sync.NewCond(&m.mu)
	return m
}

func (m *memBuf) write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for n < len(p) {
		for len(m.b) >= m.limit && !m.closed {
			m.cond.Wait()
		}
		if m.closed {
			return n, net.ErrClosed
		}
		k := min(len(p)-n, m.limit-len(m.b))
		m.b = append(m.b, p[n:n+k]...)
		n += k
		m.cond.Broadcast()
	}
	return n, nil
}

func (m *memBuf) read(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for !m.gone && !m.expired && (m.stalled || len(m.b) == 0 && !m.closed) {
		m.cond.Wait()
	}
	switch {
	case m.gone:
		return 0, net.ErrClosed
	case m.expired:
		return 0, os.ErrDeadlineExceeded
	case len(m.b) == 0:
		return 0, io.EOF // the peer closed and everything was taken
	}
	n := copy(p, m.b)
	m.b = m.b[n:]
	if len(m.b) == 0 {
		m.b = nil
	}
	m.cond.Broadcast()
	return n, nil
}

func (m *memBuf) set(f func(m *memBuf)) {
	m.mu.Lock()
	f(m)
	m.cond.Broadcast()
	m.mu.Unlock()
}

// memConn is one end of a connection: it reads rx and writes tx.
type memConn struct {
	rx, tx *memBuf
	local  memAddr
	remote memAddr
}

type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

func (c *memConn) Read(p []byte) (int, error)  { return c.rx.read(p) }
func (c *memConn) Write(p []byte) (int, error) { return c.tx.write(p) }
func (c *memConn) LocalAddr() net.Addr         { return c.local }
func (c *memConn) RemoteAddr() net.Addr        { return c.remote }

// Close closes both directions (the peer reads EOF once it took what was
// buffered, after a stall if it is stalled, and its writes fail).
func (c *memConn) Close() error {
	c.rx.set(func(m *memBuf) { m.closed, m.gone = true, true })
	c.tx.set(func(m *memBuf) { m.closed = true })
	return nil
}

func (c *memConn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }
func (c *memConn) SetReadDeadline(t time.Time) error {
	c.rx.set(func(m *memBuf) { m.expired = !t.IsZero() && !t.After(time.Now()) })
	return nil
}
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// stall stops (or lets go on) this end's reading.
func (c *memConn) stall(on bool) { c.rx.set(func(m *memBuf) { m.stalled = on }) }

// memListener accepts the server ends of the connections dial makes.
type memListener struct {
	mu     sync.Mutex
	ch     chan net.Conn
	closed chan struct{}
	conns  []*memConn // server ends, closed with the listener
	n      int
}

func newMemListener() *memListener {
	return &memListener{ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes every connection's server end.
func (l *memListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.closed:
		return nil
	default:
	}
	close(l.closed)
	for _, c := range l.conns {
		_ = c.Close()
	}
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr("sim:80") }

// dial is the client transport's DialContext: it returns the client end.
func (l *memListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	up, down := newMemBuf(), newMemBuf()
	l.mu.Lock()
	l.n++
	client := &memConn{rx: down, tx: up, local: memAddr("client"), remote: "sim:80"}
	server := &memConn{rx: up, tx: down, local: "sim:80", remote: memAddr("client")}
	l.conns = append(l.conns, server)
	l.mu.Unlock()
	select {
	case l.ch <- server:
		return client, nil
	case <-l.closed:
		return nil, errors.New("listener closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
