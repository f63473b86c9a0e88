package server

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/macpd/macpd/internal/limits"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// connGuard bounds what idle connections can hold (docs/security.md
// "Limits"): at most maxPerAddr connections from one IP address and
// maxPer64 from one IPv6 /64 (more are closed as soon as they are
// accepted), and a connection that has not made an authenticated call is
// closed firstCall after it was accepted or after its last call ended,
// whichever is later (an unauthenticated Initialize does not buy it
// MACP_MAX_CONNECTION_IDLE_MS). Once a connection has made an
// authenticated call, gRPC's MaxConnectionIdle (counted from the end of
// its last call) applies instead. Without these, a few thousand
// connections that only send the HTTP/2 preface, or one anonymous call,
// fill MACP_MAX_CONNECTIONS and legitimate clients wait in the backlog.
//
// Calls are seen by the first interceptor of each chain (callStart), which
// finds the call's connection by the peer address gRPC took from it (the
// connection's own RemoteAddr value, also under TLS) while any accepted
// connection has not authenticated yet; once none is waiting, it costs an
// atomic load per call. Authentication (Service.authenticate) marks the
// connection. (A grpc stats.Handler would see the calls too, but with one
// installed gRPC builds a stats event, with its clock reads, for every
// message of every call: about 5% of the server's CPU when fanning out.)
type connGuard struct {
	firstCall time.Duration
	count     *limits.ConnCounter
	log       *limits.LogEvery

	mu     sync.Mutex
	byAddr map[net.Addr]*guardedConn // the connection's RemoteAddr value -> connection
	// waiting counts the accepted connections that have made no
	// authenticated call yet and are not closed (only with a first-call
	// deadline).
	waiting atomic.Int64

	refused, reaped atomic.Int64
}

func newConnGuard(l Limits, log *slog.Logger) *connGuard {
	return &connGuard{
		firstCall: l.FirstCallTimeout,
		count:     limits.NewConnCounter(l.MaxConnections, l.MaxConnectionsPerAddr, l.MaxConnectionsPerPrefix64),
		log:       limits.NewLogEvery(log, 10*time.Second),
		byAddr:    map[net.Addr]*guardedConn{},
	}
}

type guardedConn struct {
	net.Conn
	g       *connGuard
	release func()
	once    sync.Once

	authed atomic.Bool // made an authenticated call (or closed)

	tmu      sync.Mutex
	inflight int // calls in flight, while not authed
	timer    *time.Timer

	wmu     sync.Mutex
	windows map[*sendWindow]struct{} // stream windows of its calls (sendrelease.go)
	closed  bool                     // guarded by wmu
}

// addWindow ties sw to c: sw closes when c does (at once if it has).
func (c *guardedConn) addWindow(sw *sendWindow) {
	c.wmu.Lock()
	if c.closed {
		c.wmu.Unlock()
		sw.w.Close()
		return
	}
	if c.windows == nil {
		c.windows = map[*sendWindow]struct{}{}
	}
	c.windows[sw] = struct{}{}
	sw.conn = c
	c.wmu.Unlock()
}

// removeWindow unties sw (it closed).
func (c *guardedConn) removeWindow(sw *sendWindow) {
	c.wmu.Lock()
	delete(c.windows, sw)
	c.wmu.Unlock()
}

// closeWindows closes the windows of c's calls: nothing they handed to
// gRPC will be written any more, so their charges go back now.
func (c *guardedConn) closeWindows() {
	c.wmu.Lock()
	c.closed = true
	ws := c.windows
	c.windows = nil
	c.wmu.Unlock()
	for sw := range ws {
		sw.w.Close()
	}
}

func (c *guardedConn) Close() error {
	c.once.Do(func() {
		g := c.g
		g.mu.Lock()
		delete(g.byAddr, c.RemoteAddr())
		g.mu.Unlock()
		c.release()
		c.markAuthed() // no longer waiting: stops the timer
	})
	err := c.Conn.Close()
	c.closeWindows()
	return err
}

type guardListener struct {
	net.Listener
	g *connGuard
}

