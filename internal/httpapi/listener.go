package httpapi

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/macpd/macpd/internal/limits"
)

// Connection limits of the HTTP listener (docs/security.md "Limits"),
// with the gRPC listener's strength:
//
//   - at most Options.MaxConnections connections in all, MaxConnectionsPerAddr
//     from one IP address and MaxConnectionsPerPrefix64 from one IPv6 /64;
//     a connection beyond any of them is closed as soon as it is accepted
//     (not queued: a full listener answers at once, and never holds up
//     other addresses' clients);
//   - a connection that has not started a request FirstRequestTimeout
//     after it was accepted is closed, and so is one that has made no
//     authenticated request once it has been idle for FirstRequestTimeout
//     (an authenticated one keeps IdleTimeout);
//   - a request body must arrive within BodyTimeout of the request's
//     headers (also the body the server discards after answering early,
//     such as a 401).
//
// Every refusal and reaping is counted (ListenerStats) and logged at most
// once per interval per kind.

// connKey is the request context key of the request's *limitedConn.
type connKey struct{}

// connLimiter is the listener's accounting.
type connLimiter struct {
	count        *limits.ConnCounter
	firstRequest time.Duration
	log          *limits.LogEvery

	refused, reaped atomic.Int64
}

// limitedConn is an accepted connection within the limits.
type limitedConn struct {
	net.Conn
	l       *connLimiter
	release func()
	once    sync.Once
	authed  atomic.Bool // made an authenticated request

	mu     sync.Mutex
	active bool // a request is being read or served
	closed bool
	timer  *time.Timer
}

func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		if c.timer != nil {
			c.timer.Stop()
		}
		c.mu.Unlock()
		c.release()
	})
	return c.Conn.Close()
}

// armLocked (re)starts the reaper: unless a request starts (or the
// connection authenticates) within d, the connection is closed.
func (c *limitedConn) armLocked(d time.Duration, why string) {
	if d <= 0 || c.closed {
		return
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timer = time.AfterFunc(d, func() {
		c.mu.Lock()
		idle := !c.active && !c.closed
		c.mu.Unlock()
		if idle && (why == "first-request" || !c.authed.Load()) {
			c.l.reaped.Add(1)
			c.l.log.Warn("http-"+why, "HTTP listener: closing a connection that made no request in time (first request, or no authenticated request since its last)",
				"remote", c.RemoteAddr().String(), "after", d)
			_ = c.Close()
		}
	})
}

// state follows the http.Server's view of the connection.
func (c *limitedConn) state(s http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch s {
	case http.StateActive:
		c.active = true
		if c.timer != nil {
			c.timer.Stop()
		}
	case http.StateIdle:
		c.active = false
		if !c.authed.Load() {
			c.armLocked(c.l.firstRequest, "anonymous-idle")
		}
	case http.StateHijacked, http.StateClosed:
		c.active = true // no longer the server's to reap
		if c.timer != nil {
			c.timer.Stop()
		}
	}
}

// limitListener refuses connections beyond the limits at accept.
type limitListener struct {
	net.Listener
	l *connLimiter
}

func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		release, refused := ll.l.count.Acquire(c.RemoteAddr().String())
		if refused != limits.RefusedNone {
			ll.l.refused.Add(1)
			ll.l.log.Warn("http-refused-"+refused, "HTTP listener: connection refused at accept, a limit is reached (MACP_MAX_CONNECTIONS, MACP_MAX_CONNECTIONS_PER_ADDR, MACP_MAX_CONNECTIONS_PER_PREFIX64)",
				"limit", refused, "remote", c.RemoteAddr().String())
			_ = c.Close()
			continue
		}
		lc := &limitedConn{Conn: c, l: ll.l, release: release}
		lc.mu.Lock()
		lc.armLocked(ll.l.firstRequest, "first-request")
		lc.mu.Unlock()
		return lc, nil
	}
}

// limitedOf returns the *limitedConn under c (the listener's, or under a
// TLS connection), nil if none.
func limitedOf(c net.Conn) *limitedConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, _ := c.(*limitedConn)
	return lc
}

// markAuthenticated records that r's connection made an authenticated
// request: from now on it keeps the listener's IdleTimeout.
func markAuthenticated(r *http.Request) {
	if lc, ok := r.Context().Value(connKey{}).(*limitedConn); ok && lc != nil {
		lc.authed.Store(true)
	}
}

// ListenerStats are the HTTP listener's counts since start: connections
// refused at accept for a limit, and connections closed for making no
// (authenticated) request in time.
func (s *Server) ListenerStats() (refused, reaped int64) {
	return s.conns.refused.Load(), s.conns.reaped.Load()
}

// bodyDeadline bounds reading a request's body by Options.BodyTimeout;
// the deadline is lifted once the body has been read to its end, so a
// handler that then runs long is not cut short.
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	d := s.opts.BodyTimeout
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d > 0 && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline at the body's end.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// connContext puts the request's *limitedConn in its context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc := limitedOf(c); lc != nil {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}
