// Package decision implements macp.mode.decision.v1 (RFC-MACP-0007): declared
// participants submit proposals, evaluations, objections and votes, and the
// session ends with one Commitment, positive or negative. The bound policy's
// decision rules (RFC-MACP-0012 §4.1) are parsed once at Start; two of them
// act on Votes (see rules.go), the rest on Commitments: under the April
// rules (ProfileApril, schema_version 1) on positive ones only, under the
// newest rules (ProfileLatest, or schema_version 2/3) on both polarities
// (RFC-MACP-0007 §6.2; rules.go evaluateLatest).
//
// Phases follow the reference runtime (checklist DEC-10):
//
//	Proposal --first Proposal--> Evaluation --first Vote--> Voting --Commitment--> Committed
//
// Proposals are accepted until voting starts; Evaluations and Objections only
// in the Evaluation phase; Votes once a proposal exists.
//
// The package is pure: no clock, I/O, goroutines or map-order dependence.
// Every interpretation of an ambiguous spec sentence is marked "Decision:".
package decision

import (
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
)

// ModeID and ModeVersion identify the mode (RFC-MACP-0007 §2).
const (
	ModeID      = "macp.mode.decision.v1"
	ModeVersion = "1.0.0"
)

// Mode-specific message types (RFC-MACP-0007 §4).
const (
	TypeProposal   = "Proposal"
	TypeEvaluation = "Evaluation"
	TypeObjection  = "Objection"
	TypeVote       = "Vote"
)

// Enumerated payload values. Decision (⚠C10): comparisons are
// case-sensitive (RFC-MACP-0007 §4 "Comparisons MUST be case-sensitive"), so
// lowercase "approve" is rejected; severities are the lowercase spellings
// RFC-MACP-0007 §4 and decision.proto enumerate, so "CRITICAL" is rejected
// despite the §4 sentence that enum-like values are UPPER_CASE.
const (
	RecApprove = "APPROVE"
	RecReview  = "REVIEW"
	RecBlock   = "BLOCK"
	RecReject  = "REJECT"

	VoteApprove = "APPROVE"
	VoteReject  = "REJECT"
	VoteAbstain = "ABSTAIN"

	SeverityLow      = "low"
	SeverityMedium   = "medium"
	SeverityHigh     = "high"
	SeverityCritical = "critical"
)

// Phase is the decision lifecycle phase as projected (checklist DEC-10/11).
type Phase uint8

// Phases in order.
const (
	PhaseProposal Phase = iota
	PhaseEvaluation
	PhaseVoting
	PhaseCommitted
)

var phaseNames = [...]string{"Proposal", "Evaluation", "Voting", "Committed"}

func (p Phase) String() string { return phaseNames[p] }

var descriptor = &macpv1.ModeDescriptor{
	Mode:        ModeID,
	ModeVersion: ModeVersion,
	Title:       "Decision",
	Description: "Structured decision with proposals, evaluations, objections, votes, and one binding outcome; " +
		"declared participants deliberate and the initiator (or policy authority) commits a positive or negative outcome.",
	DeterminismClass:     "semantic-deterministic",
	ParticipantModel:     "declared",
	MessageTypes:         []string{coord.TypeSessionStart, TypeProposal, TypeEvaluation, TypeObjection, TypeVote, coord.TypeCommitment},
	TerminalMessageTypes: []string{coord.TypeCommitment},
	SchemaUris: map[string]string{
		"proto": "buf.build/multiagentcoordinationprotocol/macp/macp.modes.decision.v1",
		// The only JSON Schema the spec defines for this mode is its
		// governance rule schema (RFC-MACP-0012 §4.1); its $id:
		"json_schema": "https://macp.dev/schemas/policy/decision-rules.schema.json",
		"docs":        "https://github.com/multiagentcoordinationprotocol/multiagentcoordinationprotocol/blob/main/rfcs/RFC-MACP-0007-decision-mode.md",
	},
}

type decisionMode struct{}

// New returns the Decision Mode.
func New() mode.Mode { return decisionMode{} }

// Descriptor returns the shared descriptor; callers must not modify it.
func (decisionMode) Descriptor() *macpv1.ModeDescriptor { return descriptor }

// ValidateRules implements mode.RulesValidator.
func (decisionMode) ValidateRules(p *policy.Policy) error { return ValidateRules(p) }

