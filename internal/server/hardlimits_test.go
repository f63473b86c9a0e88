package server_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/config"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// docs/security.md "Limits" (checklist SEC-6): the extension-mode
// registry is bounded in descriptor size (PAYLOAD_TOO_LARGE), count
// (RATE_LIMITED) and total size, so ListExtModes stays under gRPC's
// default 4 MiB receive limit whatever clients registered.
func TestExtModeRegistryIsBounded(t *testing.T) {
	e := startApp(t, testConfig())
	def := config.DefaultLimits()
	big := extDescriptor()
	big.Mode = "ext.big.v1"
	big.Description = strings.Repeat("d", 1<<20)
	r, err := e.c.RegisterExtMode(as("admin"), &macpv1.RegisterExtModeRequest{ModeDescriptor: big})
	if err != nil || r.Ok || !strings.HasPrefix(r.Error, "PAYLOAD_TOO_LARGE") {
		t.Fatalf("1 MiB descriptor: %v %v, want PAYLOAD_TOO_LARGE", r, err)
	}
	// Count: up to MACP_MAX_EXT_MODES (built-in extension modes count
	// too), then RATE_LIMITED.
	start, err := e.c.ListExtModes(context.Background(), &macpv1.ListExtModesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range def.MaxExtModes - len(start.Modes) {
		d := extDescriptor()
		d.Mode = fmt.Sprintf("ext.small%d.v1", i)
		if r, err := e.c.RegisterExtMode(as("admin"), &macpv1.RegisterExtModeRequest{ModeDescriptor: d}); err != nil || !r.Ok {
			t.Fatalf("registration %d: %v %v", i, r, err)
		}
	}
	d := extDescriptor()
	d.Mode = "ext.one.more.v1"
	r, err = e.c.RegisterExtMode(as("admin"), &macpv1.RegisterExtModeRequest{ModeDescriptor: d})
	if err != nil || r.Ok || !strings.HasPrefix(r.Error, "RATE_LIMITED") {
		t.Fatalf("registration past MACP_MAX_EXT_MODES: %v %v, want RATE_LIMITED", r, err)
	}
	// Total size: descriptors just under the size limit are refused once
	// they would take 2 MiB together, before the count is reached.
	e = startApp(t, testConfig())
	accepted := 0
	for i := range def.MaxExtModes {
		d := extDescriptor()
		d.Mode = fmt.Sprintf("ext.n%d.v1", i)
		d.Description = strings.Repeat("d", def.MaxDescriptorBytes-1024)
		r, err := e.c.RegisterExtMode(as("admin"), &macpv1.RegisterExtModeRequest{ModeDescriptor: d})
		if err != nil {
			t.Fatal(err)
		}
		if r.Ok {
			accepted++
		} else if !strings.HasPrefix(r.Error, "RATE_LIMITED") {
			t.Fatalf("registration %d: %v", i, r.Error)
		}
	}
	if accepted == 0 || accepted >= def.MaxExtModes {
		t.Fatalf("%d large descriptors accepted: the total bound did not act", accepted)
	}
	// A client with gRPC's default receive limit still lists them.
	ext, err := e.c.ListExtModes(context.Background(), &macpv1.ListExtModesRequest{})
	if err != nil {
		t.Fatalf("ListExtModes with the default 4 MiB receive limit: %v", err)
	}
	if n := proto.Size(ext); n > 4<<20 {
		t.Fatalf("ListExtModes answer %d bytes", n)
	}
	t.Logf("%d extension modes, ListExtModes %d bytes", len(ext.Modes), proto.Size(ext))
}

// docs/security.md "Limits": policies are bounded like extension modes.
func TestPolicyRegistryIsBounded(t *testing.T) {
	e := startApp(t, testConfig())
	pd := &macpv1.PolicyDescriptor{PolicyId: "policy.big", Mode: "macp.mode.decision.v1", Rules: "{}", SchemaVersion: 1,
		Description: strings.Repeat("d", 1<<20)}
	r, err := e.c.RegisterPolicy(as("admin"), &macpv1.RegisterPolicyRequest{PolicyDescriptor: pd})
	if err == nil && r.GetOk() {
		t.Fatalf("1 MiB policy descriptor accepted")
	}
	if err == nil && !strings.Contains(r.GetError(), "PAYLOAD_TOO_LARGE") {
		t.Fatalf("1 MiB policy descriptor: %v, want PAYLOAD_TOO_LARGE", r)
	}
	if err != nil && !strings.Contains(err.Error(), "PAYLOAD_TOO_LARGE") {
		t.Fatalf("1 MiB policy descriptor: %v, want PAYLOAD_TOO_LARGE", err)
	}
}

// docs/security.md "Limits": by default an identity may have 100 OPEN
// sessions it initiated (MACP_MAX_OPEN_SESSIONS); the next start is
// RATE_LIMITED, another identity is not affected.
func TestOpenSessionsPerIdentityCappedByDefault(t *testing.T) {
	cfg := testConfig()
	cfg.MaxOpenSessions = config.Default().MaxOpenSessions
	if cfg.MaxOpenSessions != 100 {
		t.Fatalf("default MACP_MAX_OPEN_SESSIONS %d, want 100", cfg.MaxOpenSessions)
	}
	e := startApp(t, cfg)
	for range 100 {
		e.startSession(t, "alice", "alice", "bob")
	}
	sid := uuid.NewString()
	wantNack(t, e.send(t, "alice", envelope(sid, "SessionStart", "start-"+sid, startPayload(t, "alice", "bob"))), "RATE_LIMITED")
	e.startSession(t, "bob", "alice", "bob")
}

// raiseNoFile raises the soft open-file limit to at least n.
func raiseNoFile(t *testing.T, n uint64) {
	t.Helper()
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	if l.Cur >= n {
		return
	}
	l.Cur = min(max(n, l.Cur), l.Max)
	if l.Max < n {
		l.Max, l.Cur = n, n // needs privilege; fails loudly below otherwise
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatalf("raising RLIMIT_NOFILE to %d: %v (this test needs %d descriptors)", n, err, n)
	}
}

// Connection exhaustion (docs/security.md "Limits"): 4,200 TCP connections
// that only send the HTTP/2 preface, from 66 addresses (127.0.1.x, at
// most MACP_MAX_CONNECTIONS_PER_ADDR from each; the rest are closed at
// accept) fill the 4,096-connection cap; a legitimate client is still
// served, because connections that start no call are closed after
// MACP_FIRST_CALL_TIMEOUT_MS. The test shortens that timeout to 2 s; the
// client's own deadline is 60 s.
func TestIdleConnectionsDoNotLockOutClients(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 4,200 connections")
	}
	raiseNoFile(t, 12000)
	cfg := testConfig()
	cfg.Limits.FirstCallTimeout = 2 * time.Second
	e := startApp(t, cfg)
	addr := e.app.Addr()
	perAddr := cfg.Limits.MaxConnectionsPerAddr
	const idle = 4200
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; len(conns) < idle; i++ {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+i/perAddr))}
		d := net.Dialer{LocalAddr: src, Timeout: 10 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("idle connection %d: %v", len(conns), err)
		}
		if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
			t.Fatalf("preface %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	// One more from a full address is closed at once.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, 1)}}
	if c, err := d.Dial("tcp", addr); err == nil {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			// the server's SETTINGS: it was accepted; it must be closed soon
			for {
				if _, err := c.Read(make([]byte, 4096)); err != nil {
					break
				}
			}
		}
		c.Close()
	}
	// The legitimate client, from its own address.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(as("alice"), 60*time.Second)
	defer cancel()
	if _, err := macpv1.NewMACPRuntimeServiceClient(conn).ListModes(ctx, &macpv1.ListModesRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("legitimate client not served with %d idle connections open: %v", idle, err)
	}
	refused, reaped := e.app.Service().ConnGuardStats()
	t.Logf("idle connections: %d refused at accept (per-address cap), %d closed for making no call", refused, reaped)
	if reaped == 0 && refused == 0 {
		t.Fatal("neither guard acted: the test did not exhaust the connection cap")
	}
}

