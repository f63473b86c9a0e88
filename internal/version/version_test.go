package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/macpd/macpd", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-11-25T20:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := FromBuildInfo(bi).String("macpd")
	want := "macpd v0.3.0 (revision abc123, modified, 2026-11-25T20:00:00Z) go1.26.0"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	got = FromBuildInfo(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}).String("macpctl")
	if got != "macpctl (devel)" {
		t.Fatalf("got %q", got)
	}
}

// A test binary has build information with the Go version.
func TestLine(t *testing.T) {
	if l := Line("x"); !strings.HasPrefix(l, "x ") || !strings.Contains(l, "go1.") {
		t.Fatalf("Line = %q", l)
	}
}

func TestShort(t *testing.T) {
	for _, tc := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "v0.3.0", Revision: "0123456789abcdef"}, "v0.3.0"},
		{Info{Version: "(devel)", Revision: "0123456789abcdef"}, "devel+0123456789ab"},
		{Info{Version: "(devel)", Revision: "0123456789abcdef", Modified: true}, "devel+0123456789ab.dirty"},
		{Info{Version: "(devel)"}, "devel"},
		{Info{}, "devel"},
	} {
		if got := tc.in.Short(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.in, got, tc.want)
		}
	}
}
