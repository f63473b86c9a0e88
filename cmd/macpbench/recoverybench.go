package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/macpd/macpd/internal/bench/benchrec"
	"github.com/macpd/macpd/internal/clikit"
)

func benchRecovery(c *clikit.CLI, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			c.FS.Usage()
			return nil
		}
		return clikit.Usagef("say gen, measure or replay")
	}
	action, args := args[0], args[1:]
	dir := c.FS.String("data-dir", "", "the data directory (required)")
	jsonOut := c.FS.Bool("json", false, "also print every figure as JSON lines")
	switch action {
	case "gen":
		return benchRecGen(c, args, dir, jsonOut)
	case "measure":
		return benchRecMeasure(c, args, dir, jsonOut)
	case "replay":
		return benchRecReplay(c, args, dir, jsonOut)
	}
	return clikit.Usagef("unknown action %q: gen, measure or replay", action)
}

func benchRecGen(c *clikit.CLI, args []string, dir *string, jsonOut *bool) error {
	sessions := c.FS.Int("sessions", 100_000, "sessions to write")
	envelopes := c.FS.Int("envelopes", 10, "envelopes per session, SessionStart included (expired sessions add an Expire record)")
	participants := c.FS.Int("participants", 3, "declared participants per session")
	mix := c.FS.String("mix", "realistic", "realistic (10% open, 72% resolved, 9% cancelled, 9% expired), all-open, "+
		"or open=F,resolved=F,cancelled=F,expired=F")
	seed := c.FS.Uint64("seed", 1, "seed for ids and the order of session kinds")
	batch := c.FS.Int("batch", 4096, "records per store append (one sync each)")
	openTTL := c.FS.Duration("open-ttl", 24*time.Hour, "ttl of the sessions left open (measure before it runs out)")
	split := c.FS.Bool("split-sessions", false, "append each session's SessionStart and its other records in two appends, as a runtime receiving them over time does")
	if _, err := c.Parse(args, 0); err != nil {
		return err
	}
	if *dir == "" {
		return clikit.Usagef("--data-dir is required")
	}
	m, err := parseMix(*mix)
	if err != nil {
		return err
	}
	cfg := benchrec.GenConfig{
		Dir: *dir, Sessions: *sessions, Envelopes: *envelopes, Participants: *participants,
		Mix: m, Seed: *seed, Batch: *batch, OpenTTL: *openTTL, SplitSessions: *split,
	}
	last := time.Now()
	man, err := benchrec.Generate(c.Ctx, cfg, func(done int) {
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			fmt.Fprintf(c.Stderr, "  %d/%d sessions written\n", done, *sessions)
		}
	})
	if err != nil {
		return err
	}
	kinds := make([]string, 0, len(man.Kinds))
	for _, k := range slices.Sorted(maps.Keys(man.Kinds)) {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, man.Kinds[k]))
	}
	fmt.Fprintf(c.Stdout, "wrote %s: %d sessions (%s), %d envelopes, %d records, %.1f MiB on disk, in %.1fs\n",
		*dir, man.Sessions, strings.Join(kinds, ", "), man.Envelopes, man.Records, float64(man.DiskBytes)/(1<<20), man.GenSeconds)
	if man.OpenDeadlineMs > 0 {
		fmt.Fprintf(c.Stdout, "open sessions expire from %s on: measure before then\n", time.UnixMilli(man.OpenDeadlineMs).UTC().Format(time.RFC3339))
	}
	if *jsonOut {
		return printJSONLine(c.Stdout, man)
	}
	return nil
}

func parseMix(s string) (benchrec.Mix, error) {
	if m, ok := benchrec.Mixes[s]; ok {
		return m, nil
	}
	var m benchrec.Mix
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return m, clikit.Usagef("--mix: %q is not KIND=FRACTION", part)
		}
		switch k {
		case "open":
			m.Open = f
		case "resolved":
			m.Resolved = f
		case "cancelled":
			m.Cancelled = f
		case "expired":
			m.Expired = f
		default:
			return m, clikit.Usagef("--mix: unknown kind %q (open, resolved, cancelled, expired)", k)
		}
	}
	return m, nil
}

