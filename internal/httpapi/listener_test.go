package httpapi_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// rawConn dials the HTTP listener.
func rawConn(t *testing.T, e *env) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.a.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c within d (EOF or
// reset), as opposed to keeping it open (a read timeout).
func closedByServer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return !errors.Is(err, os.ErrDeadlineExceeded)
		}
	}
}

// request writes a GET of path (with agent's bearer token unless "") on c
// and reads the response.
func request(t *testing.T, c net.Conn, br *bufio.Reader, path, agent string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+c.RemoteAddr().String()+path, nil)
	if agent != "" {
		req.Header.Set("Authorization", "Bearer "+agent)
	}
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// docs/security.md "Limits" (issue 26 item 2): connections beyond the
// per-address cap or MACP_MAX_CONNECTIONS are closed when accepted, not
// queued behind the others.
func TestHTTPListenerRefusesBeyondCapsAtAccept(t *testing.T) {
	for _, c := range []struct {
		name            string
		total, per_addr int
	}{{"per-address", 0, 3}, {"total", 3, 0}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Limits.MaxConnections, cfg.Limits.MaxConnectionsPerAddr = c.total, c.per_addr
			e := startAppTLS(t, cfg)
			var held []net.Conn
			for range 3 {
				conn := rawConn(t, e)
				br := bufio.NewReader(conn)
				if resp := request(t, conn, br, "/.well-known/macp.json", ""); resp.StatusCode != http.StatusOK {
					t.Fatalf("discovery: %d", resp.StatusCode)
				}
				held = append(held, conn)
			}
			extra := rawConn(t, e)
			if !closedByServer(extra, 10*time.Second) {
				t.Fatal("a connection beyond the cap was held open (queued), not refused")
			}
			if refused, _ := e.a.HTTP().ListenerStats(); refused < 1 {
				t.Fatalf("refused %d", refused)
			}
			held[0].Close()
			// A slot is free again once the server has seen the close.
			deadline := time.Now().Add(10 * time.Second)
			for {
				conn := rawConn(t, e)
				_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
				if _, err := conn.Write([]byte("GET /.well-known/macp.json HTTP/1.1\r\nHost: " + e.a.HTTPAddr() + "\r\n\r\n")); err == nil {
					if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil && resp.StatusCode == http.StatusOK {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatal("no connection admitted after one closed")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// docs/security.md "Limits" (issue 26 item 2): a connection that sends no
// request within MACP_FIRST_CALL_TIMEOUT_MS is closed, and so is one that
// made only unauthenticated requests once it is idle that long; one that
// authenticated keeps the idle limit.
func TestHTTPListenerReapsAnonymousConnections(t *testing.T) {
	cfg := testConfig()
	cfg.Limits.FirstCallTimeout = 300 * time.Millisecond
	e := startAppTLS(t, cfg)
	silent := rawConn(t, e)
	anon := rawConn(t, e)
	anonR := bufio.NewReader(anon)
	authed := rawConn(t, e)
	authedR := bufio.NewReader(authed)
	if resp := request(t, anon, anonR, "/.well-known/macp.json", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("discovery: %d", resp.StatusCode)
	}
	if resp := request(t, authed, authedR, "/macp/sessions", "alice"); resp.StatusCode != http.StatusOK {
		t.Fatalf("authenticated list: %d", resp.StatusCode)
	}
	if !closedByServer(silent, 10*time.Second) {
		t.Fatal("a connection that sent no request was kept")
	}
	if !closedByServer(anon, 10*time.Second) {
		t.Fatal("a connection that made only an anonymous request was kept idle")
	}
	if closedByServer(authed, 3*cfg.Limits.FirstCallTimeout) {
		t.Fatal("an authenticated connection was closed by the first-request deadline")
	}
	if _, reaped := e.a.HTTP().ListenerStats(); reaped != 2 {
		t.Fatalf("reaped %d, want 2", reaped)
	}
}

// docs/security.md "Limits" (issue 26 item 2): a request body must arrive
// within MACP_HTTP_BODY_TIMEOUT_MS, also when the server answered before
// reading it (a 401 to an anonymous POST).
func TestHTTPListenerBodyDeadline(t *testing.T) {
	cfg := testConfig()
	cfg.HTTP.BodyTimeout = 300 * time.Millisecond
	cfg.Limits.FirstCallTimeout = time.Hour // only the body deadline acts
	e := startAppTLS(t, cfg)
	c := rawConn(t, e)
	if _, err := c.Write([]byte("POST /macp/envelope HTTP/1.1\r\nHost: " + e.a.HTTPAddr() + "\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous POST: %d", resp.StatusCode)
	}
	if !closedByServer(c, 10*time.Second) {
		t.Fatal("a connection trickling its body was held past the body deadline")
	}
}