// Start requires declared participants (RFC-MACP-0007 §3, participant model
// "declared") and parses the bound policy's decision rules.
func (decisionMode) Start(b *mode.Binding) (mode.State, error) {
	// Decision: under ProfileLatest a session with no declared participant
	// starts (nobody can propose in it, so it can never resolve; spec
	// fixture decision_zero_participants.json); the April rules refuse it.
	if len(b.Participants) == 0 && !coord.IsLatest(b.Profile) {
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "%s requires declared participants", ModeID)
	}
	r, err := parseRules(b.Policy, b.Participants, b.Profile)
	if err != nil {
		return nil, err
	}
	idx := make(map[string]int, len(b.Participants))
	for i, p := range b.Participants {
		if _, dup := idx[p]; !dup {
			idx[p] = i
		}
	}
	return &state{rules: r, participant: idx, words: (len(b.Participants) + 63) / 64}, nil
}

// state is one session's decision state. Everything is kept in acceptance
// order; maps are used only for lookups, never iterated.
type state struct {
	rules *rules
	// participant maps a declared participant to its index in
	// Binding.Participants (first occurrence).
	participant map[string]int
	// words is the length of a participant bitset.
	words int

	phase       Phase
	proposals   []*proposal
	byID        map[string]*proposal
	evaluations []evaluation
	objections  []objection
}

type proposal struct {
	order                     int
	id, option, rationale, by string
	votes                     []vote
	voted                     []uint64 // participant bitset
	// Running tallies, updated in acceptance order so float sums are
	// reproducible.
	approve, reject, abstain int
	approveW, rejectW        float64
	// Decisive votes: APPROVE/REJECT of positive weight (rules.go).
	approveD, rejectD int
	// qualified: an evaluation that satisfies evaluation.minimum_confidence
	// exists (rules.go).
	qualified bool
	// critical objectors bitset and count (objection_handling).
	critical      []uint64
	criticalCount int
}

type vote struct{ sender, value, reason string }

type evaluation struct {
	proposalID, recommendation, reason, sender string
	confidence                                 float64
}

type objection struct{ proposalID, reason, severity, sender string }

func forbidden(m *mode.Message) error {
	return coord.Errorf(coord.CodeForbidden, "%s may not send %s: not a declared participant (RFC-MACP-0007 §2.1)", m.Sender, m.Type)
}

func invalid(format string, args ...any) error {
	return coord.Errorf(coord.CodeInvalidEnvelope, format, args...)
}

// Step validates and applies Proposal, Evaluation, Objection and Vote:
// authority (FORBIDDEN), then payload, references and phase
// (INVALID_ENVELOPE), then the policy's vote prerequisites (POLICY_DENIED).
// Nothing changes on error.
func (s *state) Step(b *mode.Binding, m *mode.Message) error {
	if s.phase == PhaseCommitted {
		return coord.Errorf(coord.CodeSessionNotOpen, "decision already committed")
	}
	switch m.Type {
	case TypeProposal:
		return s.propose(b, m)
	case TypeEvaluation:
		return s.evaluate(m)
	case TypeObjection:
		return s.object(m)
	case TypeVote:
		return s.vote(m)
	default:
		return invalid("message type %q is not defined by %s", m.Type, ModeID)
	}
}

func (s *state) propose(b *mode.Binding, m *mode.Message) error {
	// Decision (⚠C3): under the April rules the initiator may propose even
	// when not a declared participant (RFC-MACP-0007 abstract; April spec
	// fixture decision_happy_path), although §2 asks initiators who propose
	// to be listed. Under ProfileLatest §2/§2.1 apply as written: only
	// declared participants propose (spec fixture
	// decision_zero_participants.json).
	if _, ok := s.participant[m.Sender]; !ok && (m.Sender != b.Initiator || coord.IsLatest(b.Profile)) {
		return forbidden(m)
	}
	var p decisionv1.ProposalPayload
	if err := proto.Unmarshal(m.Payload, &p); err != nil {
		return invalid("payload is not a decision ProposalPayload")
	}
	if s.phase == PhaseVoting {
		return invalid("proposals are closed once voting has started")
	}
	// Decision: like the reference runtime, a proposal_id or option that is
	// empty or only whitespace is rejected: a Proposal "creates an option for
	// consideration" (RFC-MACP-0007 §4) and needs an id to be referenced.
	if isBlank(p.ProposalId) {
		return invalid("proposal_id is required")
	}
	if isBlank(p.Option) {
		return invalid("option is required")
	}
	if _, dup := s.byID[p.ProposalId]; dup {
		return invalid("proposal_id %q already exists (RFC-MACP-0007 §5.1)", p.ProposalId)
	}
	np := &proposal{order: len(s.proposals), id: p.ProposalId, option: p.Option, rationale: p.Rationale, by: m.Sender}
	if s.byID == nil {
		s.byID = make(map[string]*proposal, 4)
	}
	s.byID[np.id] = np
	s.proposals = append(s.proposals, np)
	s.phase = PhaseEvaluation
	return nil
}