// docs/security.md "Limits": at most MACP_MAX_CONNECTIONS_PER_ADDR
// connections from one IP address; the next is closed when accepted,
// while other addresses are served.
func TestConnectionsPerAddressCapped(t *testing.T) {
	cfg := testConfig()
	cfg.Limits.MaxConnectionsPerAddr = 3
	cfg.Limits.FirstCallTimeout = 0
	e := startApp(t, cfg)
	dial := func(ip net.IP) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", e.app.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_, _ = c.Write([]byte(http2.ClientPreface))
		return c
	}
	// settings reports whether the server answers with its SETTINGS (it
	// accepted the connection) or closes it.
	settings := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		fr := http2.NewFramer(c, c)
		f, err := fr.ReadFrame()
		return err == nil && f.Header().Type == http2.FrameSettings
	}
	src := net.IPv4(127, 0, 2, 1)
	for i := range 3 {
		if !settings(dial(src)) {
			t.Fatalf("connection %d within the cap was not served", i+1)
		}
	}
	if settings(dial(src)) {
		t.Fatal("a fourth connection from the same address was served")
	}
	if !settings(dial(net.IPv4(127, 0, 2, 2))) {
		t.Fatal("another address was refused")
	}
	if refused, _ := e.app.Service().ConnGuardStats(); refused != 1 {
		t.Fatalf("%d connections refused, want 1", refused)
	}
}
