package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/macpd/macpd/internal/clikit"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/replay/verify"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/snapshot"
	"github.com/macpd/macpd/internal/snapshot/snapshotio"
	"github.com/macpd/macpd/internal/store"
)

func init() {
	commands = append(commands, cmd(
		"replay", "--data-dir DIR (SESSION_ID | --all) [--policy-file FILE | --mode-version V | --profile P]",
		"replay stored sessions offline through the core (stop macpd first) and print JSON: final state, outcome, "+
			"bound versions with their determinism class, snapshot id; exit 0 only if all equals what was stored. "+
			"--policy-file / --mode-version / --profile: a what-if under another bound version or protocol profile, with the first diverging sequence number",
		(*cli).replay,
	))
}

// replayDiverged makes macpctl exit 1 after printing its output.
type replayDiverged struct{ n int }

func (e replayDiverged) Error() string { return fmt.Sprintf("%d session(s) diverged", e.n) }

// outcomeJSON is a session's end as replay reports it.
type outcomeJSON struct {
	// Profile is the protocol profile the session is (or, in a what-if,
	// was re-decided) bound to.
	Profile       string `json:"profile"`
	State         string `json:"state"`
	AcceptedCount int    `json:"accepted_count"`
	EndedBy       string `json:"ended_by,omitempty"`
	CommitmentID  string `json:"commitment_id,omitempty"`
	Action        string `json:"action,omitempty"`
	Positive      *bool  `json:"outcome_positive,omitempty"`
}

type boundJSON struct {
	Kind             string `json:"kind"`
	ID               string `json:"id,omitempty"`
	Version          string `json:"version"`
	DeterminismClass string `json:"determinism_class"`
}

type replayJSON struct {
	SessionID       string      `json:"session_id"`
	Records         int         `json:"records"`
	Outcome         outcomeJSON `json:"outcome"`
	BoundVersions   []boundJSON `json:"bound_versions"`
	StateSnapshotID string      `json:"state_snapshot_id,omitempty"`
	MatchesStore    bool        `json:"matches_store"`
	Error           string      `json:"error,omitempty"`
}

type whatIfJSON struct {
	SessionID       string       `json:"session_id"`
	Rebind          boundJSON    `json:"rebind"`
	Original        outcomeJSON  `json:"original"`
	WhatIf          *outcomeJSON `json:"what_if,omitempty"`
	WhatIfSnapshot  string       `json:"what_if_state_snapshot_id,omitempty"`
	Diverged        bool         `json:"diverged"`
	FirstDivergence uint64       `json:"first_divergence_seq,omitempty"`
	DivergenceCode  string       `json:"divergence_code,omitempty"`
	// DivergenceState is set when the first diverging envelope was
	// accepted but left the session in another state (a cancel: EXPIRED
	// under 2026-04, CANCELLED under 2026-09).
	DivergenceState *stateDivergenceJSON `json:"divergence_state,omitempty"`
	Error           string               `json:"error,omitempty"`
}

type stateDivergenceJSON struct {
	Stored string `json:"stored"`
	WhatIf string `json:"what_if"`
}