// deliberation returns the referenced proposal if Evaluations and
// Objections are open.
func (s *state) deliberation(kind, id string) (*proposal, error) {
	if s.phase == PhaseVoting {
		return nil, invalid("%s is closed once voting has started", kind)
	}
	p := s.byID[id]
	if p == nil {
		return nil, invalid("proposal_id %q does not reference an existing proposal (RFC-MACP-0007 §5.2)", id)
	}
	return p, nil
}

func (s *state) evaluate(m *mode.Message) error {
	if _, ok := s.participant[m.Sender]; !ok {
		return forbidden(m)
	}
	var e decisionv1.EvaluationPayload
	if err := proto.Unmarshal(m.Payload, &e); err != nil {
		return invalid("payload is not a decision EvaluationPayload")
	}
	p, err := s.deliberation("evaluation", e.ProposalId)
	if err != nil {
		return err
	}
	switch e.Recommendation {
	case RecApprove, RecReview, RecBlock, RecReject:
	default:
		return invalid("recommendation %q is not one of APPROVE, REVIEW, BLOCK, REJECT (case-sensitive, RFC-MACP-0007 §4)", e.Recommendation)
	}
	if !(e.Confidence >= 0 && e.Confidence <= 1) { // also rejects NaN
		return invalid("confidence %v is outside [0, 1]", e.Confidence)
	}
	s.evaluations = append(s.evaluations, evaluation{
		proposalID: e.ProposalId, recommendation: e.Recommendation, reason: e.Reason,
		sender: m.Sender, confidence: e.Confidence,
	})
	if s.rules.qualifies(e.Recommendation, e.Confidence) {
		p.qualified = true
	}
	return nil
}

func (s *state) object(m *mode.Message) error {
	idx, ok := s.participant[m.Sender]
	if !ok {
		return forbidden(m)
	}
	var o decisionv1.ObjectionPayload
	if err := proto.Unmarshal(m.Payload, &o); err != nil {
		return invalid("payload is not a decision ObjectionPayload")
	}
	p, err := s.deliberation("objection", o.ProposalId)
	if err != nil {
		return err
	}
	switch o.Severity {
	case "":
		o.Severity = SeverityMedium // reference-runtime default (DEC-10)
	case SeverityLow, SeverityMedium, SeverityHigh, SeverityCritical:
	default:
		return invalid("severity %q is not one of low, medium, high, critical (case-sensitive, RFC-MACP-0007 §4)", o.Severity)
	}
	s.objections = append(s.objections, objection{proposalID: o.ProposalId, reason: o.Reason, severity: o.Severity, sender: m.Sender})
	if o.Severity == SeverityCritical {
		if p.critical == nil {
			p.critical = make([]uint64, s.words)
		}
		if setBit(p.critical, idx) {
			p.criticalCount++
		}
	}
	return nil
}

func (s *state) vote(m *mode.Message) error {
	idx, ok := s.participant[m.Sender]
	if !ok {
		return forbidden(m)
	}
	var v decisionv1.VotePayload
	if err := proto.Unmarshal(m.Payload, &v); err != nil {
		return invalid("payload is not a decision VotePayload")
	}
	p := s.byID[v.ProposalId]
	if p == nil {
		return invalid("proposal_id %q does not reference an existing proposal (RFC-MACP-0007 §5.2)", v.ProposalId)
	}
	switch v.Vote {
	case VoteApprove, VoteReject, VoteAbstain:
	default:
		return invalid("vote %q is not one of APPROVE, REJECT, ABSTAIN (case-sensitive, RFC-MACP-0007 §4)", v.Vote)
	}
	if hasBit(p.voted, idx) {
		return invalid("%s already voted on proposal %q (RFC-MACP-0007 §5.3)", m.Sender, v.ProposalId)
	}
	if err := s.rules.voteAllowed(p); err != nil {
		return err
	}
	if p.voted == nil {
		p.voted = make([]uint64, s.words)
	}
	setBit(p.voted, idx)
	p.votes = append(p.votes, vote{sender: m.Sender, value: v.Vote, reason: v.Reason})
	w := s.rules.weight(idx)
	decisive := 0
	if w > 0 {
		decisive = 1
	}
	switch v.Vote {
	case VoteApprove:
		p.approve++
		p.approveW += w
		p.approveD += decisive
	case VoteReject:
		p.reject++
		p.rejectW += w
		p.rejectD += decisive
	default:
		p.abstain++
	}
	s.phase = PhaseVoting
	return nil
}

