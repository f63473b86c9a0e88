// Package lint holds repository-wide static checks that run as ordinary Go
// tests.
package lint

// The pure-core rule (internal/session doc, internal/mode doc, RFC-MACP-0003
// §2 / checklist DET-4): the core — internal/coord, internal/mode/...,
// internal/cmthash (the RFC-MACP-0013 commitment hash),
// internal/policy, internal/session, and the pure packages around it:
// internal/replay (the fold of stored records through the core) and
// internal/snapshot (payload, report, ids; its I/O is snapshot/snapshotio)
// — never reads the clock, does I/O,
// draws random numbers or starts goroutines. Time is an input; the shell
// (internal/runtime) owns clocks, storage, networking and concurrency.
//
// TestPureCore parses every non-test .go file of those packages and fails,
// with file:line, on a forbidden import, a `go` statement or a call of
// time.Now (also through an import alias or a dot import).

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// corePackages are the pure core, relative to the module root. A trailing
// "/..." includes every sub-package.
var corePackages = []string{
	"internal/cmthash",
	"internal/coord",
	"internal/listpage",
	"internal/mode/...",
	"internal/policy",
	"internal/replay",
	"internal/session",
	"internal/snapshot",
}

// exempt are test-support packages under the core trees. They import
// "testing" (so they are never linked into the binary) and may use
// math/rand for generated inputs. TestExemptNotImportedByCore checks that
// no core file imports them.
var exempt = map[string]string{
	"internal/mode/modetest": "shared test suite for modes (imports testing, uses math/rand for generators)",
}

// forbidden imports and why.
var forbidden = map[string]string{
	"time":          "the core never reads the clock; time is an input (nowMs)",
	"math/rand":     "the core draws no random numbers",
	"math/rand/v2":  "the core draws no random numbers",
	"crypto/rand":   "the core draws no random numbers",
	"os":            "the core does no I/O",
	"os/exec":       "the core does no I/O",
	"os/signal":     "the core does no I/O",
	"syscall":       "the core does no I/O",
	"io/ioutil":     "the core does no I/O",
	"net":           "the core does no I/O",
	"net/http":      "the core does no I/O",
	"log":           "the core does no I/O (return errors; the shell logs)",
	"log/slog":      "the core does no I/O (return errors; the shell logs)",
	"sync":          "the core is single-owner; the shell serializes calls",
	"sync/atomic":   "the core is single-owner; the shell serializes calls",
	"unsafe":        "the core stays memory-safe and portable",
	"runtime/debug": "the core does not depend on the Go runtime's state",
}

// violation is one finding.
type violation struct {
	pos token.Position
	msg string
}

func (v violation) String() string {
	return fmt.Sprintf("%s:%d:%d: %s", v.pos.Filename, v.pos.Line, v.pos.Column, v.msg)
}

// checkFile returns the file's violations of the pure-core rule.
func checkFile(fset *token.FileSet, f *ast.File) []violation {
	var out []violation
	// Local names under which package time is visible in this file.
	timeNames := map[string]bool{}
	timeDot := false
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			continue
		}
		if why, bad := forbidden[path]; bad {
			out = append(out, violation{fset.Position(imp.Pos()), fmt.Sprintf("imports %q: %s", path, why)})
		}
		if path == "time" {
			switch {
			case imp.Name == nil:
				timeNames["time"] = true
			case imp.Name.Name == ".":
				timeDot = true
			case imp.Name.Name != "_":
				timeNames[imp.Name.Name] = true
			}
		}
	}
	// Callees, to tell calls of time.Now from uses as a value
	// (`clock := time.Now` reads the clock just the same).
	callees := map[ast.Expr]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			callees[ast.Unparen(c.Fun)] = true
		}
		return true
	})
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			out = append(out, violation{fset.Position(n.Pos()), "go statement: the core starts no goroutines"})
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && timeNames[id.Name] && n.Sel.Name == "Now" {
				if callees[n] {
					out = append(out, violation{fset.Position(n.Pos()), "calls time.Now: the clock is an input"})
				} else {
					out = append(out, violation{fset.Position(n.Pos()), "uses time.Now as a value: the clock is an input"})
				}
			}
		case *ast.Ident:
			if timeDot && n.Name == "Now" && callees[n] {
				out = append(out, violation{fset.Position(n.Pos()), "calls time.Now (dot import): the clock is an input"})
			}
		}
		return true
	})
	slices.SortFunc(out, func(a, b violation) int { return a.pos.Offset - b.pos.Offset })
	return out
}

