package sim

import (
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	flagSeed   = flag.Uint64("seed", 0, "run only this seed (0: the fixed CI set)")
	flagSeeds  = flag.Int("seeds", 0, "how many seeds to run, from -first (0: SIM_SEEDS, else 120; 6 with -short or -race)")
	flagFirst  = flag.Uint64("first", 1, "first seed of the set")
	flagSteps  = flag.Int("steps", 300, "steps per seed (100 under -race unless set)")
	flagTrace  = flag.Bool("simtrace", false, "print every run's trace")
	flagMutate = flag.String("mutate", os.Getenv("SIM_MUTATE"), "harness-only mutation to run under (see mutations_test.go)")
)

// run simulates one seed and returns its trace and the violated
// invariant ("" if none).
func run(cfg config) (trace []string, failed string) {
	trace, failed, _ = runTimed(cfg)
	return trace, failed
}

// runTimed is run that also reports how much fake time the run covered.
func runTimed(cfg config) (trace []string, failed string, simulated time.Duration) {
	w := newWorld(cfg)
	defer func() { simulated = w.clk.Now().Sub(epoch) }()
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(failure)
			if !ok {
				panic(p)
			}
			trace, failed = w.trace, f.msg
			func() {
				defer func() { _ = recover() }()
				w.shutdown()
			}()
		}
	}()
	w.logf("seed %d, profile %s, %d steps, mutation %q", cfg.seed, w.lim.Profile, cfg.steps, cfg.mutate)
	w.open()
	for w.step = 1; w.step <= cfg.steps; w.step++ {
		a := w.chooseAction()
		a.run(w)
		w.settle()
	}
	w.final()
	w.shutdown()
	return w.trace, "", 0
}

// steps is the steps per seed: -steps, or 100 under the race detector
// (make test), which runs the package about ten times slower.
func steps() int {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "steps" })
	if underRace && !set {
		return 100
	}
	return *flagSteps
}

func seedCount(t *testing.T) int {
	if *flagSeeds > 0 {
		return *flagSeeds
	}
	if v := os.Getenv("SIM_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("SIM_SEEDS=%q: want a positive count", v)
		}
		return n
	}
	if testing.Short() || underRace { // make test runs with -race: a few seeds there, the budget in make sim
		return 6
	}
	return 120
}

func seeds(t *testing.T) []uint64 {
	if *flagSeed != 0 {
		return []uint64{*flagSeed}
	}
	var out []uint64
	for i := 0; i < seedCount(t); i++ {
		out = append(out, *flagFirst+uint64(i))
	}
	return out
}

func reproduce(seed uint64, mutate string) string {
	cmd := fmt.Sprintf("go test ./internal/sim -run 'TestSim$' -seed %d -simtrace", seed)
	if mutate != "" {
		cmd += " -mutate " + mutate
	}
	return cmd
}

func tail(trace []string, n int) string {
	if len(trace) > n {
		trace = trace[len(trace)-n:]
	}
	return strings.Join(trace, "\n")
}

// TestSim runs the simulation for each seed of the set (or -seed N).
func TestSim(t *testing.T) {
	failedSeeds := 0
	var total time.Duration
	list := seeds(t)
	for _, seed := range list {
		trace, failed, simulated := runTimed(config{seed: seed, steps: steps(), mutate: *flagMutate})
		total += simulated
		if *flagTrace {
			t.Logf("trace of seed %d:\n%s", seed, strings.Join(trace, "\n"))
		}
		if failed != "" {
			failedSeeds++
			t.Errorf("seed %d: %s\nlast steps:\n%s\nrerun: %s", seed, failed, tail(trace, 25), reproduce(seed, *flagMutate))
			continue
		}
		t.Logf("seed %d: %s (%.2f simulated hours, trace %08x)", seed, strings.TrimSpace(trace[len(trace)-1][16:]), simulated.Hours(), traceSum(trace))
	}
	t.Logf("%d seeds (%d steps each), %d failed, %.1f simulated hours", len(list), steps(), failedSeeds, total.Hours())
}

// TestSimReproducible runs seeds twice and requires byte-for-byte the same
// trace: the whole point of a seed.
func TestSimReproducible(t *testing.T) {
	set := []uint64{3, 17, 29, 41}
	if underRace {
		set = set[:2]
	}
	for _, seed := range set {
		a, fa := run(config{seed: seed, steps: steps()})
		b, fb := run(config{seed: seed, steps: steps()})
		if fa != "" || fb != "" {
			t.Fatalf("seed %d failed: %q / %q; rerun: %s", seed, fa, fb, reproduce(seed, ""))
		}
		if len(a) < steps() {
			t.Fatalf("seed %d: trace of %d lines for %d steps", seed, len(a), steps())
		}
		sa, sb := strings.Join(a, "\n"), strings.Join(b, "\n")
		if sa == sb {
			continue
		}
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("seed %d: traces differ at line %d:\n  first:  %s\n  second: %s", seed, i+1, a[i], b[i])
			}
		}
		t.Fatalf("seed %d: traces differ in length: %d and %d lines", seed, len(a), len(b))
	}
}

// traceSum is a checksum of a trace (FNV-1a), printed per passing seed so
// that two runs can be compared line by line.
func traceSum(trace []string) uint32 {
	h := fnv.New32a()
	for _, l := range trace {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return h.Sum32()
}
