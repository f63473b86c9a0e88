package config

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
)

// SnapshotConfig holds the session snapshot settings (docs/snapshots.md):
// the session key's event source and server id, which every snapshot id
// covers, and an optional directory that receives a snapshot of each
// session when it ends.
type SnapshotConfig struct {
	// EventSource is the session key's event_source (MACP_EVENT_SOURCE,
	// --event-source). Default "macpd".
	EventSource string
	// ServerID is the session key's server_id (MACP_SERVER_ID,
	// --server-id). Default "default": never derived from the host name,
	// so equal sessions on two machines get equal ids unless configured
	// otherwise.
	ServerID string
	// Dir, when set, receives the payload (payloads/sha256-<hex>.json)
	// and report (reports/<session id>.json) of every session that ends,
	// written in the background after the terminal record is durable
	// (MACP_SNAPSHOT_DIR, --snapshot-dir). "" = off.
	Dir string
}

// DefaultSnapshots returns the documented defaults.
func DefaultSnapshots() SnapshotConfig {
	return SnapshotConfig{EventSource: "macpd", ServerID: "default"}
}

// snapshotTokenOK is the snapshot identifier grammar: 1..128 printable,
// non-space ASCII characters (internal/snapshot keeps such values
// verbatim).
func snapshotTokenOK(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (c *Config) validateSnapshots() []error {
	s := &c.Snapshots
	var errs []error
	if !snapshotTokenOK(s.EventSource) {
		errs = append(errs, fmt.Errorf("MACP_EVENT_SOURCE (--event-source) %q must be 1 to 128 printable ASCII characters without spaces", s.EventSource))
	}
	if !snapshotTokenOK(s.ServerID) {
		errs = append(errs, fmt.Errorf("MACP_SERVER_ID (--server-id) %q must be 1 to 128 printable ASCII characters without spaces", s.ServerID))
	}
	if s.Dir != "" && !c.MemoryOnly && filepath.Clean(s.Dir) == filepath.Clean(c.DataDir) {
		errs = append(errs, errors.New("MACP_SNAPSHOT_DIR (--snapshot-dir) must not be the data directory"))
	}
	return errs
}

func (c *Config) snapshotsFromEnv(lookup Env) []error {
	s := &c.Snapshots
	// As for every MACP_* variable, empty means unset (the default);
	// Validate refuses an empty value set by flag or in code.
	if v, ok := lookup("MACP_EVENT_SOURCE"); ok && v != "" {
		s.EventSource = v
	}
	if v, ok := lookup("MACP_SERVER_ID"); ok && v != "" {
		s.ServerID = v
	}
	if v, ok := lookup("MACP_SNAPSHOT_DIR"); ok && v != "" {
		s.Dir = v
	}
	return nil
}

func (c *Config) registerSnapshotFlags(fs *flag.FlagSet) {
	s := &c.Snapshots
	fs.StringVar(&s.EventSource, "event-source", s.EventSource, "event_source of snapshot session keys (MACP_EVENT_SOURCE)")
	fs.StringVar(&s.ServerID, "server-id", s.ServerID, "server_id of snapshot session keys; never defaults to the host name (MACP_SERVER_ID)")
	fs.StringVar(&s.Dir, "snapshot-dir", s.Dir, "write each ended session's snapshot payload and report here, empty = off (MACP_SNAPSHOT_DIR)")
}