// moduleRoot finds the directory holding go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found")
		}
		dir = parent
	}
}

// coreFiles lists the non-test .go files of the core packages, relative to
// root, skipping exempt packages and testdata.
func coreFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	for _, pkg := range corePackages {
		rel, recursive := strings.CutSuffix(pkg, "/...")
		base := filepath.Join(root, filepath.FromSlash(rel))
		if _, err := os.Stat(base); err != nil {
			t.Fatalf("core package %s: %v", pkg, err)
		}
		err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			r, _ := filepath.Rel(root, path)
			r = filepath.ToSlash(r)
			if d.IsDir() {
				name := d.Name()
				if path != base && (!recursive || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
					return filepath.SkipDir
				}
				if _, ok := exempt[r]; ok {
					return filepath.SkipDir
				}
				return nil
			}
			if strings.HasSuffix(r, ".go") && !strings.HasSuffix(r, "_test.go") {
				files = append(files, r)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(files)
	return files
}

func TestPureCore(t *testing.T) {
	root := moduleRoot(t)
	files := coreFiles(t, root)
	if len(files) < 8 {
		t.Fatalf("found only %d core files; is the package list stale? %v", len(files), files)
	}
	fset := token.NewFileSet()
	var all []violation
	for _, rel := range files {
		f, err := parser.ParseFile(fset, filepath.Join(root, filepath.FromSlash(rel)), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", rel, err)
		}
		for _, v := range checkFile(fset, f) {
			if r, err := filepath.Rel(root, v.pos.Filename); err == nil {
				v.pos.Filename = filepath.ToSlash(r)
			}
			all = append(all, v)
		}
	}
	for _, v := range all {
		t.Error(v)
	}
	if len(all) > 0 {
		t.Logf("%d violation(s) of the pure-core rule in %d files checked; see internal/lint/lint_test.go", len(all), len(files))
	}
}

// The exempt test-support packages must not leak into the core.
func TestExemptNotImportedByCore(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	for _, rel := range coreFiles(t, root) {
		f, err := parser.ParseFile(fset, filepath.Join(root, filepath.FromSlash(rel)), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parse %s: %v", rel, err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for ex := range exempt {
				if strings.HasSuffix(path, "/"+ex) {
					pos := fset.Position(imp.Pos())
					t.Errorf("%s:%d: core file imports test-support package %s", rel, pos.Line, path)
				}
			}
		}
	}
}

// The checker itself: every kind of violation is found, at the right line,
// and clean code passes.
func TestCheckerFindsViolations(t *testing.T) {
	src := `package bad

import (
	"fmt"
	clock "time"
	_ "os"
	"sync"
	"math/rand/v2"
)

var now = clock.Now

func f() {
	go func() {}()
	_ = clock.Now()
	fmt.Println(rand.IntN(3))
	var mu sync.Mutex
	_ = mu
	g(clock.Now)
}

func g(func() clock.Time) {}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "bad.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range checkFile(fset, f) {
		got = append(got, fmt.Sprintf("%d:%s", v.pos.Line, strings.SplitN(v.msg, ":", 2)[0]))
	}
	want := []string{
		`5:imports "time"`,
		`6:imports "os"`,
		`7:imports "sync"`,
		`8:imports "math/rand/v2"`,
		`11:uses time.Now as a value`,
		`14:go statement`,
		`15:calls time.Now`,
		`19:uses time.Now as a value`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations\n got  %q\n want %q", got, want)
	}

	dot := `package bad

import . "time"

func f() { _ = Now() }
`
	f, err = parser.ParseFile(fset, "dot.go", dot, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	vs := checkFile(fset, f)
	if len(vs) != 2 || vs[1].pos.Line != 5 || !strings.Contains(vs[1].msg, "dot import") {
		t.Fatalf("dot import: %v", vs)
	}
	if s := vs[0].String(); !strings.HasPrefix(s, "dot.go:3:") {
		t.Fatalf("violation not reported as file:line: %q", s)
	}

	clean := `package ok

import (
	"errors"
	"slices"
)

type T struct{ Now func() int64 }

func f(t T) int64 { _ = slices.Contains([]int{1}, 1); _ = errors.New("x"); return t.Now() }
`
	f, err = parser.ParseFile(fset, "ok.go", clean, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	if vs := checkFile(fset, f); len(vs) != 0 {
		t.Fatalf("clean file flagged: %v", vs)
	}
}
