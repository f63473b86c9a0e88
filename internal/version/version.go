// Package version reports what a macpd binary was built from, read from the
// Go build information (runtime/debug.ReadBuildInfo): the main module's
// version (a tag such as v0.3.0 for `go install ...@v0.3.0`, "(devel)" for
// a build in a checkout) and the VCS revision, time and dirty flag that
// `go build` stamps into binaries built inside a git checkout.
package version

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Info is what a binary was built from.
type Info struct {
	Module, Version string
	Revision, Time  string
	Modified        bool
	GoVersion       string
}

// Read returns the running binary's Info; ok is false when the binary
// carries no build information.
func Read() (Info, bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{}, false
	}
	return FromBuildInfo(bi), true
}

// FromBuildInfo extracts Info from build information.
func FromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Module: bi.Main.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the one-line form: "PROGRAM VERSION (revision REV[, modified], TIME) GO".
func (in Info) String(program string) string {
	v := in.Version
	if v == "" {
		v = "(unknown)"
	}
	var parts []string
	if in.Revision != "" {
		r := "revision " + in.Revision
		if in.Modified {
			r += ", modified"
		}
		parts = append(parts, r)
	}
	if in.Time != "" {
		parts = append(parts, in.Time)
	}
	s := program + " " + v
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	if in.GoVersion != "" {
		s += " " + in.GoVersion
	}
	return s
}

// Line returns the running binary's version line for program.
func Line(program string) string {
	in, ok := Read()
	if !ok {
		return fmt.Sprintf("%s (no build information)", program)
	}
	return in.String(program)
}

// Short is the version a running macpd reports to clients (Initialize
// runtime_info.version, GetManifest): the module version when the binary
// was built from a tagged module (`go install ...@v0.3.0` gives "v0.3.0"),
// else "devel" with the first 12 digits of the VCS revision and "+dirty"
// when the tree was modified, else "devel".
func (in Info) Short() string {
	if in.Version != "" && in.Version != "(devel)" {
		return in.Version
	}
	s := "devel"
	if in.Revision != "" {
		s += "+" + in.Revision[:min(12, len(in.Revision))]
		if in.Modified {
			s += ".dirty"
		}
	}
	return s
}

// Current is Read().Short(), "devel" without build information.
func Current() string {
	in, ok := Read()
	if !ok {
		return "devel"
	}
	return in.Short()
}