func (c *cli) replay(args []string) error {
	keys := c.registerSnapshotKeyFlags()
	def := cmp.Or(c.Env("MACP_DATA_DIR"), config.Default().DataDir)
	dir := c.FS.String("data-dir", def, "the data directory (MACP_DATA_DIR)")
	all := c.FS.Bool("all", false, "replay every stored session; prints diverged sessions, then \"N sessions replayed, N diverged\"")
	policyFile := c.FS.String("policy-file", "", "what-if: bind this RFC-MACP-0012 policy descriptor (JSON) instead of the stored one")
	modeVersion := c.FS.String("mode-version", "", "what-if: bind this mode version instead of the stored one")
	profile := c.FS.String("profile", "", "what-if: re-decide under this protocol profile instead of the recorded one: 2026-04, or latest (2026-09)")
	pos, err := c.Parse(args, -1)
	if err != nil {
		return err
	}
	switch {
	case *all && len(pos) > 0:
		return clikit.Usagef("give a session id or --all, not both")
	case !*all && len(pos) != 1:
		return clikit.Usagef("give one session id, or --all")
	case btoi(*policyFile != "")+btoi(*modeVersion != "")+btoi(*profile != "") > 1:
		return clikit.Usagef("--policy-file, --mode-version and --profile are separate what-ifs; pick one")
	}
	var rb *snapshot.Rebind
	if *policyFile != "" {
		d, err := readPolicyFile(*policyFile)
		if err != nil {
			return clikit.Usagef("--policy-file: %v", err)
		}
		rb = &snapshot.Rebind{Policy: &d}
	} else if *modeVersion != "" {
		rb = &snapshot.Rebind{ModeVersion: *modeVersion}
	} else if *profile != "" {
		p, ok := coord.ResolveProfile(*profile)
		if !ok || *profile == "" {
			return clikit.Usagef("--profile %q: want 2026-04, 2026-09 or latest", *profile)
		}
		rb = &snapshot.Rebind{Profile: p}
	}
	st, modes, err := c.openDataDir(*dir)
	if err != nil {
		return err
	}
	defer st.Close()
	ids := pos
	if *all {
		if err := st.List(c.Ctx, func(info store.SessionInfo) error { ids = append(ids, info.SessionID); return nil }); err != nil {
			return err
		}
	}
	o := snapshot.Options{EventSource: *keys.eventSource, ServerID: *keys.serverID}
	lim := session.DefaultLimits()
	diverged := 0
	enc := json.NewEncoder(c.Stdout)
	for _, id := range ids {
		if err := c.Ctx.Err(); err != nil {
			return err
		}
		var out any
		bad := false
		if rb != nil {
			w := c.whatIf(st, modes, lim, id, *rb, o)
			out, bad = w, w.Diverged || w.Error != ""
		} else {
			r := c.replayOne(st, modes, lim, id, o)
			out, bad = r, !r.MatchesStore
		}
		if bad {
			diverged++
		}
		if !*all || bad {
			if err := enc.Encode(out); err != nil {
				return err
			}
		}
	}
	if *all {
		fmt.Fprintf(c.Stdout, "%d sessions replayed, %d diverged\n", len(ids), diverged)
	}
	if diverged > 0 && rb == nil {
		return replayDiverged{diverged}
	}
	return nil
}

// replayOne verifies one session (hash chain, replay, stored summary:
// internal/replay/verify) and reports what the replay produced.
func (c *cli) replayOne(st store.Store, modes session.Modes, lim session.Limits, id string, o snapshot.Options) replayJSON {
	r := replayJSON{SessionID: id}
	info, err := st.Info(c.Ctx, id)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	v := verify.Session(c.Ctx, st, info, modes, lim)
	recs, err := snapshotio.StoreSource{Store: st}.Records(c.Ctx, id)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Records = len(recs)
	in, s, err := snapshot.InputFromRecords(recs, modes, lim)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Outcome = outcomeOf(s, len(in.Envelopes))
	r.BoundVersions = boundVersions(modes, s)
	p, err := snapshot.Build(in, o)
	if err == nil {
		var sealed snapshot.Sealed
		if sealed, err = snapshot.Seal(p); err == nil {
			r.StateSnapshotID = string(sealed.ID)
		}
	}
	switch {
	case v.Err != nil:
		r.Error = v.Err.Error()
	case err != nil:
		r.Error = err.Error()
	default:
		r.MatchesStore = true
	}
	return r
}