func benchRecMeasure(c *clikit.CLI, args []string, dir *string, jsonOut *bool) error {
	macpd := c.FS.String("macpd", "", "the macpd binary (default: macpd next to macpbench, else on PATH)")
	runs := c.FS.Int("runs", 5, "starts to measure")
	timeout := c.FS.Duration("start-timeout", 10*time.Minute, "give up on a start after this long")
	logPath := c.FS.String("log", "", "append macpd's log to FILE")
	var extraEnv multiFlag
	c.FS.Var(&extraEnv, "env", "KEY=VALUE for macpd (repeatable), e.g. GOGC=200 or MACP_STRICT_RECOVERY=1")
	if _, err := c.Parse(args, 0); err != nil {
		return err
	}
	if *dir == "" {
		return clikit.Usagef("--data-dir is required")
	}
	if *runs < 1 {
		return clikit.Usagef("--runs must be at least 1")
	}
	bin, err := findMacpd(*macpd)
	if err != nil {
		return err
	}
	man, err := benchrec.ReadManifest(c.Ctx, *dir)
	if err != nil {
		return err
	}
	if man.OpenDeadlineMs > 0 && time.Now().UnixMilli() >= man.OpenDeadlineMs-time.Hour.Milliseconds() {
		return fmt.Errorf("the open sessions of %s expire at %s: recovery would expire them; generate the directory again",
			*dir, time.UnixMilli(man.OpenDeadlineMs).UTC().Format(time.RFC3339))
	}
	var logW io.Writer
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return clikit.Usagef("--log: %v", err)
		}
		defer f.Close()
		logW = f
	}
	fmt.Fprintf(c.Stdout, "macpd start on %s: %d sessions (%d open), %d envelopes, %.1f MiB on disk; %s\n",
		*dir, man.Sessions, man.Kinds["open"], man.Envelopes, float64(man.DiskBytes)/(1<<20), bin)
	fmt.Fprintf(c.Stdout, "%4s %10s %10s %10s %8s %8s %10s %10s\n", "run", "serving s", "answered s", "recovery s", "cpu s", "open", "RSS MiB", "peak MiB")
	var all []*benchrec.StartResult
	for i := range *runs {
		r, err := benchrec.MeasureStart(c.Ctx, benchrec.MeasureConfig{Macpd: bin, Dir: *dir, Timeout: *timeout, Env: extraEnv, Log: logW}, man)
		if err != nil {
			return err
		}
		all = append(all, r)
		fmt.Fprintf(c.Stdout, "%4d %10.3f %10.3f %10.3f %8.2f %8d %10.1f %10.1f\n", i+1, r.ServingSeconds, r.AnsweredSeconds,
			r.RecoverySeconds, r.CPUSeconds, r.OpenSessions, mib(r.RSSBytes), mib(r.HWMBytes))
		if *jsonOut {
			if err := printJSONLine(c.Stdout, r); err != nil {
				return err
			}
		}
	}
	pick := func(f func(*benchrec.StartResult) float64) spread {
		xs := make([]float64, len(all))
		for i, r := range all {
			xs[i] = f(r)
		}
		return spreadOf(xs)
	}
	sum := map[string]spread{
		"serving_s":  pick(func(r *benchrec.StartResult) float64 { return r.ServingSeconds }),
		"answered_s": pick(func(r *benchrec.StartResult) float64 { return r.AnsweredSeconds }),
		"recovery_s": pick(func(r *benchrec.StartResult) float64 { return r.RecoverySeconds }),
		"cpu_s":      pick(func(r *benchrec.StartResult) float64 { return r.CPUSeconds }),
		"rss_mib":    pick(func(r *benchrec.StartResult) float64 { return mib(r.RSSBytes) }),
		"hwm_mib":    pick(func(r *benchrec.StartResult) float64 { return mib(r.HWMBytes) }),
	}
	for _, k := range []string{"serving_s", "answered_s", "recovery_s", "cpu_s", "rss_mib", "hwm_mib"} {
		fmt.Fprintf(c.Stdout, "  %-11s %s\n", k, sum[k])
	}
	if *jsonOut {
		return printJSONLine(c.Stdout, map[string]any{"summary": sum, "manifest": man})
	}
	return nil
}

