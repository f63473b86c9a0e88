package server

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// connGuard bounds what idle connections can hold (docs/security.md
// "Limits"): at most maxPerAddr connections from one IP address (more are
// closed as soon as they are accepted), and a connection that has not
// started a call within firstCall of being accepted is closed. Without
// them, a few thousand connections that only send the HTTP/2 preface fill
// MACP_MAX_CONNECTIONS and legitimate clients wait in the backlog until
// MACP_MAX_CONNECTION_IDLE_MS reaps them.
//
// Calls are seen through a grpc stats.Handler: its connection context
// carries the guarded connection (found by remote address), and the first
// call's begin marks it.
type connGuard struct {
	maxPerAddr int
	firstCall  time.Duration

	mu     sync.Mutex
	perIP  map[string]int
	byAddr map[string]*guardedConn // remote address -> connection

	refused, reaped atomic.Int64
}

func newConnGuard(maxPerAddr int, firstCall time.Duration) *connGuard {
	return &connGuard{maxPerAddr: maxPerAddr, firstCall: firstCall, perIP: map[string]int{}, byAddr: map[string]*guardedConn{}}
}

type guardedConn struct {
	net.Conn
	g      *connGuard
	ip     string
	called atomic.Bool
	timer  atomic.Pointer[time.Timer]
	once   sync.Once
}

func (c *guardedConn) Close() error {
	c.once.Do(func() {
		if tm := c.timer.Load(); tm != nil {
			tm.Stop()
		}
		g := c.g
		g.mu.Lock()
		if g.perIP[c.ip]--; g.perIP[c.ip] <= 0 {
			delete(g.perIP, c.ip)
		}
		delete(g.byAddr, c.RemoteAddr().String())
		g.mu.Unlock()
	})
	return c.Conn.Close()
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
		g.byAddr[c.RemoteAddr().String()] = gc
		g.mu.Unlock()
		if g.firstCall > 0 {
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

type guardConnKey struct{}

// TagConn implements stats.Handler: the connection's context carries it.
func (g *connGuard) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	if info == nil || info.RemoteAddr == nil {
		return ctx
	}
	g.mu.Lock()
	gc := g.byAddr[info.RemoteAddr.String()]
	g.mu.Unlock()
	if gc == nil {
		return ctx
	}
	return context.WithValue(ctx, guardConnKey{}, gc)
}

func (g *connGuard) HandleConn(context.Context, stats.ConnStats) {}

func (g *connGuard) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	if gc, ok := ctx.Value(guardConnKey{}).(*guardedConn); ok && !gc.called.Load() {
		gc.called.Store(true)
		if tm := gc.timer.Load(); tm != nil {
			tm.Stop()
		}
	}
	return ctx
}

func (g *connGuard) HandleRPC(context.Context, stats.RPCStats) {}

// GuardListener applies the per-address connection cap and the first-call
// deadline (Limits.MaxConnectionsPerAddr, Limits.FirstCallTimeout) to l;
// the server from NewGRPCServer sees the calls it needs for the latter.
func (s *Service) GuardListener(l net.Listener) net.Listener {
	return &guardListener{Listener: l, g: s.guard}
}

// guardOption is the server option that lets the guard see calls.
func (s *Service) guardOption() grpc.ServerOption { return grpc.StatsHandler(s.guard) }

// ConnGuardStats are the guard's counts since start: connections closed
// at accept for the per-address cap, and connections closed for making no
// call in time.
func (s *Service) ConnGuardStats() (refused, reaped int64) {
	return s.guard.refused.Load(), s.guard.reaped.Load()
}
