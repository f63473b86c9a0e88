package app_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// syncBuffer is a log sink safe for concurrent writers and a reader.
type syncBuffer = testutil.SyncBuffer

// startAdminApp starts an in-memory, insecure App on 127.0.0.1:0 with the
// admin endpoint on 127.0.0.1:0.
func startAdminApp(t *testing.T, pprof bool) (*app.App, macpv1.MACPRuntimeServiceClient, *syncBuffer) {
	t.Helper()
	return startAdminAppIn(t, pprof, "")
}

// startAdminAppIn is startAdminApp with the durable store in dataDir, or
// in memory if dataDir is "".
func startAdminAppIn(t *testing.T, pprof bool, dataDir string) (*app.App, macpv1.MACPRuntimeServiceClient, *syncBuffer) {
	t.Helper()
	cfg := config.Default()
	cfg.MemoryOnly = dataDir == ""
	cfg.DataDir = dataDir
	cfg.BindAddr = "127.0.0.1:0"
	cfg.AllowInsecure = true
	cfg.AdminAddr = "127.0.0.1:0"
	cfg.AdminPprof = pprof
	logs := &syncBuffer{}
	a, err := app.New(cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	conn, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return a, macpv1.NewMACPRuntimeServiceClient(conn), logs
}

func httpGet(t *testing.T, url string) (int, string) {
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

// waitMetric polls /metrics until it has a line matching re.
func waitMetric(t *testing.T, base, re string) {
	t.Helper()
	rx := regexp.MustCompile("(?m)^" + re + "$")
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := httpGet(t, base+"/metrics")
		if rx.MatchString(body) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics has no line matching %s:\n%s", re, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The admin endpoint serves the Go, process and gRPC metrics of a running
// App, counting calls that authentication rejects; the profiler is off by
// default.
func TestAdminEndpoint(t *testing.T) {
	a, c, logs := startAdminApp(t, false)
	if a.AdminAddr() == "" || a.Metrics() == nil {
		t.Fatalf("AdminAddr %q, Metrics %v", a.AdminAddr(), a.Metrics())
	}
	base := "http://" + a.AdminAddr()
	if !strings.Contains(logs.String(), "admin listening") || !strings.Contains(logs.String(), a.AdminAddr()) {
		t.Errorf("no \"admin listening\" log with the address:\n%s", logs)
	}
	if strings.Contains(logs.String(), "non-loopback") {
		t.Errorf("loopback admin address warned about:\n%s", logs)
	}

	if _, err := c.ListModes(as("alice"), &macpv1.ListModesRequest{}); err != nil {
		t.Fatal(err)
	}
	// No credentials: rejected by the authentication interceptor, which
	// runs inside the metrics one.
	_, err := c.Send(context.Background(), &macpv1.SendRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Send without credentials: %v", err)
	}

	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, s := range []string{
		"\ngo_goroutines ",
		"\nprocess_start_time_seconds ",
		"\n" + `macpd_grpc_requests_total{code="OK",method="/macp.v1.MACPRuntimeService/ListModes"} 1` + "\n",
		"\n" + `macpd_grpc_requests_total{code="Unauthenticated",method="/macp.v1.MACPRuntimeService/Send"} 1` + "\n",
		"\n" + `macpd_grpc_request_duration_seconds_count{method="/macp.v1.MACPRuntimeService/ListModes"} 1` + "\n",
	} {
		if !strings.Contains(body, s) {
			t.Errorf("/metrics lacks %q", s)
		}
	}

	// A stream is active while open and counted once it ends.
	ctx, cancel := context.WithCancel(as("alice"))
	ws, err := c.WatchSessions(ctx, &macpv1.WatchSessionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	waitMetric(t, base, `macpd_grpc_streams_active\{method="/macp.v1.MACPRuntimeService/WatchSessions"\} 1`)
	cancel()
	_, _ = ws.Recv()
	waitMetric(t, base, `macpd_grpc_streams_active\{method="/macp.v1.MACPRuntimeService/WatchSessions"\} 0`)
	// The handler ends a watch the client left without an error: the
	// server-side code is OK.
	waitMetric(t, base, `macpd_grpc_requests_total\{code="OK",method="/macp.v1.MACPRuntimeService/WatchSessions"\} 1`)

	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, _ := httpGet(t, base+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ with MACP_ADMIN_PPROF off: %d, want 404", code)
	}

	// Shutdown stops the admin endpoint with the rest.
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("admin endpoint still serving after Shutdown")
	}
}

func TestAdminPprof(t *testing.T) {
	a, _, _ := startAdminApp(t, true)
	base := "http://" + a.AdminAddr()
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
		if code, _ := httpGet(t, base+p); code != http.StatusOK {
			t.Errorf("%s with MACP_ADMIN_PPROF on: %d, want 200", p, code)
		}
	}
}

// Without MACP_ADMIN_ADDR nothing listens for HTTP, but the registry still
// counts (other packages may register on it).
func TestAdminOff(t *testing.T) {
	a, c := startApp(t)
	if a.AdminAddr() != "" {
		t.Fatalf("AdminAddr %q without MACP_ADMIN_ADDR", a.AdminAddr())
	}
	if _, err := c.ListModes(as("alice"), &macpv1.ListModesRequest{}); err != nil {
		t.Fatal(err)
	}
	mfs, err := a.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "macpd_grpc_requests_total"
	}
	if !found {
		t.Error("no macpd_grpc_requests_total in the registry")
	}
}

// A busy admin address fails Start and releases the gRPC address.
func TestAdminAddrInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	grpcLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr := grpcLis.Addr().String()
	grpcLis.Close()
	cfg := config.Default()
	cfg.MemoryOnly = true
	cfg.BindAddr = grpcAddr
	cfg.AllowInsecure = true
	cfg.AdminAddr = busy.Addr().String()
	a, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "MACP_ADMIN_ADDR") {
		t.Fatalf("Start with a busy admin address: %v", err)
	}
	l, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		t.Fatalf("gRPC address not released: %v", err)
	}
	l.Close()
}

