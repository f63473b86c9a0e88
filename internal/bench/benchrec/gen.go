// Package benchrec is the recovery benchmark (issue #4): it writes a data
// directory of many Decision sessions straight through the durable store
// (pebblestore), every record produced by the session core so that it
// replays exactly, and then measures
//
//   - macpd's startup: from exec to the "macpd serving" log line and to the
//     first answered GetSession, the recovery log's own figures, the CPU
//     time spent, and the process's resident memory (VmRSS, VmHWM) once it
//     serves (Measure, which runs the macpd binary as a child);
//   - offline replay of the whole directory in-process: the store's read
//     and chain check alone, then read plus replay through the core, in
//     envelopes per second, and the Go heap held by the OPEN sessions once
//     replayed (Replay).
//
// macpbench recovery is its command line; docs/benchmarks.md has the
// figures and the commands that produced them.
package benchrec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// Mix is the share of each kind of session, as fractions of Sessions that
// sum to 1 (the last kind takes the rounding).
type Mix struct {
	Open      float64 `json:"open"`      // still OPEN: replayed at boot
	Resolved  float64 `json:"resolved"`  // ended by a Commitment
	Cancelled float64 `json:"cancelled"` // ended by the runtime's SessionCancel
	Expired   float64 `json:"expired"`   // ended by TTL (an Expire record)
}

// Mixes by name (GenConfig.Mix, macpbench recovery gen --mix).
var Mixes = map[string]Mix{
	// realistic: sessions last minutes while history is kept for days, so
	// most stored sessions have ended; one in ten is still open.
	"realistic": {Open: 0.10, Resolved: 0.72, Cancelled: 0.09, Expired: 0.09},
	// all-open: the worst case for boot, every session is replayed.
	"all-open": {Open: 1},
}

// GenConfig describes a data directory to write.
type GenConfig struct {
	// Dir is the data directory (MACP_DATA_DIR); it must not exist or be
	// empty.
	Dir string
	// Sessions to write (default 100,000).
	Sessions int
	// Envelopes per session, the SessionStart included (default 10, at
	// least 4). An expired session has one more record (Expire carries no
	// envelope).
	Envelopes int
	// Participants declared per session (default 3).
	Participants int
	// Mix of session kinds (default Mixes["realistic"]).
	Mix Mix
	// Seed makes ids and the order of kinds reproducible.
	Seed uint64
	// Batch is the number of records per store Append (default 4096; each
	// Append is one sync, as one runtime commit group).
	Batch int
	// SplitSessions appends each session's SessionStart and the rest of
	// its records in two Appends (the first before the second), as a
	// runtime receiving a session's messages over time does, instead of
	// the whole session in one: a store that writes a session's summary
	// only with its first batch and its end (pebblestore's index entry)
	// then holds OPEN sessions whose summary lags their history.
	SplitSessions bool
	// NowMs is the runtime clock when the last session started (default:
	// the wall clock). Sessions start over the hour before it.
	NowMs int64
	// OpenTTL is the ttl of sessions that are still open (default 24h, the
	// default MACP_MAX_TTL): macpd must be measured before it passes, or
	// recovery expires them (and writes Expire records).
	OpenTTL time.Duration
}

func (c *GenConfig) defaults() error {
	if c.Sessions == 0 {
		c.Sessions = 100_000
	}
	if c.Envelopes == 0 {
		c.Envelopes = 10
	}
	if c.Participants == 0 {
		c.Participants = 3
	}
	if c.Mix == (Mix{}) {
		c.Mix = Mixes["realistic"]
	}
	if c.Batch <= 0 {
		c.Batch = 4096
	}
	if c.NowMs == 0 {
		c.NowMs = time.Now().UnixMilli()
	}
	if c.OpenTTL == 0 {
		c.OpenTTL = 24 * time.Hour
	}
	m := c.Mix
	switch {
	case c.Dir == "":
		return errors.New("benchrec: a data directory is required")
	case c.Sessions < 1 || c.Envelopes < 4 || c.Participants < 1:
		return errors.New("benchrec: sessions >= 1, envelopes >= 4 and participants >= 1")
	case m.Open < 0 || m.Resolved < 0 || m.Cancelled < 0 || m.Expired < 0:
		return errors.New("benchrec: mix fractions must not be negative")
	case m.Open+m.Resolved+m.Cancelled+m.Expired < 0.999 || m.Open+m.Resolved+m.Cancelled+m.Expired > 1.001:
		return fmt.Errorf("benchrec: mix fractions sum to %v, not 1", m.Open+m.Resolved+m.Cancelled+m.Expired)
	case c.OpenTTL < time.Hour:
		return errors.New("benchrec: the open sessions' ttl must be at least an hour")
	}
	return nil
}

