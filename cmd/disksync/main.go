// Command disksync measures the raw sync rate of a disk: it appends
// fixed-size records to a new file in --dir and syncs after every append
// (group 1) or after every N appends (group N), each setting for
// --duration, and reports appends/s, syncs/s and the sync latency. This is
// the ceiling of a durable store that syncs its log per append or per
// group commit on that disk.
//
//	disksync --dir D --duration 5s --record-size 512 --group 1,64 [--sync fdatasync|fsync] [--json]
//
// --sync fdatasync (the default, on Linux) flushes the data and the file
// size, as a log append needs; fsync also flushes the other metadata.
// With --json each setting is printed as one JSON line instead of a table.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/macpd/macpd/internal/bench/datasync"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "disksync:", err)
		os.Exit(1)
	}
}

// Result is one setting's figures.
type Result struct {
	Group      int     `json:"group"`
	RecordSize int     `json:"record_size"`
	Sync       string  `json:"sync"`
	Appends    int64   `json:"appends"`
	Syncs      int64   `json:"syncs"`
	ElapsedSec float64 `json:"elapsed_s"`
	AppendsPS  float64 `json:"appends_per_s"`
	SyncsPS    float64 `json:"syncs_per_s"`
	MBPS       float64 `json:"mb_per_s"`
	SyncP50Ms  float64 `json:"sync_p50_ms"`
	SyncP99Ms  float64 `json:"sync_p99_ms"`
	SyncMaxMs  float64 `json:"sync_max_ms"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("disksync", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory on the disk to measure (required)")
	duration := fs.Duration("duration", 5*time.Second, "time per setting")
	recordSize := fs.Int("record-size", 512, "bytes per append")
	groups := fs.String("group", "1,64", "comma-separated appends per sync")
	syncMode := fs.String("sync", "fdatasync", "fdatasync or fsync")
	jsonOut := fs.Bool("json", false, "one JSON line per setting")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *dir == "" {
		return errors.New("--dir is required")
	}
	if *duration <= 0 || *recordSize < 1 {
		return errors.New("--duration and --record-size must be positive")
	}
	var sizes []int
	for _, g := range strings.Split(*groups, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(g))
		if err != nil || n < 1 {
			return fmt.Errorf("--group: %q is not a positive integer", g)
		}
		sizes = append(sizes, n)
	}
	var syncFn func(*os.File) error
	switch *syncMode {
	case "fdatasync":
		syncFn = datasync.File
	case "fsync":
		syncFn = (*os.File).Sync
	default:
		return fmt.Errorf("--sync is fdatasync or fsync, not %q", *syncMode)
	}
	if !*jsonOut {
		fmt.Fprintf(stdout, "disk sync rate in %s: %d-byte records, %s, %v per setting\n", *dir, *recordSize, *syncMode, *duration)
		fmt.Fprintf(stdout, "%8s %12s %12s %10s %10s %10s %10s\n", "group", "appends/s", "syncs/s", "MB/s", "sync p50", "sync p99", "sync max")
	}
	for _, g := range sizes {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r, err := measure(ctx, *dir, *duration, *recordSize, g, syncFn)
		if err != nil {
			return err
		}
		r.Sync = *syncMode
		if *jsonOut {
			b, _ := json.Marshal(r)
			fmt.Fprintf(stdout, "%s\n", b)
			continue
		}
		fmt.Fprintf(stdout, "%8d %12.0f %12.0f %10.2f %8.3fms %8.3fms %8.3fms\n", r.Group, r.AppendsPS, r.SyncsPS, r.MBPS, r.SyncP50Ms, r.SyncP99Ms, r.SyncMaxMs)
	}
	return nil
}

// measure appends records to a new file for d, syncing every group
// appends, and removes the file.
func measure(ctx context.Context, dir string, d time.Duration, size, group int, syncFn func(*os.File) error) (Result, error) {
	f, err := os.CreateTemp(dir, "disksync-*.dat")
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	// Make the new file's directory entry durable first, as a store
	// creating a segment would, so the loop measures appends only.
	if err := syncFn(f); err != nil {
		return Result{}, err
	}
	rec := make([]byte, size)
	for i := range rec {
		rec[i] = byte('a' + i%26)
	}
	rec[size-1] = '\n'
	var lat []time.Duration
	r := Result{Group: group, RecordSize: size}
	start := time.Now()
	deadline := start.Add(d)
	pending := 0
	for {
		if _, err := f.Write(rec); err != nil {
			return r, err
		}
		r.Appends++
		pending++
		if pending == group {
			t0 := time.Now()
			if err := syncFn(f); err != nil {
				return r, err
			}
			lat = append(lat, time.Since(t0))
			r.Syncs++
			pending = 0
			if !t0.Before(deadline) || ctx.Err() != nil {
				break
			}
		}
	}
	el := time.Since(start)
	r.ElapsedSec = el.Seconds()
	r.AppendsPS = float64(r.Appends) / el.Seconds()
	r.SyncsPS = float64(r.Syncs) / el.Seconds()
	r.MBPS = float64(r.Appends) * float64(size) / el.Seconds() / 1e6
	slices.Sort(lat)
	pct := func(q int) float64 {
		i := (q*len(lat) + 99) / 100 // nearest rank
		return float64(lat[max(i, 1)-1].Microseconds()) / 1000
	}
	r.SyncP50Ms, r.SyncP99Ms, r.SyncMaxMs = pct(50), pct(99), pct(100)
	return r, nil
}
