package server

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// connGuard bounds what idle connections can hold (docs/security.md
// "Limits"): at most maxPerAddr connections from one IP address (more are
// closed as soon as they are accepted), and a connection that has not
// started a call within firstCall of being accepted is closed. Without
// them, a few thousand connections that only send the HTTP/2 preface fill
// MACP_MAX_CONNECTIONS and legitimate clients wait in the backlog until
// MACP_MAX_CONNECTION_IDLE_MS reaps them.
//
// Calls are seen by the first interceptor of each chain (callSeen), which
// finds the call's connection by the peer address gRPC took from it (the
// connection's own RemoteAddr value, also under TLS) while any accepted
// connection has not called yet; once none is waiting, it costs an atomic
// load per call. (A grpc stats.Handler would see the calls too, but with
// one installed gRPC builds a stats event, with its clock reads, for every
// message of every call: about 5% of the server's CPU when fanning out.)
type connGuard struct {
	maxPerAddr int
	firstCall  time.Duration

	mu     sync.Mutex
	perIP  map[string]int
	byAddr map[net.Addr]*guardedConn // the connection's RemoteAddr value -> connection
	// waiting counts the accepted connections that have made no call
	// yet and are not closed (only with a first-call deadline).
	waiting atomic.Int64

	refused, reaped atomic.Int64
}

func newConnGuard(maxPerAddr int, firstCall time.Duration) *connGuard {
	return &connGuard{maxPerAddr: maxPerAddr, firstCall: firstCall, perIP: map[string]int{}, byAddr: map[net.Addr]*guardedConn{}}
}

type guardedConn struct {
	net.Conn
	g      *connGuard
	ip     string
	called atomic.Bool
	timer  atomic.Pointer[time.Timer]
	once   sync.Once

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
		if g.perIP[c.ip]--; g.perIP[c.ip] <= 0 {
			delete(g.perIP, c.ip)
		}
		delete(g.byAddr, c.RemoteAddr())
		g.mu.Unlock()
		c.markCalled() // no longer waiting: stops the first-call timer
	})
	err := c.Conn.Close()
	c.closeWindows()
	return err
}

type guardListener struct {
	net.Listener
	g *connGuard
}

// Accept returns the next connection within the per-address cap; others
// are closed here.
func (l *guardListener) Accept() (net.Conn, error) {
	g := l.g
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := c.RemoteAddr().String()
		if h, _, err := net.SplitHostPort(ip); err == nil {
			ip = h
		}
		g.mu.Lock()
		if g.maxPerAddr > 0 && g.perIP[ip] >= g.maxPerAddr {
			g.mu.Unlock()
			g.refused.Add(1)
			_ = c.Close()
			continue
		}
		g.perIP[ip]++
		gc := &guardedConn{Conn: c, g: g, ip: ip}
		g.byAddr[c.RemoteAddr()] = gc
		g.mu.Unlock()
		if g.firstCall > 0 {
			g.waiting.Add(1)
			gc.timer.Store(time.AfterFunc(g.firstCall, func() {
				if !gc.called.Load() {
					g.reaped.Add(1)
					_ = gc.Close()
				}
			}))
		}
		return gc, nil
	}
}

// markCalled records that c made a call (or closed): its first-call
// timer stops and it no longer counts as waiting. Only the first call
// changes anything.
func (c *guardedConn) markCalled() {
	if c.called.Swap(true) {
		return
	}
	if tm := c.timer.Load(); tm != nil {
		tm.Stop()
	}
	if c.g.firstCall > 0 {
		c.g.waiting.Add(-1)
	}
}

// callSeen marks the connection of the call in ctx as having called, while
// any connection is waiting for its first call.
func (g *connGuard) callSeen(ctx context.Context) {
	if g.waiting.Load() == 0 {
		return
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return
	}
	g.mu.Lock()
	gc := g.byAddr[p.Addr]
	g.mu.Unlock()
	if gc != nil {
		gc.markCalled()
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

// unarySeen and streamSeen are the first interceptors of their chains.
func (g *connGuard) unarySeen(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	g.callSeen(ctx)
	return h(ctx, req)
}

func (g *connGuard) streamSeen(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	g.callSeen(ss.Context())
	return h(srv, ss)
}

// GuardListener applies the per-address connection cap and the first-call
// deadline (Limits.MaxConnectionsPerAddr, Limits.FirstCallTimeout) to l;
// the server from NewGRPCServer sees the calls it needs for the latter.
func (s *Service) GuardListener(l net.Listener) net.Listener {
	return &guardListener{Listener: l, g: s.guard}
}

// ConnGuardStats are the guard's counts since start: connections closed
// at accept for the per-address cap, and connections closed for making no
// call in time.
func (s *Service) ConnGuardStats() (refused, reaped int64) {
	return s.guard.refused.Load(), s.guard.reaped.Load()
}
