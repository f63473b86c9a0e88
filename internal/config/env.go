package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/agnivade/levenshtein"
)

// EnvPrefix starts the name of every macpd setting in the environment.
const EnvPrefix = "MACP_"

// knownEnv is computed once: the names FromEnv looks up.
var knownEnv = sync.OnceValue(func() []string {
	seen := map[string]bool{}
	c := Default()
	// FromEnv looks every name up unconditionally; a lookup that records
	// the name and reports it unset lists them without a second table that
	// could drift from the first.
	_ = c.FromEnv(func(name string) (string, bool) {
		seen[name] = true
		return "", false
	})
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
})

// KnownEnv lists every environment variable macpd reads as a setting,
// sorted. It is derived from FromEnv itself (every name it looks up), so a
// setting added there is known here without another edit.
func KnownEnv() []string { return slices.Clone(knownEnv()) }

// OtherEnv are MACP_* variables that are not macpd settings but are read
// by the other programs of this repository (macpctl, macpbench, the test
// harnesses and scripts). They are often exported in the same shell as
// macpd's (the README exports MACP_ALLOW_INSECURE and MACP_ADDR for
// macpctl), so CheckEnv does not report them.
var OtherEnv = []string{
	"MACP_ADDR",                // macpctl, macpbench: the runtime's address
	"MACP_AGENT",               // macpctl, macpbench: dev bearer identity
	"MACP_TOKEN",               // macpctl, macpbench: bearer token
	"MACP_CONFORMANCE_DIR",     // tests: the spec's conformance fixtures
	"MACP_CLUSTER_SOAK",        // internal/cluster tests
	"MACP_CONSOLE_SCREENSHOTS", // internal/console tests
	"MACP_CRASH_SEED",          // internal/crashtest
	"MACP_CRASH_KEEP",          // internal/crashtest
	"MACP_CRASH_MACPD_ENV",     // internal/crashtest
	"MACP_RESUME_SEED",         // internal/httpapi tests
	"MACP_CROSS_SEED",          // internal/httpapi tests
}

// otherPrefixes start variables of the SDK integration scripts
// (scripts/*-it.sh) and the spec tooling, not macpd settings.
var otherPrefixes = []string{"MACP_IT_", "MACP_TS_IT_", "MACP_TEST_", "MACP_SDK_", "MACP_SPEC_", "MACP_PROTO_",
	"MACP_RUNTIME_", "MACP_HTTP_BASE", "MACP_INTEGRATION_"}

// UnknownEnv is a MACP_* variable of the environment that macpd does not
// read.
type UnknownEnv struct {
	// Name is the variable's name.
	Name string
	// Suggest is the known setting closest to Name by edit distance, ""
	// when none is close enough to be a likely misspelling.
	Suggest string
}

// String is the message macpd prints: the name, and the closest setting
// when there is one.
func (u UnknownEnv) String() string {
	if u.Suggest != "" {
		return fmt.Sprintf("%s is not a macpd setting (did you mean %s?)", u.Name, u.Suggest)
	}
	return fmt.Sprintf("%s is not a macpd setting (macpd -h lists them)", u.Name)
}

// CheckEnv returns the non-empty MACP_* variables of environ (os.Environ's
// "NAME=value" form) that are neither macpd settings (KnownEnv) nor read
// by the repository's other programs (OtherEnv), sorted by name, each
// with the closest setting.
func CheckEnv(environ []string) []UnknownEnv {
	known := knownEnv()
	var out []UnknownEnv
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if value == "" { // empty is unset for FromEnv too
			continue
		}
		if !strings.HasPrefix(name, EnvPrefix) || slices.Contains(known, name) || slices.Contains(OtherEnv, name) {
			continue
		}
		if slices.ContainsFunc(otherPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		out = append(out, UnknownEnv{Name: name, Suggest: closest(name, known)})
	}
	slices.SortFunc(out, func(a, b UnknownEnv) int { return cmp.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b UnknownEnv) bool { return a.Name == b.Name })
}

// closest returns the name in known with the smallest edit distance to
// name, if that distance is at most a third of name's length after the
// prefix (at least 2): MACP_HTTP_ADR and MACP_ALLOW_INSECUR are found,
// an unrelated MACP_FOO is not matched to anything.
func closest(name string, known []string) string {
	best, bestD := "", -1
	for _, k := range known {
		d := levenshtein.ComputeDistance(name, k)
		if bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	limit := max(2, (len(name)-len(EnvPrefix))/3)
	if bestD < 0 || bestD > limit {
		return ""
	}
	return best
}
