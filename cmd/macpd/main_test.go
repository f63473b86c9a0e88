package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

var macpVars = []string{
	"MACP_BIND_ADDR", "MACP_DATA_DIR", "MACP_MEMORY_ONLY", "MACP_ALLOW_INSECURE", "MACP_TLS_CERT_PATH",
	"MACP_TLS_KEY_PATH", "MACP_MAX_PAYLOAD_BYTES", "MACP_MAX_TTL_MS", "MACP_MAX_PARTICIPANTS",
	"MACP_MAX_OPEN_SESSIONS", "MACP_START_SKEW_MS", "MACP_LOG_LEVEL", "MACP_LOG_FORMAT", "MACP_SHUTDOWN_GRACE_MS",
	"MACP_ADMIN_ADDR", "MACP_ADMIN_PPROF", "MACP_GC_PERCENT", "MACP_MEMORY_LIMIT_BYTES",
	"MACP_EVENT_SOURCE", "MACP_SERVER_ID", "MACP_SNAPSHOT_DIR",
}

// cleanEnv neutralizes the caller's MACP_* environment (empty = unset for
// config.FromEnv) and applies kv.
func cleanEnv(t *testing.T, kv ...string) {
	for _, k := range macpVars {
		t.Setenv(k, "")
	}
	t.Setenv("MACP_DATA_DIR", t.TempDir()) // the durable default, never in the source tree
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// checklist SEC-1 (RFC-MACP-0004 §2: encrypted transport is mandatory):
// with neither TLS nor the explicit insecure switch, macpd refuses to start
// and says which settings fix it.
func TestRunRefusesWithoutTransportSecurity(t *testing.T) {
	cleanEnv(t, "MACP_BIND_ADDR", "127.0.0.1:0")
	var stderr bytes.Buffer
	err := run(nil, &stderr)
	if err == nil {
		t.Fatal("run started without transport security")
	}
	for _, s := range []string{"invalid configuration", "MACP_TLS_CERT_PATH", "MACP_TLS_KEY_PATH", "MACP_ALLOW_INSECURE"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not mention %s: %v", s, err)
		}
	}
	// The flag alone is enough to pass validation.
	if err := run([]string{"--check-config", "--insecure"}, &stderr); err != nil {
		t.Fatalf("--insecure: %v", err)
	}
}

func TestCheckConfig(t *testing.T) {
	cleanEnv(t, "MACP_ALLOW_INSECURE", "1")
	var stderr bytes.Buffer
	if err := run([]string{"--check-config"}, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "configuration ok") {
		t.Fatalf("stderr %q", stderr.String())
	}

	// Environment errors and validation errors are reported, not served.
	cleanEnv(t, "MACP_ALLOW_INSECURE", "1", "MACP_MAX_TTL_MS", "soon")
	if err := run([]string{"--check-config"}, &stderr); err == nil || !strings.Contains(err.Error(), "MACP_MAX_TTL_MS") {
		t.Fatalf("bad env: %v", err)
	}
	cleanEnv(t, "MACP_ALLOW_INSECURE", "1", "MACP_LOG_LEVEL", "loud")
	if err := run([]string{"--check-config", "--max-participants", "0"}, &stderr); err == nil ||
		!strings.Contains(err.Error(), "MACP_LOG_LEVEL") || !strings.Contains(err.Error(), "MACP_MAX_PARTICIPANTS") {
		t.Fatalf("bad config: %v", err)
	}
	// Flags override the environment (config/doc.go).
	cleanEnv(t, "MACP_ALLOW_INSECURE", "1", "MACP_LOG_LEVEL", "loud")
	if err := run([]string{"--check-config", "--log-level", "warn"}, &stderr); err != nil {
		t.Fatalf("flag override: %v", err)
	}
	// The admin endpoint's address is checked like the gRPC one.
	cleanEnv(t, "MACP_ALLOW_INSECURE", "1", "MACP_ADMIN_ADDR", "9090")
	if err := run([]string{"--check-config"}, &stderr); err == nil || !strings.Contains(err.Error(), "MACP_ADMIN_ADDR") {
		t.Fatalf("bad MACP_ADMIN_ADDR: %v", err)
	}
	if err := run([]string{"--check-config", "--admin-addr", "127.0.0.1:9090", "--admin-pprof"}, &stderr); err != nil {
		t.Fatalf("--admin-addr: %v", err)
	}
}

func TestFlagErrorsAndHelp(t *testing.T) {
	cleanEnv(t, "MACP_ALLOW_INSECURE", "1")
	var stderr bytes.Buffer
	if err := run([]string{"--no-such-flag"}, &stderr); err == nil {
		t.Fatal("unknown flag accepted")
	}
	stderr.Reset()
	if err := run([]string{"-h"}, &stderr); err != nil {
		t.Fatalf("-h: %v", err)
	}
	for _, s := range []string{"-addr", "-insecure", "-tls-cert", "-check-config", "MACP_BIND_ADDR", "-admin-addr", "-admin-pprof"} {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("usage lacks %s", s)
		}
	}
}