func benchRecReplay(c *clikit.CLI, args []string, dir *string, jsonOut *bool) error {
	runs := c.FS.Int("runs", 3, "passes to measure")
	if _, err := c.Parse(args, 0); err != nil {
		return err
	}
	if *dir == "" {
		return clikit.Usagef("--data-dir is required")
	}
	fmt.Fprintf(c.Stdout, "offline replay of %s (store opened read-only)\n", *dir)
	fmt.Fprintf(c.Stdout, "%4s %8s %10s %8s %8s %10s %12s %12s %12s %14s\n", "run", "sessions", "envelopes", "list s", "read s", "replay s",
		"read env/s", "replay env/s", "core env/s", "open heap B/s")
	var all []*benchrec.ReplayResult
	for i := range *runs {
		r, err := benchrec.Replay(c.Ctx, *dir)
		if err != nil {
			return err
		}
		all = append(all, r)
		fmt.Fprintf(c.Stdout, "%4d %8d %10d %8.3f %8.3f %10.3f %12.0f %12.0f %12.0f %14.0f\n", i+1, r.Sessions, r.Envelopes,
			r.ListSeconds, r.ReadSeconds, r.ReplaySeconds, r.ReadEnvelopesPerSec, r.ReplayEnvelopesPerSec, r.CoreEnvelopesPerSec, r.OpenHeapPerSession)
		if *jsonOut {
			if err := printJSONLine(c.Stdout, r); err != nil {
				return err
			}
		}
	}
	pick := func(f func(*benchrec.ReplayResult) float64) spread {
		var xs []float64
		for _, r := range all {
			if x := f(r); x > 0 { // the core's rate is 0 when noise hid it
				xs = append(xs, x)
			}
		}
		return spreadOf(xs)
	}
	sum := map[string]spread{
		"replay_envelopes_per_s": pick(func(r *benchrec.ReplayResult) float64 { return r.ReplayEnvelopesPerSec }),
		"read_envelopes_per_s":   pick(func(r *benchrec.ReplayResult) float64 { return r.ReadEnvelopesPerSec }),
		"core_envelopes_per_s":   pick(func(r *benchrec.ReplayResult) float64 { return r.CoreEnvelopesPerSec }),
		"open_heap_per_session":  pick(func(r *benchrec.ReplayResult) float64 { return r.OpenHeapPerSession }),
	}
	for _, k := range []string{"replay_envelopes_per_s", "read_envelopes_per_s", "core_envelopes_per_s", "open_heap_per_session"} {
		fmt.Fprintf(c.Stdout, "  %-23s %s\n", k, sum[k])
	}
	if *jsonOut {
		return printJSONLine(c.Stdout, map[string]any{"summary": sum})
	}
	return nil
}

// spread is the median and range of repeated measurements.
type spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

func (s spread) String() string {
	return fmt.Sprintf("median %s (min %s, max %s, n=%d)", fmtNum(s.Median), fmtNum(s.Min), fmtNum(s.Max), s.N)
}

func fmtNum(f float64) string {
	if f >= 1000 {
		return strconv.FormatFloat(f, 'f', 0, 64)
	}
	return strconv.FormatFloat(f, 'f', 3, 64)
}

func spreadOf(xs []float64) spread {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return spread{}
	}
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return spread{Median: med, Min: s[0], Max: s[n-1], N: n}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func printJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// findMacpd returns the macpd binary: path if set, else macpd next to
// this executable, else on PATH.
func findMacpd(path string) (string, error) {
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return "", clikit.Usagef("--macpd: %v", err)
		}
		return path, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "macpd")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath("macpd")
	if err != nil {
		return "", clikit.Usagef("no macpd binary next to macpbench or on PATH; pass --macpd (go build -o bin/ ./cmd/macpd ./cmd/macpbench)")
	}
	return p, nil
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, " ") }

func (m *multiFlag) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	*m = append(*m, v)
	return nil
}
