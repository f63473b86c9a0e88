package lint

// Dependency rules of the binaries and of the benchmark tooling (issue 16
// "Done when": no product package imports bench tooling; macpctl lists no
// server, admin or Prometheus package). They read the package graph from
// the go tool ("go list", test imports excluded), so they see exactly what
// a build links.

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/macpd/macpd"

// benchUsers may import internal/bench/...: the bench tooling itself and
// the benchmark commands. Tests (any _test.go file) may too; go list's
// Imports excludes them.
var benchUsers = map[string]string{
	"cmd/macpbench":  "the benchmark and load tools",
	"cmd/echo-bench": "the gRPC echo and durable-echo ceilings",
	"cmd/disksync":   "the raw disk sync rate",
}

// goList runs "go list" in the module root with args and returns its
// output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// imports maps each listed package to its non-test imports.
func imports(t *testing.T, args ...string) map[string][]string {
	t.Helper()
	m := make(map[string][]string)
	for _, l := range goList(t, append([]string{"-f", "{{.ImportPath}} {{join .Imports \" \"}}"}, args...)...) {
		f := strings.Fields(l)
		m[f[0]] = f[1:]
	}
	return m
}

func isBench(pkg string) bool {
	return pkg == module+"/internal/bench" || strings.HasPrefix(pkg, module+"/internal/bench/")
}

// No product package imports the benchmark tooling (internal/bench doc).
func TestBenchToolingApart(t *testing.T) {
	all := imports(t, "./...")
	if len(all) < 50 {
		t.Fatalf("go list ./... listed %d packages: the module is not where the test looked", len(all))
	}
	users := 0
	for pkg, imps := range all {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if isBench(pkg) || benchUsers[rel] != "" {
			continue
		}
		for _, imp := range imps {
			if isBench(imp) {
				t.Errorf("product package %s imports %s: benchmark tooling stays under internal/bench and its commands (%v)", rel, imp, benchUsers)
			}
		}
	}
	for rel := range benchUsers {
		if slices.ContainsFunc(all[module+"/"+rel], isBench) {
			users++
		}
	}
	if users == 0 { // the rule must be looking at the right graph
		t.Fatalf("no benchmark command imports internal/bench: the rule checked nothing")
	}
}

// macpctl is the client and offline store tool: it links the SDK and the
// store (verify, replay and repair read it offline), never the gRPC
// server, the admin endpoint, the wiring or metrics of its own.
// Prometheus's client library reaches it only through Pebble, whose WAL
// and record packages import it (and through pebblestore, which exports
// the store's collectors for macpd).
func TestMacpctlDeps(t *testing.T) {
	deps := imports(t, "-deps", "./cmd/macpctl")
	if _, ok := deps[module+"/sdk"]; !ok {
		t.Fatalf("macpctl's dependencies lack the SDK: the rule checked the wrong graph (%d packages)", len(deps))
	}
	for pkg := range deps {
		for _, bad := range []string{"/internal/server", "/internal/admin", "/internal/app", "/internal/httpapi", "/internal/runtime", "/internal/bench"} {
			if pkg == module+bad || strings.HasPrefix(pkg, module+bad+"/") {
				t.Errorf("macpctl links %s", pkg)
			}
		}
	}
	for pkg, imps := range deps {
		if !slices.ContainsFunc(imps, func(s string) bool { return strings.HasPrefix(s, "github.com/prometheus/") }) {
			continue
		}
		switch {
		case strings.HasPrefix(pkg, "github.com/prometheus/"),
			strings.HasPrefix(pkg, "github.com/cockroachdb/pebble/"),
			pkg == module+"/internal/store/pebblestore":
		default:
			t.Errorf("macpctl links %s, which imports Prometheus", pkg)
		}
	}
}

// internalDeps returns the packages of graph (package -> its imports)
// that are this module's internal/ packages or import one, each with what
// it imports: the SDK is built by users outside this module, where Go
// refuses internal/ imports, so it may depend on none.
func internalDeps(graph map[string][]string) []string {
	isInternal := func(p string) bool {
		return p == module+"/internal" || strings.HasPrefix(p, module+"/internal/")
	}
	var bad []string
	for pkg, imps := range graph {
		if isInternal(pkg) {
			bad = append(bad, pkg+" is in the SDK's dependencies")
			continue
		}
		for _, imp := range imps {
			if isInternal(imp) {
				bad = append(bad, pkg+" imports "+imp)
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// sdk/doc.go: the Go SDK imports no internal/ package, directly or
// through another (its tests may: they start a runtime in process).
func TestSDKImportsNoInternal(t *testing.T) {
	deps := imports(t, "-deps", "./sdk/...")
	if _, ok := deps[module+"/sdk"]; !ok {
		t.Fatalf("the SDK is not in its own dependency graph: the rule checked the wrong graph (%d packages)", len(deps))
	}
	if _, ok := deps[module+"/gen/macp/v1"]; !ok {
		t.Fatalf("the SDK's graph lacks the generated protocol package: wrong graph")
	}
	for _, b := range internalDeps(deps) {
		t.Error(b)
	}
	// The rule finds what it looks for.
	if got := internalDeps(map[string][]string{
		module + "/sdk":       {module + "/gen/macp/v1", module + "/internal/coord"},
		module + "/sdk/extra": {"fmt"},
	}); len(got) != 1 || !strings.Contains(got[0], "/internal/coord") {
		t.Fatalf("the rule missed an internal import: %v", got)
	}
}