func (c *cli) whatIf(st store.Store, modes session.Modes, lim session.Limits, id string, rb snapshot.Rebind, o snapshot.Options) whatIfJSON {
	w := whatIfJSON{SessionID: id}
	recs, err := snapshotio.StoreSource{Store: st}.Records(c.Ctx, id)
	if err != nil {
		w.Error = err.Error()
		return w
	}
	in, s, err := snapshot.InputFromRecords(recs, modes, lim)
	if err != nil {
		w.Error = "the stored history does not replay: " + err.Error()
		return w
	}
	w.Original = outcomeOf(s, len(in.Envelopes))
	switch {
	case rb.Policy != nil:
		w.Rebind = boundJSON{Kind: "policy", Version: rb.Policy.ID, DeterminismClass: "semantic-deterministic"}
	case rb.Profile != "":
		// The profile selects rules the pure core evaluates.
		w.Rebind = boundJSON{Kind: "profile", Version: rb.Profile, DeterminismClass: "semantic-deterministic"}
	default:
		w.Rebind = boundJSON{Kind: "mode", ID: s.Binding.Mode, Version: rb.ModeVersion, DeterminismClass: modeClass(modes, s.Binding.Mode, rb.ModeVersion)}
	}
	if rb.Policy != nil && rb.Policy.Mode != "*" && rb.Policy.Mode != s.Binding.Mode {
		w.Error = fmt.Sprintf("policy %s targets mode %s, the session is %s", rb.Policy.ID, rb.Policy.Mode, s.Binding.Mode)
		return w
	}
	res, err := snapshot.ReplayWhatIf(recs, modes, lim, rb)
	if err != nil {
		w.Error = err.Error()
		return w
	}
	w.FirstDivergence = res.FirstDivergence
	w.Diverged = res.FirstDivergence != 0
	if w.Diverged {
		d := res.Decisions[res.FirstDivergence-1]
		w.DivergenceCode = d.Code
		if d.StateDiverged() {
			w.DivergenceState = &stateDivergenceJSON{Stored: d.Stored.String(), WhatIf: d.State.String()}
		}
	}
	if res.Session != nil {
		oc := outcomeOf(res.Session, len(res.Accepted))
		w.WhatIf = &oc
		wi := snapshot.InputOf(res.Session, nil)
		wi.Envelopes = res.Accepted
		if p, err := snapshot.Build(wi, o); err == nil {
			if sealed, err := snapshot.Seal(p); err == nil {
				w.WhatIfSnapshot = string(sealed.ID)
			}
		}
		if !w.Diverged && (oc.State != w.Original.State || oc.Action != w.Original.Action) {
			w.Diverged = true
		}
	}
	return w
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func outcomeOf(s *session.Session, accepted int) outcomeJSON {
	o := outcomeJSON{Profile: s.Binding.Profile, State: s.Status.String(), AcceptedCount: accepted}
	switch {
	case s.Resolution != nil:
		pos := s.Resolution.OutcomePositive
		o.EndedBy, o.CommitmentID, o.Action, o.Positive = "commitment", s.Resolution.CommitmentId, s.Resolution.Action, &pos
	case s.Cancellation != nil:
		o.EndedBy = "cancel"
	case s.Status == session.Expired:
		o.EndedBy = "ttl"
	}
	return o
}

// boundVersions lists a session's bound versions with their determinism
// class (RFC-MACP-0003 §5; docs/spec-decisions.md): the mode's from its
// descriptor; a policy is evaluated by the pure core from the descriptor
// stored with the session (semantic-deterministic); a configuration
// version is an opaque label macpd binds and checks but does not
// interpret (structural-only).
func boundVersions(modes session.Modes, s *session.Session) []boundJSON {
	b := s.Binding
	return []boundJSON{
		{Kind: "mode", ID: b.Mode, Version: b.ModeVersion, DeterminismClass: modeClass(modes, b.Mode, b.ModeVersion)},
		{Kind: "configuration", Version: b.ConfigurationVersion, DeterminismClass: "structural-only"},
		{Kind: "policy", Version: b.PolicyVersion, DeterminismClass: "semantic-deterministic"},
	}
}

func modeClass(modes session.Modes, id, version string) string {
	e, ok := modes.Lookup(id)
	if !ok || e.Mode.Descriptor().GetModeVersion() != version {
		return "unknown"
	}
	return cmp.Or(e.Mode.Descriptor().GetDeterminismClass(), "unknown")
}

// readPolicyFile reads an RFC-MACP-0012 policy descriptor: a JSON object
// with policy_id, mode, description, rules (a JSON object, or its text as
// a string, as in macp.v1.PolicyDescriptor) and schema_version (default
// 1). It is checked as RegisterPolicy would (policy.CheckRegistration).
func readPolicyFile(path string) (policy.Descriptor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return policy.Descriptor{}, err
	}
	var raw struct {
		PolicyID      string          `json:"policy_id"`
		Mode          string          `json:"mode"`
		Description   string          `json:"description"`
		Rules         json.RawMessage `json:"rules"`
		SchemaVersion *uint32         `json:"schema_version"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return policy.Descriptor{}, fmt.Errorf("not a policy descriptor: %v", err)
	}
	d := policy.Descriptor{ID: raw.PolicyID, Mode: raw.Mode, Description: raw.Description, SchemaVersion: 1}
	if raw.SchemaVersion != nil {
		d.SchemaVersion = *raw.SchemaVersion
	}
	rules := strings.TrimSpace(string(raw.Rules))
	if strings.HasPrefix(rules, `"`) {
		if err := json.Unmarshal(raw.Rules, &rules); err != nil {
			return policy.Descriptor{}, err
		}
	}
	d.Rules = rules
	if _, err := policy.CheckRegistration(d); err != nil {
		return policy.Descriptor{}, err
	}
	return d, nil
}