// A durable App's /metrics has the store (Pebble) and runtime metrics,
// and they count a committed session start; an in-memory App has the
// runtime metrics but no store ones.
func TestAdminStoreAndRuntimeMetrics(t *testing.T) {
	a, c, _ := startAdminAppIn(t, false, t.TempDir())
	base := "http://" + a.AdminAddr()
	start := &macpv1.Envelope{MacpVersion: "1.0", Mode: "macp.mode.decision.v1", MessageType: "SessionStart", MessageId: "m0",
		SessionId: "7c6d1a1e-5f43-4e0b-9a57-7f3f6a0a8c11", TimestampUnixMs: time.Now().UnixMilli(), Payload: mustMarshal(t, &macpv1.SessionStartPayload{
			Participants: []string{"alice"}, ModeVersion: "1.0.0", ConfigurationVersion: "c", TtlMs: 60000})}
	if r, err := c.Send(as("coord"), &macpv1.SendRequest{Envelope: start}); err != nil || !r.Ack.Ok {
		t.Fatalf("start: %v %v", r, err)
	}
	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, re := range []string{
		`macpd_commit_groups_total 1`,
		`macpd_commit_records_total 1`,
		`macpd_commit_failures_total 0`,
		`macpd_commit_group_requests_count 1`,
		`macpd_commit_group_requests_sum 1`,
		`macpd_store_append_seconds_count 1`,
		`macpd_sessions_resident\{state="open"\} 1`,
		`macpd_sessions_resident\{state="terminal"\} 0`,
		`macpd_sessions_quarantined 0`,
		`macpd_followers 0`,
		// The format marker's sync at Open and the start's.
		`macpd_store_wal_fsync_duration_seconds_count [2-9]`,
		`macpd_store_wal_fsync_duration_seconds_bucket\{le="0.0001"\} \d+`,
		`macpd_store_wal_fsync_duration_seconds_bucket\{le="\+Inf"\} [2-9]`,
		`macpd_store_wal_bytes_written_total [1-9]\d*(\.\d+)?(e\+\d+)?`,
		`macpd_store_memtable_size_bytes [1-9].*`,
		`macpd_store_memtables 1`,
		`macpd_store_l0_files 0`,
		`macpd_store_l0_sublevels 0`,
		`macpd_store_compaction_debt_bytes 0`,
		`macpd_store_compactions_total 0`,
		`macpd_store_flushes_total 0`,
		`macpd_store_block_cache_size_bytes \d+`,
		`macpd_store_block_cache_hits_total \d+`,
		`macpd_store_block_cache_misses_total \d+`,
		`macpd_store_disk_usage_bytes [1-9].*`,
		`macpd_store_write_stalls_total 0`,
	} {
		if !regexp.MustCompile("(?m)^" + re + "$").MatchString(body) {
			t.Errorf("/metrics has no line matching %s", re)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}

	m, _, _ := startAdminApp(t, false)
	_, body = httpGet(t, "http://"+m.AdminAddr()+"/metrics")
	if !strings.Contains(body, "\nmacpd_commit_groups_total 0\n") || strings.Contains(body, "macpd_store_wal") {
		t.Errorf("in-memory App: want runtime metrics and no store ones:\n%s", body)
	}
}