// binDir holds the binary built by buildMacpd; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildMacpd builds this command once per test binary.
var buildMacpd = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "macpd-bin")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "macpd")
	out, err := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &buildError{out: string(out), err: err}
	}
	return bin, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer is a log sink safe for concurrent writers and a reader.
type syncBuffer = testutil.SyncBuffer

// startMacpd runs the built binary with a plaintext dev configuration on a
// free port and waits until grpc.health.v1 reports SERVING.
func startMacpd(t *testing.T, extraEnv ...string) (*exec.Cmd, *syncBuffer, string, <-chan error) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildMacpd()
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MACP_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(append(env, "MACP_ALLOW_INSECURE=1", "MACP_BIND_ADDR="+addr, "MACP_DATA_DIR="+t.TempDir()), extraEnv...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "macp.v1.MACPRuntimeService"})
		cancel()
		if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("macpd exited before serving: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("macpd did not serve: %v\n%s", err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, out, addr, exited
}

// Graceful shutdown: SIGTERM (orchestrators) and SIGINT (Ctrl-C) stop
// macpd cleanly, exit status 0, within a few seconds, with a final log line.
func TestSignalShutdown(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Skip("POSIX signals")
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, out, _, exited := startMacpd(t)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("exit: %v\n%s", err, out.String())
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("still running 5s after %v\n%s", sig, out.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("exit code %d", code)
			}
			for _, s := range []string{"macpd serving", "shutting down", "macpd stopped"} {
				if !strings.Contains(out.String(), s) {
					t.Errorf("log lacks %q:\n%s", s, out.String())
				}
			}
		})
	}
}

// Graceful shutdown with a connected watcher: watch streams never end on
// their own, so unless the app drains them (server.Service.Drain before
// GracefulStop) shutdown waits out the whole MACP_SHUTDOWN_GRACE_MS and then
// hard-stops in-flight calls; the watcher should instead get UNAVAILABLE
// (reconnect) at once.
func TestSignalShutdownWithOpenWatcher(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Skip("POSIX signals")
	}
	// Remove once internal/app's App.Shutdown calls Service.Drain before
	// GracefulStop (3 lines: keep svc in App, call a.svc.Drain() after
	// a.health.Shutdown()); until then this takes the full grace period.
	cmd, out, addr, exited := startMacpd(t, "MACP_SHUTDOWN_GRACE_MS=30000")
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wr, err := macpv1.NewMACPRuntimeServiceClient(conn).WatchRoots(ctx, &macpv1.WatchRootsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wr.Recv(); err != nil { // the initial hint: the stream is open
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, out.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("still running 5s after SIGTERM with one open watcher\n%s", out.String())
	}
	t.Logf("stopped in %v", time.Since(start))
	if _, err := wr.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("watcher ended with %v, want UNAVAILABLE (reconnect)", err)
	}
}

// A second signal during a slow graceful shutdown ends macpd at once (the
// operator's "Ctrl-C again"), instead of being swallowed until the grace
// period runs out.
func TestSecondSignalForcesExit(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Skip("POSIX signals")
	}
	cmd, out, addr, exited := startMacpd(t, "MACP_SHUTDOWN_GRACE_MS=60000")
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// An open watch stream keeps GracefulStop waiting (unless the app
	// drains streams; then the first signal already ends macpd promptly).
	wr, err := macpv1.NewMACPRuntimeServiceClient(conn).WatchRoots(ctx, &macpv1.WatchRootsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wr.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "shutting down") {
		if time.Now().After(deadline) {
			t.Fatalf("no shutdown log\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatalf("second signal ignored: still running\n%s", out.String())
	}
}

// Go boolean flags do not take a separate value: "--insecure false" sets
// insecure and leaves "false" as a stray argument. Stray arguments are an
// error, so that typo cannot silently enable plaintext.
func TestStrayArgumentsRejected(t *testing.T) {
	cleanEnv(t)
	var stderr bytes.Buffer
	for _, args := range [][]string{
		{"--check-config", "--insecure", "false"},
		{"--check-config", "--insecure", "--memory-only", "false"},
		{"--check-config", "--insecure", "serve"},
	} {
		err := run(args, &stderr)
		if err == nil || !strings.Contains(err.Error(), args[len(args)-1]) {
			t.Errorf("run(%q) = %v, want an error naming the stray argument", args, err)
		}
	}
	if err := run([]string{"--check-config", "--insecure=true", "--memory-only=true"}, &stderr); err != nil {
		t.Errorf("--flag=value form: %v", err)
	}
}
