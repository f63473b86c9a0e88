package admin_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/admin"
	"github.com/macpd/macpd/internal/config"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// serve starts an admin Server for cfg on 127.0.0.1:0 and returns its base
// URL; the server is shut down when the test ends.
func serve(t *testing.T, cfg config.Config, reg *prometheus.Registry) (string, *admin.Server) {
	t.Helper()
	s := admin.New(cfg, reg, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve after Shutdown: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), s
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestRoutes(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "admin_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	base, _ := serve(t, config.Config{}, reg)

	code, body := get(t, base+"/healthz")
	if code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	code, body = get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	for _, s := range []string{"\nadmin_test_total 3\n", "\ngo_goroutines ", "promhttp_metric_handler_requests_total"} {
		if !strings.Contains(body, s) {
			t.Errorf("/metrics lacks %q:\n%s", s, body)
		}
	}
	// Off by default: the profiler is not mounted, and nothing else is.
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap", "/", "/debug/vars"} {
		if code, _ := get(t, base+p); code != http.StatusNotFound {
			t.Errorf("%s with AdminPprof off: %d, want 404", p, code)
		}
	}
	resp, err := http.Post(base+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d", resp.StatusCode)
	}
}

func TestPprofWhenEnabled(t *testing.T) {
	base, _ := serve(t, config.Config{AdminPprof: true}, prometheus.NewRegistry())
	for p, want := range map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/cmdline":           "",
		"/debug/pprof/goroutine?debug=1": "goroutine profile:",
		"/debug/pprof/heap?debug=1":      "heap profile:",
	} {
		code, body := get(t, base+p)
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("%s: %d, want 200 containing %q", p, code, want)
		}
	}
	if code, _ := get(t, base+"/debug/pprof/symbol"); code != http.StatusOK {
		t.Errorf("/debug/pprof/symbol: %d", code)
	}
	// A CPU profile goes through the server's timeouts.
	code, body := get(t, base+"/debug/pprof/profile?seconds=1")
	if code != http.StatusOK || len(body) == 0 {
		t.Errorf("/debug/pprof/profile?seconds=1: %d, %d bytes", code, len(body))
	}
}

func TestShutdown(t *testing.T) {
	s := admin.New(config.Config{}, prometheus.NewRegistry(), nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	url := "http://" + ln.Addr().String() + "/healthz"
	if code, _ := get(t, url); code != http.StatusOK {
		t.Fatalf("healthz %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Shutdown")
	}
	if _, err := http.Get(url); err == nil {
		t.Fatal("still serving after Shutdown")
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[net.Addr]bool{
		&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 9090}: true,
		&net.TCPAddr{IP: net.ParseIP("127.5.0.1"), Port: 9090}: true,
		&net.TCPAddr{IP: net.IPv6loopback, Port: 9090}:         true,
		&net.TCPAddr{IP: net.IPv4zero, Port: 9090}:             false, // all interfaces
		&net.TCPAddr{IP: net.IPv6unspecified, Port: 9090}:      false,
		&net.TCPAddr{IP: net.ParseIP("10.0.0.5"), Port: 9090}:  false,
		&net.TCPAddr{Port: 9090}:                               false,
		&net.UnixAddr{Name: "/tmp/x", Net: "unix"}:             false,
	} {
		if got := admin.Loopback(addr); got != want {
			t.Errorf("Loopback(%v) = %v, want %v", addr, got, want)
		}
	}
}
