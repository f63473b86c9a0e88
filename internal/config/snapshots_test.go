package config

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// docs/snapshots.md: the session key defaults are fixed words, never the
// host name, so equal sessions on two hosts get equal snapshot ids.
func TestSnapshotDefaults(t *testing.T) {
	s := Default().Snapshots
	if s.EventSource != "macpd" || s.ServerID != "default" || s.Dir != "" {
		t.Fatalf("defaults %+v", s)
	}
	if h, err := os.Hostname(); err == nil && (s.ServerID == h || s.EventSource == h) {
		t.Fatal("a default is the host name")
	}
	c := Default()
	if errs := c.validateSnapshots(); len(errs) != 0 {
		t.Fatal(errs)
	}
}

func TestSnapshotEnvFlagsAndValidation(t *testing.T) {
	c := Default()
	if err := c.FromEnv(env(map[string]string{"MACP_EVENT_SOURCE": "assay://macpd", "MACP_SERVER_ID": "eu-1", "MACP_SNAPSHOT_DIR": "/var/snap"})); err != nil {
		t.Fatal(err)
	}
	if c.Snapshots != (SnapshotConfig{EventSource: "assay://macpd", ServerID: "eu-1", Dir: "/var/snap"}) {
		t.Fatalf("from env: %+v", c.Snapshots)
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--server-id", "eu-2", "--event-source", "src", "--snapshot-dir", "/tmp/s"}); err != nil {
		t.Fatal(err)
	}
	if c.Snapshots != (SnapshotConfig{EventSource: "src", ServerID: "eu-2", Dir: "/tmp/s"}) {
		t.Fatalf("flags: %+v", c.Snapshots)
	}
	// Empty means unset in the environment, as for every MACP_* variable.
	c = Default()
	if err := c.FromEnv(env(map[string]string{"MACP_SERVER_ID": "", "MACP_EVENT_SOURCE": ""})); err != nil || c.Snapshots != DefaultSnapshots() {
		t.Fatalf("empty variables: %+v %v", c.Snapshots, err)
	}
	for name, args := range map[string][]string{
		"empty server id flag":    {"--server-id", ""},
		"empty event source flag": {"--event-source", ""},
	} {
		c := Default()
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		c.RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if errs := c.validateSnapshots(); len(errs) != 1 {
			t.Errorf("%s: %v", name, errs)
		}
	}
	for name, e := range map[string]map[string]string{
		"space":    {"MACP_SERVER_ID": "my host"},
		"too long": {"MACP_EVENT_SOURCE": strings.Repeat("x", 129)},
		"data dir": {"MACP_SNAPSHOT_DIR": "/data/", "MACP_DATA_DIR": "/data"},
	} {
		c := Default()
		if err := c.FromEnv(env(e)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "MACP_") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