// Kind of a generated session.
type Kind uint8

// Session kinds.
const (
	Open Kind = iota
	Resolved
	Cancelled
	Expired
)

func (k Kind) String() string {
	return [...]string{"open", "resolved", "cancelled", "expired"}[k]
}

// Manifest describes a generated directory; Generate stores it as the meta
// value MetaKey, Measure reads it (to know what to expect, and a session to
// ask for once macpd serves).
type Manifest struct {
	Sessions  int            `json:"sessions"`
	Envelopes int64          `json:"envelopes"`
	Records   int64          `json:"records"`
	Kinds     map[string]int `json:"kinds"`
	Mix       Mix            `json:"mix"`
	// NowMs is GenConfig.NowMs; OpenDeadlineMs the earliest deadline of an
	// open session (measure before it).
	NowMs          int64 `json:"now_ms"`
	OpenDeadlineMs int64 `json:"open_deadline_ms,omitempty"`
	// Probe is a session (an open one when there is one) and its initiator.
	ProbeSession   string `json:"probe_session"`
	ProbeInitiator string `json:"probe_initiator"`
	// GenSeconds is how long writing took; DiskBytes the directory's size.
	GenSeconds float64 `json:"gen_s"`
	DiskBytes  int64   `json:"disk_bytes"`
}

// MetaKey is the store meta key holding the Manifest (JSON).
const MetaKey = "benchrec/manifest"

// Generate writes cfg.Dir. progress, if not nil, is called after each
// Append with the sessions written so far.
func Generate(ctx context.Context, cfg GenConfig, progress func(done int)) (*Manifest, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if entries, err := os.ReadDir(cfg.Dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("benchrec: %s is not empty", cfg.Dir)
	}
	start := time.Now()
	st, err := pebblestore.Open(cfg.Dir, pebblestore.Options{})
	if err != nil {
		return nil, err
	}
	defer st.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := newGenerator(cfg)
	man := &Manifest{Sessions: cfg.Sessions, Kinds: map[string]int{}, Mix: cfg.Mix, NowMs: cfg.NowMs}
	// The core builds batches while the store writes the previous one.
	type batch struct {
		recs     []session.Record
		rest     []session.Record // SplitSessions: appended after recs
		sessions int
	}
	batches := make(chan batch, 2)
	genErr := make(chan error, 1)
	probeOpen := false
	go func() {
		defer close(batches)
		var b batch
		for i := range cfg.Sessions {
			if ctx.Err() != nil {
				genErr <- ctx.Err()
				return
			}
			recs, kind, err := g.session(i)
			if err != nil {
				genErr <- err
				return
			}
			man.Kinds[kind.String()]++
			for _, r := range recs {
				man.Records++
				if r.Envelope != nil {
					man.Envelopes++
				}
			}
			if man.ProbeSession == "" || (kind == Open && !probeOpen) {
				man.ProbeSession, man.ProbeInitiator = recs[0].SessionID, recs[0].Envelope.Sender
				probeOpen = kind == Open
			}
			if kind == Open {
				dl := recs[0].Start.DeadlineMs
				if man.OpenDeadlineMs == 0 || dl < man.OpenDeadlineMs {
					man.OpenDeadlineMs = dl
				}
			}
			if cfg.SplitSessions {
				b.recs = append(b.recs, recs[0])
				b.rest = append(b.rest, recs[1:]...)
			} else {
				b.recs = append(b.recs, recs...)
			}
			b.sessions++
			if len(b.recs)+len(b.rest) >= cfg.Batch {
				batches <- b
				b = batch{}
			}
		}
		if len(b.recs) > 0 {
			batches <- b
		}
		genErr <- nil
	}()
	done := 0
	for b := range batches {
		err := st.Append(ctx, b.recs)
		if err == nil && len(b.rest) > 0 {
			err = st.Append(ctx, b.rest)
		}
		if err != nil {
			cancel()
			for range batches { // let the generator stop
			}
			return nil, fmt.Errorf("benchrec: append: %w", err)
		}
		done += b.sessions
		if progress != nil {
			progress(done)
		}
	}
	if err := <-genErr; err != nil {
		return nil, err
	}
	man.GenSeconds = time.Since(start).Seconds()
	raw, err := json.Marshal(man)
	if err != nil {
		return nil, err
	}
	if err := st.PutMeta(ctx, MetaKey, raw); err != nil {
		return nil, err
	}
	if err := st.Close(); err != nil {
		return nil, err
	}
	man.DiskBytes = dirSize(cfg.Dir)
	return man, nil
}

