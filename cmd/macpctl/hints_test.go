package main

import (
	"net"
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/clikit"
	"github.com/macpd/macpd/internal/config"
)

// issue 28: pointed at macpd's HTTP port, macpctl says so and names the
// fix (the gRPC address), not "may require TLS".
func TestHintHTTPPort(t *testing.T) {
	a := startApp(t, func(cfg *config.Config) { cfg.HTTP.Addr = "127.0.0.1:0" })
	r := runner{t, nil}
	res := r.run("init", "--addr", a.HTTPAddr(), "--insecure", "--timeout", "5s")
	if res.code != clikit.ExitRejected || !strings.Contains(res.errOut, "hint: "+a.HTTPAddr()+" is macpd's HTTP port") ||
		!strings.Contains(res.errOut, "use the gRPC address") || strings.Contains(res.errOut, "may require TLS") {
		t.Fatalf("macpctl --addr HTTP_PORT: %+v", res)
	}
}

// issue 28: an address without a port means port 50051 (the default
// gRPC port), not 443.
func TestAddrWithoutPort(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"localhost", "localhost:50051"},
		{"10.0.0.7", "10.0.0.7:50051"},
		{"::1", "[::1]:50051"},
		{"[::1]", "[::1]:50051"},
		{"localhost:7000", "localhost:7000"},
		{"[::1]:7000", "[::1]:7000"},
		{"dns:///macpd.internal:50051", "dns:///macpd.internal:50051"},
		{"unix:///run/macpd.sock", "unix:///run/macpd.sock"},
	} {
		if got := clikit.DialAddr(tc.in); got != tc.want {
			t.Errorf("DialAddr(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// End to end: "127.0.0.1" reaches a runtime listening on
	// 127.0.0.1:50051 when that port is free to take here.
	l, err := net.Listen("tcp", "127.0.0.1:50051")
	if err != nil {
		t.Logf("port 50051 is taken (%v): the end-to-end half is checked with the error's address instead", err)
		res := runner{t, nil}.run("init", "--addr", "127.0.0.1", "--insecure", "--timeout", "2s")
		if strings.Contains(res.errOut, ":443") {
			t.Fatalf("--addr 127.0.0.1 dialed :443: %+v", res)
		}
		return
	}
	l.Close()
	a := startApp(t, func(cfg *config.Config) { cfg.BindAddr = "127.0.0.1:50051" })
	res := runner{t, nil}.run("init", "--addr", "127.0.0.1", "--insecure", "--agent", "coord")
	if res.code != clikit.ExitOK {
		t.Fatalf("--addr 127.0.0.1 with macpd on %s: %+v", a.Addr(), res)
	}
}
