package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// SpecCommit is the commit of the MACP spec repository
// (github.com/multiagentcoordinationprotocol/multiagentcoordinationprotocol)
// that macpd implements. `make spec` fetches it into .spec/.
const SpecCommit = "17ca7a16ef73640bbdde36d044dd5f911ae0f65b"

// Environment variables that point the tests at a spec checkout elsewhere.
const (
	ConformanceDirEnv       = "MACP_CONFORMANCE_DIR"        // the spec's schemas/conformance at SpecCommit
	ConformanceLatestDirEnv = "MACP_CONFORMANCE_LATEST_DIR" // the spec's newest fixtures and cmt-hash vectors
	SpecProtoDirEnv         = "MACP_SPEC_PROTO_DIR"         // a schemas/proto tree of macp-proto 0.1.6 (gen/drift_test.go)
	SpecAprilProtoDirEnv    = "MACP_SPEC_APRIL_PROTO_DIR"   // the spec's schemas/proto at SpecCommit
)

// RepoRoot returns the directory of the repository's go.mod, found by
// walking up from the test's working directory (its package directory).
func RepoRoot(t testing.TB) string {
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
			t.Fatal("testutil: no go.mod above the working directory")
		}
		dir = parent
	}
}

// ConformanceDir returns the directory of the spec's conformance fixtures
// (never copied into this repository): $MACP_CONFORMANCE_DIR when set,
// else ../shared/conformance beside the checkout (present in CI and in
// this project's workplace), else .spec/schemas/conformance inside it
// (written by `make spec`). When none holds fixtures the test fails,
// saying where it looked and how to get them: the fixture-driven tests
// never skip.
func ConformanceDir(t testing.TB) string {
	t.Helper()
	root := RepoRoot(t)
	var tried []string
	candidates := []string{
		filepath.Join(root, "..", "shared", "conformance"),
		filepath.Join(root, ".spec", "schemas", "conformance"),
	}
	if d := os.Getenv(ConformanceDirEnv); d != "" {
		candidates = []string{d}
	}
	for _, d := range candidates {
		if m, _ := filepath.Glob(filepath.Join(d, "*.json")); len(m) > 0 {
			return d
		}
		tried = append(tried, d)
	}
	t.Fatalf("the MACP spec's conformance fixtures were not found (looked in %q).\n"+
		"Run `make spec` to fetch the spec at the pinned commit %s into .spec/, "+
		"or set %s to a checkout's schemas/conformance directory.", tried, SpecCommit[:7], ConformanceDirEnv)
	return ""
}

// ConformanceLatestDir returns the directory of the spec's newest
// conformance fixtures (the new format: fully-qualified payload_type
// names, inline policy blocks) with the RFC-MACP-0013 commitment-hash
// vectors in its cmt-hash/ sub-directory: $MACP_CONFORMANCE_LATEST_DIR
// when set, else ../shared/conformance-latest beside the checkout. It is
// never copied into this repository and `make spec` does not fetch it
// (it gathers files from several spec commits, see its README.md). When
// the directory holds no fixtures the test fails, saying where it looked:
// the tests that read it never skip.
func ConformanceLatestDir(t testing.TB) string {
	t.Helper()
	d := filepath.Join(RepoRoot(t), "..", "shared", "conformance-latest")
	if e := os.Getenv(ConformanceLatestDirEnv); e != "" {
		d = e
	}
	if m, _ := filepath.Glob(filepath.Join(d, "*.json")); len(m) > 0 {
		return d
	}
	t.Fatalf("the MACP spec's newest conformance fixtures were not found (looked in %q).\n"+
		"Put them in ../shared/conformance-latest beside the checkout, "+
		"or set %s to a directory holding them (with the commitment-hash vectors in cmt-hash/).", d, ConformanceLatestDirEnv)
	return ""
}

// SpecProtoDir returns the schemas/proto tree of macp-proto 0.1.6 that
// proto/macp/ must equal ($MACP_SPEC_PROTO_DIR: the spec's schemas/proto at
// d0f9220 plus the four 0.1.4-0.1.6 additions, see the header of
// gen/testdata/spec-protos-0.1.6.txtpb), or "" when the variable is unset;
// without it gen's tests compare with that golden only. A set variable
// that names no directory fails the test.
func SpecProtoDir(t testing.TB) string {
	t.Helper()
	return protoDirFromEnv(t, SpecProtoDirEnv)
}

// SpecAprilProtoDir returns the spec's schemas/proto at SpecCommit (the
// April baseline, every element of which proto/macp/ must keep unchanged):
// $MACP_SPEC_APRIL_PROTO_DIR when set, else .spec/schemas/proto (written by
// `make spec`), or "" when neither exists; without it gen's tests compare
// with the golden gen/testdata/spec-protos-april.txtpb only. A set variable
// that names no directory fails the test.
func SpecAprilProtoDir(t testing.TB) string {
	t.Helper()
	if d := protoDirFromEnv(t, SpecAprilProtoDirEnv); d != "" {
		return d
	}
	d := filepath.Join(RepoRoot(t), ".spec", "schemas", "proto")
	if st, err := os.Stat(d); err == nil && st.IsDir() {
		return d
	}
	return ""
}

func protoDirFromEnv(t testing.TB, env string) string {
	t.Helper()
	d := os.Getenv(env)
	if d == "" {
		return ""
	}
	if st, err := os.Stat(d); err != nil || !st.IsDir() {
		t.Fatalf("%s=%s is not a directory", env, d)
	}
	return d
}