// Accept returns the next connection within the per-address and per-/64
// caps; others are closed here.
func (l *guardListener) Accept() (net.Conn, error) {
	g := l.g
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		release, refused := g.count.Acquire(c.RemoteAddr().String())
		if refused != limits.RefusedNone {
			g.refused.Add(1)
			g.log.Warn("grpc-refused-"+refused, "gRPC listener: connection refused at accept, a limit is reached (MACP_MAX_CONNECTIONS, MACP_MAX_CONNECTIONS_PER_ADDR, MACP_MAX_CONNECTIONS_PER_PREFIX64)",
				"limit", refused, "remote", c.RemoteAddr().String())
			_ = c.Close()
			continue
		}
		gc := &guardedConn{Conn: c, g: g, release: release}
		g.mu.Lock()
		g.byAddr[c.RemoteAddr()] = gc
		g.mu.Unlock()
		if g.firstCall > 0 {
			g.waiting.Add(1)
			gc.tmu.Lock()
			gc.armLocked()
			gc.tmu.Unlock()
		}
		return gc, nil
	}
}

// armLocked (re)starts c's deadline; the caller holds c.tmu.
func (c *guardedConn) armLocked() {
	g := c.g
	if c.timer != nil {
		c.timer.Reset(g.firstCall)
		return
	}
	c.timer = time.AfterFunc(g.firstCall, func() {
		c.tmu.Lock()
		reap := c.inflight == 0 && !c.authed.Load()
		c.tmu.Unlock()
		if reap {
			g.reaped.Add(1)
			g.log.Warn("grpc-first-call", "gRPC listener: closing a connection that made no authenticated call in time (MACP_FIRST_CALL_TIMEOUT_MS)",
				"remote", c.RemoteAddr().String(), "after", g.firstCall)
			_ = c.Close()
		}
	})
}

// markAuthed records that c made an authenticated call (or closed): its
// timer stops and it no longer counts as waiting. Only the first call
// changes anything.
func (c *guardedConn) markAuthed() {
	if c.authed.Swap(true) {
		return
	}
	c.tmu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.tmu.Unlock()
	if c.g.firstCall > 0 {
		c.g.waiting.Add(-1)
	}
}

// connOf returns the guarded connection of the call in ctx, if any.
func (g *connGuard) connOf(ctx context.Context) *guardedConn {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.byAddr[p.Addr]
}

// callStart notes a call of the connection in ctx while it has not
// authenticated (its deadline waits for the call to end); callEnd with
// the result restarts the deadline once no call is in flight.
func (g *connGuard) callStart(ctx context.Context) *guardedConn {
	if g.waiting.Load() == 0 {
		return nil
	}
	gc := g.connOf(ctx)
	if gc == nil || gc.authed.Load() {
		return nil
	}
	gc.tmu.Lock()
	gc.inflight++
	if gc.timer != nil {
		gc.timer.Stop()
	}
	gc.tmu.Unlock()
	return gc
}

func (g *connGuard) callEnd(gc *guardedConn) {
	if gc == nil {
		return
	}
	gc.tmu.Lock()
	defer gc.tmu.Unlock()
	gc.inflight--
	if gc.inflight == 0 && !gc.authed.Load() {
		gc.armLocked()
	}
}

// authenticated marks the connection of the call in ctx as having made
// an authenticated call (Service.authenticate).
func (g *connGuard) authenticated(ctx context.Context) {
	if g == nil || g.waiting.Load() == 0 {
		return
	}
	if gc := g.connOf(ctx); gc != nil {
		gc.markAuthed()
	}
}

// unarySeen and streamSeen are the first interceptors of their chains.
func (g *connGuard) unarySeen(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	defer g.callEnd(g.callStart(ctx))
	return h(ctx, req)
}

func (g *connGuard) streamSeen(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	defer g.callEnd(g.callStart(ss.Context()))
	return h(srv, ss)
}

// GuardListener applies the per-address and per-/64 connection caps and
// the first-call deadline (Limits.MaxConnectionsPerAddr,
// Limits.MaxConnectionsPerPrefix64, Limits.FirstCallTimeout) to l; the
// server from NewGRPCServer sees the calls it needs for the latter.
func (s *Service) GuardListener(l net.Listener) net.Listener {
	return &guardListener{Listener: l, g: s.guard}
}

// ConnGuardStats are the guard's counts since start: connections closed
// at accept for the per-address or per-/64 cap, and connections closed
// for making no authenticated call in time.
func (s *Service) ConnGuardStats() (refused, reaped int64) {
	return s.guard.refused.Load(), s.guard.reaped.Load()
}
