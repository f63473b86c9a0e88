package snapshot_test

import (
	"fmt"
	"testing"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

const (
	decisionMode = "macp.mode.decision.v1"
	baseMs       = int64(1_770_000_000_000)
)

func registry() *mode.Registry {
	return mode.NewRegistry(mode.Entry{Mode: decision.New(), Kind: mode.Standard, BuiltIn: true})
}

var limits = session.DefaultLimits()

func pb(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// policies is a policy.Lookup over a fixed set of descriptors.
type policies []policy.Descriptor

func (ps policies) Policy(id string) (policy.Descriptor, bool) {
	for _, d := range ps {
		if d.ID == id {
			return d, true
		}
	}
	return policy.Descriptor{}, false
}

// hist drives one decision session through the core (as the runtime
// would) and keeps the records. Times start at t and step by 7 ms; the
// knobs let tests change one thing at a time.
type hist struct {
	t    *testing.T
	s    *session.Session
	recs []session.Record
	now  int64
	n    int
	// nextID, if set, is the next envelope's message id; commitmentID,
	// if set, the Commitment's commitment id (default "c1").
	nextID, commitmentID string
	proposer             string
}

type startOpts struct {
	id, intent, policyID string
	extensions           map[string][]byte
	pols                 policies
	t                    int64
	// profile is the protocol profile the session is bound to ("" for
	// 2026-04, "latest").
	profile string
	// proposer sends the Proposal: "coord" (the initiator) by default
	// under 2026-04, "alice" under latest, whose Decision rules admit
	// proposals from declared participants only.
	proposer string
}

func newHist(t *testing.T, o startOpts) *hist {
	t.Helper()
	if o.t == 0 {
		o.t = baseMs
	}
	if o.intent == "" {
		o.intent = "choose a database"
	}
	pols := append(policies{policy.Default()}, o.pols...)
	h := &hist{t: t, now: o.t, proposer: o.proposer}
	if h.proposer == "" {
		h.proposer = "coord"
		if o.profile != "" {
			h.proposer = "alice"
		}
	}
	env := &macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion, Mode: decisionMode, MessageType: coord.TypeSessionStart,
		MessageId: "msg-start-" + o.id, SessionId: o.id, Sender: "coord", TimestampUnixMs: o.t,
		Payload: pb(&macpv1.SessionStartPayload{
			Intent: o.intent, Participants: []string{"alice", "bob"}, ModeVersion: decision.New().Descriptor().ModeVersion,
			ConfigurationVersion: "cfg-1", PolicyVersion: o.policyID, TtlMs: 600_000, Extensions: o.extensions,
		}),
	}
	lim := limits
	lim.Profile = o.profile
	s, rec, err := session.Start(env, o.t, session.Deps{Modes: registry(), Policies: pols, Limits: lim})
	if err != nil {
		t.Fatalf("SessionStart: %v", err)
	}
	h.s, h.recs = s, []session.Record{rec}
	return h
}

func (h *hist) send(sender, typ string, payload []byte) *hist {
	h.t.Helper()
	h.now += 7
	h.n++
	env := &macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion, Mode: decisionMode, MessageType: typ, MessageId: fmt.Sprintf("msg-%d", h.n),
		SessionId: h.s.ID, Sender: sender, TimestampUnixMs: h.now, Payload: payload,
	}
	if h.nextID != "" {
		env.MessageId, h.nextID = h.nextID, ""
	}
	out := h.s.Step(env, h.now, limits)
	if !out.Accepted() {
		h.t.Fatalf("%s from %s rejected: %v", typ, sender, out.Err)
	}
	h.recs = append(h.recs, out.Records...)
	return h
}

func (h *hist) propose(rationale string) *hist {
	return h.send(h.proposer, "Proposal", pb(&decisionv1.ProposalPayload{ProposalId: "p1", Option: "postgres", Rationale: rationale}))
}

func (h *hist) vote(who, reason string) *hist {
	return h.send(who, "Vote", pb(&decisionv1.VotePayload{ProposalId: "p1", Vote: "APPROVE", Reason: reason}))
}

func (h *hist) commit(action, reason string) *hist {
	return h.commitRef(action, reason, nil)
}

// commitRef commits with a supersedes reference (nil: none).
func (h *hist) commitRef(action, reason string, ref *macpv1.CommitmentRef) *hist {
	cid := h.commitmentID
	if cid == "" {
		cid = "c1"
	}
	return h.send("coord", coord.TypeCommitment, pb(&macpv1.CommitmentPayload{
		CommitmentId: cid, Action: action, AuthorityScope: "team", Reason: reason,
		ModeVersion: h.s.Binding.ModeVersion, ConfigurationVersion: h.s.Binding.ConfigurationVersion,
		PolicyVersion: h.s.Binding.PolicyVersion, OutcomePositive: true, Supersedes: ref,
	}))
}

// suspend and resume are the initiator's SuspendSession/ResumeSession,
// wait ms after the previous step, with the runtime-drawn message id id.
func (h *hist) suspend(reason, id string, wait int64) *hist {
	h.t.Helper()
	h.now += wait
	out := h.s.Suspend("coord", reason, id, h.now)
	if out.Err != nil {
		h.t.Fatalf("suspend: %v", out.Err)
	}
	h.recs = append(h.recs, out.Records...)
	return h
}

func (h *hist) resume(reason, id string, wait int64) *hist {
	h.t.Helper()
	h.now += wait
	out := h.s.Resume("coord", reason, id, h.now)
	if out.Err != nil {
		h.t.Fatalf("resume: %v", out.Err)
	}
	h.recs = append(h.recs, out.Records...)
	return h
}

func (h *hist) cancel(reason string) *hist {
	return h.cancelID(reason, "msg-cancel")
}

// cancelID cancels with the runtime-drawn message id given.
func (h *hist) cancelID(reason, id string) *hist {
	h.t.Helper()
	h.now += 7
	out := h.s.Cancel("coord", reason, id, h.now)
	if out.Err != nil {
		h.t.Fatalf("cancel: %v", out.Err)
	}
	h.recs = append(h.recs, out.Records...)
	return h
}

func (h *hist) expire() *hist {
	h.t.Helper()
	rec, ok := h.s.ExpireIfDue(h.s.DeadlineMs + 3)
	if !ok {
		h.t.Fatal("not due")
	}
	h.recs = append(h.recs, rec)
	return h
}

// resolved is the reference history: start, proposal, vote, commitment.
func resolved(t *testing.T, id string) *hist {
	return newHist(t, startOpts{id: id}).propose("boring and solid").vote("alice", "fine").commit("decision.selected", "approved")
}