// ReadManifest returns the Manifest of a generated directory (the store
// opened read-only; macpd must not be running on it).
func ReadManifest(ctx context.Context, dir string) (*Manifest, error) {
	st, err := pebblestore.Open(dir, pebblestore.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var man *Manifest
	err = st.ListMeta(ctx, MetaKey, func(key string, val []byte) error {
		if key != MetaKey {
			return nil
		}
		man = new(Manifest)
		return json.Unmarshal(val, man)
	})
	if err != nil {
		return nil, err
	}
	if man == nil {
		return nil, fmt.Errorf("benchrec: %s was not written by macpbench recovery gen (no %s meta key)", dir, MetaKey)
	}
	man.DiskBytes = dirSize(dir)
	return man, nil
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// generator builds sessions with the session core.
type generator struct {
	cfg    GenConfig
	deps   session.Deps
	rng    *rand.Rand
	kinds  []Kind
	agents []string // participant identities
	inits  []string // initiator identities
}

// Modes is the registry the generated sessions are bound to: the Decision
// mode, as macpd registers it.
func Modes() *mode.Registry {
	return mode.NewRegistry(mode.Entry{Mode: decision.New(), Kind: mode.Standard, BuiltIn: true})
}

func newGenerator(cfg GenConfig) *generator {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6d616370))
	g := &generator{
		cfg:  cfg,
		deps: session.Deps{Modes: Modes(), Policies: policy.DefaultOnly{}, Limits: session.DefaultLimits()},
		rng:  rng,
	}
	// Exact counts of each kind, in a seeded random order.
	n := cfg.Sessions
	counts := []int{
		int(cfg.Mix.Open*float64(n) + 0.5),
		int(cfg.Mix.Resolved*float64(n) + 0.5),
		int(cfg.Mix.Cancelled*float64(n) + 0.5),
	}
	counts = append(counts, max(0, n-counts[0]-counts[1]-counts[2]))
	for k, c := range counts {
		for range c {
			if len(g.kinds) < n {
				g.kinds = append(g.kinds, Kind(k))
			}
		}
	}
	for len(g.kinds) < n {
		g.kinds = append(g.kinds, Open)
	}
	rng.Shuffle(n, func(i, j int) { g.kinds[i], g.kinds[j] = g.kinds[j], g.kinds[i] })
	for i := range 200 {
		g.agents = append(g.agents, "agent-"+strconv.Itoa(i))
	}
	for i := range 20 {
		g.inits = append(g.inits, "coordinator-"+strconv.Itoa(i))
	}
	return g
}

func (g *generator) uuid() string {
	var b [16]byte
	for i := 0; i < 16; i += 8 {
		v := g.rng.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return uuid.UUID(b).String()
}

func marshal(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err) // fixed, valid messages
	}
	return b
}