// Commit checks eligibility (at least one proposal, RFC-MACP-0007 §5.5) and
// the policy's decision rules (POLICY_DENIED with reasons). Under the April
// rules (Decision): a negative outcome (outcome_positive=false, e.g.
// decision.rejected) is allowed at face value; the rules guard positive
// action only, since denying a "no-go" would leave only cancellation or
// expiry (RFC-MACP-0007 §6 allows both outcomes). Under the newest rules
// (ProfileLatest, or a schema_version 2/3 policy) both polarities are
// gated (RFC-MACP-0007 §6.2; rules.go evaluateLatest).
func (s *state) Commit(b *mode.Binding, m *mode.Message, c *macpv1.CommitmentPayload) error {
	if s.phase == PhaseCommitted {
		return coord.Errorf(coord.CodeSessionNotOpen, "decision already committed")
	}
	if c == nil {
		return invalid("commitment payload is required")
	}
	// Decision: no policy rule allows a zero-proposal no-go (RFC-MACP-0007
	// §5.5 "unless policy explicitly allows"): the decision-rules schema has
	// no such knob, so every Commitment needs a proposal.
	if len(s.proposals) == 0 {
		return invalid("a Commitment requires at least one proposal (RFC-MACP-0007 §5.5)")
	}
	var reasons []string
	switch {
	case s.rules != nil && s.rules.latest:
		reasons = s.rules.evaluateLatest(s.proposals, c.GetOutcomePositive(), len(b.Participants))
	case c.GetOutcomePositive():
		reasons = s.rules.deny(s.proposals, len(b.Participants))
	}
	if len(reasons) > 0 {
		polarity := "positive"
		if !c.GetOutcomePositive() {
			polarity = "negative"
		}
		return &coord.Error{
			Code:    coord.CodePolicyDenied,
			Message: "policy " + strconv.Quote(b.PolicyVersion) + " denies a " + polarity + " commitment: " + strings.Join(reasons, "; "),
			Reasons: reasons,
		}
	}
	s.phase = PhaseCommitted
	return nil
}

// Project returns the checklist DEC-11 view:
//
//	{"phase": "Voting",
//	 "proposals":   {id: {"proposal_id", "option", "rationale", "sender"}},
//	 "votes":       {proposal_id: {sender: {"vote", "reason"}}},
//	 "evaluations": [{"proposal_id", "recommendation", "confidence", "reason", "sender"}],
//	 "objections":  [{"proposal_id", "reason", "severity", "sender"}]}
//
// Evaluations and objections are in acceptance order.
func (s *state) Project() map[string]any {
	proposals := make(map[string]any, len(s.proposals))
	votes := make(map[string]any)
	for _, p := range s.proposals {
		proposals[p.id] = map[string]any{
			"proposal_id": p.id,
			"option":      p.option,
			"rationale":   p.rationale,
			"sender":      p.by,
		}
		if len(p.votes) == 0 {
			continue
		}
		pv := make(map[string]any, len(p.votes))
		for _, v := range p.votes {
			pv[v.sender] = map[string]any{"vote": v.value, "reason": v.reason}
		}
		votes[p.id] = pv
	}
	evaluations := make([]any, len(s.evaluations))
	for i, e := range s.evaluations {
		evaluations[i] = map[string]any{
			"proposal_id":    e.proposalID,
			"recommendation": e.recommendation,
			"confidence":     e.confidence,
			"reason":         e.reason,
			"sender":         e.sender,
		}
	}
	objections := make([]any, len(s.objections))
	for i, o := range s.objections {
		objections[i] = map[string]any{
			"proposal_id": o.proposalID,
			"reason":      o.reason,
			"severity":    o.severity,
			"sender":      o.sender,
		}
	}
	return map[string]any{
		"phase":       s.phase.String(),
		"proposals":   proposals,
		"votes":       votes,
		"evaluations": evaluations,
		"objections":  objections,
	}
}

func isBlank(s string) bool { return strings.TrimSpace(s) == "" }

func hasBit(set []uint64, i int) bool { return set != nil && set[i>>6]&(1<<(i&63)) != 0 }

// setBit sets bit i and reports whether it was clear.
func setBit(set []uint64, i int) bool {
	w, m := i>>6, uint64(1)<<(i&63)
	if set[w]&m != 0 {
		return false
	}
	set[w] |= m
	return true
}
