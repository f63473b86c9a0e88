package benchrec_test

import (
	"context"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/bench/benchrec"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/replay/verify"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// A generated directory holds exactly the configured mix, verifies
// offline (chain and replay), replays in-process, and boots a runtime that
// holds the open sessions and leaves the rest on disk.
// With SplitSessions the same holds (pebblestore's index entries of the
// open sessions then lag their history).
func TestGenerateVerifyReplayRecover(t *testing.T) {
	t.Run("whole sessions", func(t *testing.T) { testGenerateVerifyReplayRecover(t, false) })
	t.Run("split sessions", func(t *testing.T) { testGenerateVerifyReplayRecover(t, true) })
}

func testGenerateVerifyReplayRecover(t *testing.T, split bool) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	man, err := benchrec.Generate(ctx, benchrec.GenConfig{
		Dir: dir, Sessions: 200, Envelopes: 10, Batch: 300, Seed: 7, SplitSessions: split,
		Mix: benchrec.Mix{Open: 0.25, Resolved: 0.25, Cancelled: 0.25, Expired: 0.25},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"open": 50, "resolved": 50, "cancelled": 50, "expired": 50}
	for k, n := range want {
		if man.Kinds[k] != n {
			t.Errorf("%d %s sessions, want %d (%v)", man.Kinds[k], k, n, man.Kinds)
		}
	}
	if man.Envelopes != 2000 || man.Records != 2050 { // expired sessions add an Expire record
		t.Errorf("%d envelopes, %d records; want 2000, 2050", man.Envelopes, man.Records)
	}
	if got, err := benchrec.ReadManifest(ctx, dir); err != nil || got.ProbeSession != man.ProbeSession || got.Envelopes != man.Envelopes {
		t.Fatalf("ReadManifest = %+v, %v; want %+v", got, err, man)
	}

	st, err := pebblestore.Open(dir, pebblestore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ok, failed, err := verify.Verify(ctx, st, benchrec.Modes(), session.DefaultLimits(), func(r verify.SessionResult) {
		if !r.OK() {
			t.Errorf("verify %s: %v", r.SessionID, r.Err)
		}
	})
	st.Close()
	if err != nil || ok != 200 || failed != 0 {
		t.Fatalf("verify: %d ok, %d failed, %v", ok, failed, err)
	}

	res, err := benchrec.Replay(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sessions != 200 || res.OpenSessions != 50 || res.Envelopes != 2000 || res.Records != 2050 {
		t.Errorf("replay: %+v", res)
	}

	st, err = pebblestore.Open(dir, pebblestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rt := runtime.New(st, builtin.Modes(), policy.DefaultOnly{}, runtime.Options{StrictRecovery: true})
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	var status session.Status
	if cerr := rt.Inspect(ctx, man.ProbeSession, func(s *session.Session) { status = s.Status }); cerr != nil || status != session.Open {
		t.Fatalf("probe session %s: %v, %v; want OPEN", man.ProbeSession, status, cerr)
	}
}

func TestGenerateRefusesBadConfig(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range map[string]benchrec.GenConfig{
		"no dir":        {Sessions: 1},
		"few envelopes": {Dir: t.TempDir(), Envelopes: 3},
		"bad mix":       {Dir: t.TempDir(), Mix: benchrec.Mix{Open: 0.5}},
	} {
		if _, err := benchrec.Generate(ctx, cfg, nil); err == nil {
			t.Errorf("%s: Generate succeeded", name)
		}
	}
}

// MeasureStart boots the real macpd on a generated directory (a free port
// on 127.0.0.1), sees it recover the open sessions and answer for one, and
// reads its CPU time and memory.
func TestMeasureStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs macpd")
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	man, err := benchrec.Generate(ctx, benchrec.GenConfig{Dir: dir, Sessions: 100, Seed: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "macpd")
	cmd := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-o", bin, "github.com/macpd/macpd/cmd/macpd")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var log strings.Builder
	res, err := benchrec.MeasureStart(ctx, benchrec.MeasureConfig{Macpd: bin, Dir: dir, Timeout: time.Minute, Log: &log}, man)
	if err != nil {
		t.Fatalf("%v\nmacpd log:\n%s", err, log.String())
	}
	// The default boot does not list terminal sessions (runtime recover):
	// it counts none; a strict boot lists and counts them all.
	if res.OpenSessions != man.Kinds["open"] || res.TerminalOnDisk != 0 || res.Quarantined != 0 {
		t.Errorf("recovered %+v, want %d open (%v)", res, man.Kinds["open"], man.Kinds)
	}
	strict, err := benchrec.MeasureStart(ctx, benchrec.MeasureConfig{Macpd: bin, Dir: dir, Timeout: time.Minute, Env: []string{"MACP_STRICT_RECOVERY=1"}}, man)
	if err != nil {
		t.Fatalf("strict start: %v", err)
	}
	if strict.OpenSessions != man.Kinds["open"] || strict.TerminalOnDisk != 100-man.Kinds["open"] || strict.Quarantined != 0 {
		t.Errorf("strict boot recovered %+v, want %d open, %d terminal (%v)", strict, man.Kinds["open"], 100-man.Kinds["open"], man.Kinds)
	}
	if res.ServingSeconds <= 0 || res.AnsweredSeconds < res.ServingSeconds || res.RSSBytes <= 0 || res.HWMBytes < res.RSSBytes {
		t.Errorf("implausible figures %+v", res)
	}
	if strings.Contains(log.String(), "50051") {
		t.Errorf("macpd mentions port 50051:\n%s", log.String())
	}
	if _, err := benchrec.MeasureStart(ctx, benchrec.MeasureConfig{Macpd: bin, Dir: dir, Env: []string{"MACP_BIND_ADDR=127.0.0.1:1"}}, man); err == nil {
		t.Error("MeasureStart accepted a bind address")
	}
}