// session builds the records of session i: a SessionStart, a Proposal,
// deliberation (Evaluations, every fourth an Objection), Votes from every
// participant (up to half of the slots), then by kind nothing more (open),
// a Commitment (resolved), the runtime's SessionCancel (cancelled) or,
// after all its envelopes, TTL expiry (expired). Times advance by 0.2 to
// 2 s per message; sessions start spread over the hour before NowMs.
func (g *generator) session(i int) ([]session.Record, Kind, error) {
	cfg := g.cfg
	kind := g.kinds[i]
	now := cfg.NowMs - time.Hour.Milliseconds() + int64(i)*time.Hour.Milliseconds()/int64(cfg.Sessions)
	tick := func() int64 {
		now += 200 + g.rng.Int64N(1800)
		return now
	}
	sid := g.uuid()
	initiator := g.inits[g.rng.IntN(len(g.inits))]
	parts := make([]string, 0, cfg.Participants)
	for len(parts) < cfg.Participants {
		p := g.agents[g.rng.IntN(len(g.agents))]
		if !contains(parts, p) {
			parts = append(parts, p)
		}
	}
	ttl := cfg.OpenTTL
	if kind == Expired {
		// Expired: a short ttl that runs out after the last envelope.
		ttl = time.Duration(cfg.Envelopes)*2*time.Second + time.Minute
	}
	env := func(typ, sender string, payload []byte) *macpv1.Envelope {
		return &macpv1.Envelope{
			MacpVersion: coord.ProtocolVersion, Mode: decision.ModeID, MessageType: typ,
			MessageId: g.uuid(), SessionId: sid, Sender: sender, TimestampUnixMs: now, Payload: payload,
		}
	}
	startPayload := marshal(&macpv1.SessionStartPayload{
		Intent:               "choose a deployment plan for service " + strconv.Itoa(i%997),
		Participants:         parts,
		ModeVersion:          decision.ModeVersion,
		ConfigurationVersion: "v1",
		TtlMs:                ttl.Milliseconds(),
		ContextId:            "ctx-" + strconv.Itoa(i%5000),
	})
	s, rec, err := session.Start(env(coord.TypeSessionStart, initiator, startPayload), now, g.deps)
	if err != nil {
		return nil, kind, fmt.Errorf("benchrec: session %d: SessionStart: %w", i, err)
	}
	recs := []session.Record{rec}
	step := func(e *macpv1.Envelope) error {
		out := s.Step(e, now, session.DefaultLimits())
		if !out.Accepted() {
			return fmt.Errorf("benchrec: session %d: %s from %s: %v", i, e.MessageType, e.Sender, out.Err)
		}
		recs = append(recs, out.Records...)
		return nil
	}
	// Envelopes after the SessionStart; the last one is the Commitment or
	// the SessionCancel for those kinds.
	body := cfg.Envelopes - 1
	if kind == Resolved || kind == Cancelled {
		body--
	}
	slots := body - 1 // after the Proposal
	votes := min(len(parts), slots/2)
	delib := slots - votes
	tick()
	if err := step(env(decision.TypeProposal, initiator, marshal(&decisionv1.ProposalPayload{
		ProposalId: "prop-1", Option: "roll out build " + strconv.Itoa(i) + " to the canary pool first",
		Rationale: "the canary pool catches regressions before they reach every region",
	}))); err != nil {
		return nil, kind, err
	}
	recs2 := []string{decision.RecApprove, decision.RecReview, decision.RecApprove, decision.RecBlock}
	for k := range delib {
		tick()
		p := parts[k%len(parts)]
		var e *macpv1.Envelope
		if k%4 == 3 {
			e = env(decision.TypeObjection, p, marshal(&decisionv1.ObjectionPayload{
				ProposalId: "prop-1", Reason: "the rollback runbook is not updated yet", Severity: decision.SeverityLow,
			}))
		} else {
			e = env(decision.TypeEvaluation, p, marshal(&decisionv1.EvaluationPayload{
				ProposalId: "prop-1", Recommendation: recs2[k%len(recs2)], Confidence: 0.5 + float64(k%5)/10,
				Reason: "load tests pass at 2x peak; error budget is healthy",
			}))
		}
		if err := step(e); err != nil {
			return nil, kind, err
		}
	}
	for k := range votes {
		tick()
		if err := step(env(decision.TypeVote, parts[k], marshal(&decisionv1.VotePayload{
			ProposalId: "prop-1", Vote: decision.VoteApprove, Reason: "ship it",
		}))); err != nil {
			return nil, kind, err
		}
	}
	switch kind {
	case Resolved:
		tick()
		if err := step(env(coord.TypeCommitment, initiator, marshal(&macpv1.CommitmentPayload{
			CommitmentId: "commit-" + sid[:8], Action: "decision.selected", AuthorityScope: "session",
			Reason: "all participants approved prop-1", ModeVersion: decision.ModeVersion,
			ConfigurationVersion: "v1", OutcomePositive: true,
		}))); err != nil {
			return nil, kind, err
		}
	case Cancelled:
		tick()
		out := s.Cancel(initiator, "superseded by a newer plan", g.uuid(), now)
		if out.Err != nil || len(out.Records) != 1 {
			return nil, kind, fmt.Errorf("benchrec: session %d: cancel: %v", i, out.Err)
		}
		recs = append(recs, out.Records...)
	case Expired:
		r, ok := s.ExpireIfDue(s.DeadlineMs)
		if !ok {
			return nil, kind, fmt.Errorf("benchrec: session %d: did not expire", i)
		}
		recs = append(recs, r)
	}
	return recs, kind, nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
