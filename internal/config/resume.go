package config

import (
	"flag"
	"fmt"
	"strconv"
)

// ResumeConfig holds the protocol-mode session settings (session/resume,
// docs/resume.md "Protocol mode").
type ResumeConfig struct {
	// ReplayWindow is the most records session/resume replays to catch
	// a client up on one session; a client further behind gets
	// catchup: false and none of the missed envelopes, and rehydrates
	// with session/get (MACP_REPLAY_WINDOW, --replay-window). 0, the
	// default, is the whole retained history: every resume catches up.
	ReplayWindow int
}

// DefaultResume returns the documented defaults.
func DefaultResume() ResumeConfig { return ResumeConfig{} }

func (c *Config) validateResume() []error {
	if c.Resume.ReplayWindow < 0 {
		return []error{fmt.Errorf("MACP_REPLAY_WINDOW (--replay-window) %d must be 0 (the whole history) or a positive number of records", c.Resume.ReplayWindow)}
	}
	return nil
}

func (c *Config) resumeFromEnv(lookup Env) []error {
	if v, ok := lookup("MACP_REPLAY_WINDOW"); ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return []error{fmt.Errorf("MACP_REPLAY_WINDOW %q: want a number of records (0 = the whole history)", v)}
		}
		c.Resume.ReplayWindow = n
	}
	return nil
}

func (c *Config) registerResumeFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.Resume.ReplayWindow, "replay-window", c.Resume.ReplayWindow, "most records session/resume replays per session; further behind answers catchup: false (0 = the whole history) (MACP_REPLAY_WINDOW)")
}
