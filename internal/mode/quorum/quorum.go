// Package quorum implements macp.mode.quorum.v1 (RFC-MACP-0011): the
// session initiator asks the declared participants to approve one bounded
// action, each casts at most one ballot (Approve, Reject or Abstain), and the
// session ends with one Commitment once the approval threshold is reached
// (quorum.approved) or can no longer be reached (quorum.rejected). The bound
// policy's quorum rules (RFC-MACP-0012 §4.2) are parsed once at Start (see
// rules.go).
//
// Phases (projected): Pending --ApprovalRequest--> Voting --Commitment--> Committed.
//
// The package is pure: no clock, I/O, goroutines or map-order dependence.
// Given the same participants, policy and set of accepted ballots, the
// tallies and the eligibility are the same whatever the ballots' order
// (RFC-MACP-0011 §7): weighted sums are taken in participant order. Every
// interpretation of an ambiguous or silent spec sentence is marked
// "Decision:".
package quorum

import (
	"encoding/base64"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
)

// ModeID and ModeVersion identify the mode (RFC-MACP-0011 §2).
const (
	ModeID      = "macp.mode.quorum.v1"
	ModeVersion = "1.0.0"
)

// Mode-specific message types (RFC-MACP-0011 §4).
const (
	TypeApprovalRequest = "ApprovalRequest"
	TypeApprove         = "Approve"
	TypeReject          = "Reject"
	TypeAbstain         = "Abstain"
)

// Phase is the session phase as projected.
type Phase uint8

// Phases.
const (
	PhasePending Phase = iota
	PhaseVoting
	PhaseCommitted
)

var phaseNames = [...]string{"Pending", "Voting", "Committed"}

func (p Phase) String() string { return phaseNames[p] }

// choice is a participant's ballot.
type choice uint8

const (
	none choice = iota
	approve
	reject
	abstain
)

var choiceNames = [...]string{"", TypeApprove, TypeReject, TypeAbstain}

var descriptor = &macpv1.ModeDescriptor{
	Mode:        ModeID,
	ModeVersion: ModeVersion,
	Title:       "Quorum",
	Description: "Threshold approval of one bounded action: the initiator requests approval, each declared participant " +
		"casts at most one Approve, Reject or Abstain ballot, and the initiator (or policy authority) commits once the " +
		"threshold is reached (quorum.approved) or unreachable (quorum.rejected).",
	DeterminismClass:     "semantic-deterministic",
	ParticipantModel:     "quorum",
	MessageTypes:         []string{coord.TypeSessionStart, TypeApprovalRequest, TypeApprove, TypeReject, TypeAbstain, coord.TypeCommitment},
	TerminalMessageTypes: []string{coord.TypeCommitment},
	SchemaUris: map[string]string{
		"proto":       "buf.build/multiagentcoordinationprotocol/macp/macp.modes.quorum.v1",
		"json_schema": "https://macp.dev/schemas/policy/quorum-rules.schema.json",
		"docs":        "https://github.com/multiagentcoordinationprotocol/multiagentcoordinationprotocol/blob/main/rfcs/RFC-MACP-0011-quorum-mode.md",
	},
}

type quorumMode struct{}

// New returns the Quorum Mode.
func New() mode.Mode { return quorumMode{} }

// Descriptor returns the shared descriptor; callers must not modify it.
func (quorumMode) Descriptor() *macpv1.ModeDescriptor { return descriptor }

// ValidateRules implements mode.RulesValidator: the quorum sections
// against quorum-rules.schema.json, without the checks that need the
// session's participants (a threshold above the eligible participants or
// their total weight), which Start still makes.
func (quorumMode) ValidateRules(p *policy.Policy) error {
	_, err := parseRulesFor(p, nil, false)
	return err
}

// Start requires declared participants — the voter pool (RFC-MACP-0011 §2,
// §3) — and parses the bound policy's quorum rules. The initiator votes
// only if listed (§2.1).
func (quorumMode) Start(b *mode.Binding) (mode.State, error) {
	s := &state{participant: make(map[string]int, len(b.Participants))}
	for _, p := range b.Participants {
		if _, dup := s.participant[p]; !dup {
			s.participant[p] = len(s.names)
			s.names = append(s.names, p)
		}
	}
	if len(s.names) == 0 {
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "%s requires declared participants (RFC-MACP-0011 §3)", ModeID)
	}
	r, err := parseRules(b.Policy, s.names)
	if err != nil {
		return nil, err
	}
	s.rules = r
	s.choices = make([]choice, len(s.names))
	return s, nil
}

// state is one session's quorum state. Ballots are kept in acceptance
// order; the map is only used for lookups, never iterated.
type state struct {
	rules rules
	// participant maps a declared participant to its index in names.
	participant map[string]int
	names       []string

	committed bool
	req       *request
	choices   []choice // by participant index
	ballots   []ballot // acceptance order
	// counts by choice
	approvals, rejections, abstentions int
}

type request struct {
	requestID, action, summary, requestedBy string
	details                                 []byte
	required                                int
}

type ballot struct {
	idx               int
	choice            choice
	requestID, reason string
}

func invalid(format string, args ...any) error {
	return coord.Errorf(coord.CodeInvalidEnvelope, format, args...)
}

// Step validates and applies ApprovalRequest and the three ballots:
// authority (FORBIDDEN), then payload, reference and phase
// (INVALID_ENVELOPE). Nothing changes on error.
func (s *state) Step(b *mode.Binding, m *mode.Message) error {
	if s.committed {
		return coord.Errorf(coord.CodeSessionNotOpen, "quorum session already committed")
	}
	switch m.Type {
	case TypeApprovalRequest:
		return s.requestApproval(b, m)
	case TypeApprove:
		return s.vote(m, approve)
	case TypeReject:
		return s.vote(m, reject)
	case TypeAbstain:
		return s.vote(m, abstain)
	default:
		return invalid("message type %q is not defined by %s", m.Type, ModeID)
	}
}

// requestApproval handles ApprovalRequest (RFC-MACP-0011 §2.1, §4, §5 rules
// 1–2).
func (s *state) requestApproval(b *mode.Binding, m *mode.Message) error {
	if m.Sender != b.Initiator {
		return coord.Errorf(coord.CodeForbidden, "%s may not send %s: only the session initiator (coordinator) requests approval (RFC-MACP-0011 §2.1)", m.Sender, m.Type)
	}
	var p quorumv1.ApprovalRequestPayload
	if err := proto.Unmarshal(m.Payload, &p); err != nil {
		return invalid("payload is not a quorum ApprovalRequestPayload")
	}
	if s.req != nil {
		return invalid("the session already has approval request %q; Quorum Mode v1 accepts one per session (RFC-MACP-0011 §5 rule 1)", s.req.requestID)
	}
	// Decision: request_id (every ballot names it) and action ("what is
	// being approved", §4; only details is called optional) are required;
	// summary may be empty, as the SDKs default it.
	if strings.TrimSpace(p.RequestId) == "" {
		return invalid("request_id is required")
	}
	if strings.TrimSpace(p.Action) == "" {
		return invalid("action is required: it is what is being approved (RFC-MACP-0011 §4)")
	}
	// Rule 2 holds for the payload even when a policy threshold replaces
	// the value (rule 6): the MUST is unconditional.
	if p.RequiredApprovals == 0 || int64(p.RequiredApprovals) > int64(len(s.names)) {
		return invalid("required_approvals %d must be in 1..%d, the number of eligible participants (RFC-MACP-0011 §5 rule 2)",
			p.RequiredApprovals, len(s.names))
	}
	s.req = &request{
		requestID: p.RequestId, action: p.Action, summary: p.Summary, requestedBy: m.Sender,
		details: p.Details, required: int(p.RequiredApprovals),
	}
	return nil
}

// vote handles Approve, Reject and Abstain (RFC-MACP-0011 §2.1, §5 rule 3).
func (s *state) vote(m *mode.Message, c choice) error {
	i, ok := s.participant[m.Sender]
	if !ok {
		return coord.Errorf(coord.CodeForbidden, "%s may not send %s: not an eligible declared participant (RFC-MACP-0011 §2.1)", m.Sender, m.Type)
	}
	var requestID, reason string
	var err error
	switch c {
	case approve:
		var p quorumv1.ApprovePayload
		err = proto.Unmarshal(m.Payload, &p)
		requestID, reason = p.RequestId, p.Reason
	case reject:
		var p quorumv1.RejectPayload
		err = proto.Unmarshal(m.Payload, &p)
		requestID, reason = p.RequestId, p.Reason
	default:
		var p quorumv1.AbstainPayload
		err = proto.Unmarshal(m.Payload, &p)
		requestID, reason = p.RequestId, p.Reason
	}
	if err != nil {
		return invalid("payload is not a quorum %sPayload", m.Type)
	}
	// Decision (checklist QUO-4; spec fixture quorum_reject_paths gives no
	// code): a ballot before the ApprovalRequest is INVALID_ENVELOPE — the
	// sender is eligible, the message is out of phase.
	if s.req == nil {
		return invalid("no approval request has been made yet (RFC-MACP-0011 §5)")
	}
	if requestID != s.req.requestID {
		return invalid("request_id %q does not reference the session's approval request %q", requestID, s.req.requestID)
	}
	if prev := s.choices[i]; prev != none {
		return invalid("%s already cast a %s ballot; one ballot per participant (RFC-MACP-0011 §5 rule 3)", m.Sender, choiceNames[prev])
	}
	s.choices[i] = c
	s.ballots = append(s.ballots, ballot{idx: i, choice: c, requestID: requestID, reason: reason})
	switch c {
	case approve:
		s.approvals++
	case reject:
		s.rejections++
	default:
		s.abstentions++
	}
	return nil
}

// tally is the quorum calculation at one point of the session.
type tally struct {
	n, remaining int
	// threshold is the approvals needed (count types) or the weight needed
	// (weighted); approved, open and participation are in the same unit:
	// approvals, approvals still possible from unvoted participants, and
	// ballots that count toward the participation quorum.
	threshold, approved, open, participation float64
	positive, negative                       bool
	// participates: the participation quorum is met (or does not apply).
	participates bool
}

// tally computes the quorum state (RFC-MACP-0011 §5 rules 4, 4a, 4b, 6;
// RFC-MACP-0012 §4.2).
//
// Base rule (policy.default): positive eligibility when approvals >=
// required_approvals; negative when approvals + unvoted participants <
// required_approvals. An Abstain is neither approval nor rejection and
// removes its sender from the potential approvers (rule 4a), so all
// abstaining makes the request rejectable (rule 4b).
//
// Decisions on the policy knobs (the spec names them without semantics
// beyond the schema descriptions):
//   - threshold (rule 6) replaces required_approvals: n_of_m a count,
//     percentage the smallest count k >= 1 with k/base >= value, weighted a
//     weight sum compared with the summed weights of the approvers (and of
//     approvers plus unvoted participants for unreachability).
//   - abstention.interpretation: neutral = rule 4a. implicit_reject = an
//     Abstain is a rejection; eligibility is the same as neutral (both
//     remove a potential approver) but the abstention then always counts
//     toward the participation quorum. ignored = the abstainer is dropped
//     from the eligible base, so a percentage threshold is taken of the
//     participants who did not abstain, and the abstention never counts
//     toward participation.
//   - abstention.counts_toward_quorum: the "participation quorum" is the
//     threshold itself, counted in ballots (weights for weighted): approvals
//     and rejections always participate; a neutral abstention participates
//     only when counts_toward_quorum is true. It binds only while a policy
//     threshold override is in effect — without one the base rules above
//     apply unchanged (RFC-MACP-0012 §5: policy.default adds nothing, and
//     rule 4b must hold) — and then it constrains negative Commitments
//     (a positive one has at least threshold approvals): a rejection must
//     be backed by at least threshold participating ballots. This follows
//     the reference runtime's reading, with one release: once every
//     eligible participant has cast a ballot the requirement is met, since
//     no further ballot can arrive and refusing would leave the session
//     only to expire (e.g. a unanimity threshold with one abstention).
func (s *state) tally() tally {
	t := tally{n: len(s.names)}
	t.remaining = t.n - s.approvals - s.rejections - s.abstentions
	if s.req == nil {
		return t
	}
	abstentionCounts := s.rules.abstentionParticipates()
	if s.rules.kind == weighted {
		// Sums in participant order: independent of the ballots' order.
		for i, c := range s.choices {
			w := s.rules.weights[i]
			switch {
			case c == none:
				t.open += w
			case c == approve:
				t.approved += w
				t.participation += w
			case c == reject || abstentionCounts:
				t.participation += w
			}
		}
		t.open += t.approved
		t.threshold = s.rules.weightSum
	} else {
		t.approved = float64(s.approvals)
		t.open = float64(s.approvals + t.remaining)
		t.participation = float64(s.approvals + s.rejections)
		if abstentionCounts {
			t.participation += float64(s.abstentions)
		}
		switch s.rules.kind {
		case fromRequest:
			t.threshold = float64(s.req.required)
		case nOfM:
			t.threshold = float64(s.rules.count)
		case percentage:
			base := t.n
			if s.rules.interpretation == AbstainIgnored {
				base -= s.abstentions
			}
			t.threshold = float64(percentThreshold(s.rules.fraction, base))
		}
	}
	t.positive = t.approved >= t.threshold
	t.negative = t.open < t.threshold
	t.participates = s.rules.kind == fromRequest || t.participation >= t.threshold || t.remaining == 0
	return t
}

// Commit checks eligibility for the Commitment's outcome (INVALID_ENVELOPE)
// and then the participation quorum of a policy threshold (POLICY_DENIED).
//
// Decision: the outcome must match the tally — positive only when the
// threshold is reached, negative only when it is unreachable (§5 rule 4);
// until either holds the coordinator waits for more ballots.
func (s *state) Commit(b *mode.Binding, m *mode.Message, c *macpv1.CommitmentPayload) error {
	if s.committed {
		return coord.Errorf(coord.CodeSessionNotOpen, "quorum session already committed")
	}
	if c == nil {
		return invalid("commitment payload is required")
	}
	if s.req == nil {
		return invalid("a Commitment requires an ApprovalRequest (RFC-MACP-0011 §5 rule 4)")
	}
	t := s.tally()
	if c.GetOutcomePositive() && !t.positive {
		return invalid("a positive Commitment requires %s approval(s); %s so far (RFC-MACP-0011 §5 rule 4)",
			fmtNum(t.threshold), fmtNum(t.approved))
	}
	if !c.GetOutcomePositive() && !t.negative {
		return invalid("a negative Commitment requires the threshold %s to be unreachable; %s approval(s) are still possible (RFC-MACP-0011 §5 rule 4a)",
			fmtNum(t.threshold), fmtNum(t.open))
	}
	if !t.participates {
		reason := fmt.Sprintf("threshold: %s participating ballot(s) and %d participant(s) yet to vote; the %s threshold needs %s participating (abstentions %s)",
			fmtNum(t.participation), t.remaining, thresholdSources[s.rules.kind], fmtNum(t.threshold), s.abstentionNote())
		return &coord.Error{
			Code:    coord.CodePolicyDenied,
			Message: "policy " + b.PolicyVersion + " denies the Commitment: " + reason,
			Reasons: []string{reason},
		}
	}
	s.committed = true
	return nil
}

func (s *state) abstentionNote() string {
	if s.rules.abstentionParticipates() {
		return "count"
	}
	return "do not count"
}

func (s *state) phase() Phase {
	switch {
	case s.committed:
		return PhaseCommitted
	case s.req != nil:
		return PhaseVoting
	}
	return PhasePending
}

// Project returns:
//
//	{"phase": "Voting",
//	 "request": {"request_id", "action", "summary", "details", "required_approvals", "requested_by"} | null,
//	 "ballots": {sender: {"choice": "Approve"|"Reject"|"Abstain", "reason", "request_id"}},
//	 "ballot_order": [sender, ...],
//	 "approvals", "rejections", "abstentions", "remaining", "eligible_participants": counts,
//	 "threshold": approvals (or weight) needed, 0 before the request,
//	 "threshold_source": "required_approvals"|"n_of_m"|"percentage"|"weighted",
//	 "counted_approvals", "possible_approvals", "participation": in threshold units,
//	 "participation_met": the policy participation quorum is met (or n/a),
//	 "abstention_interpretation": "neutral"|"implicit_reject"|"ignored",
//	 "eligible": {"positive": bool, "negative": bool}}
//
// details are base64 (protojson style); raw counts ignore the abstention
// interpretation, which "participation" and "threshold" reflect.
func (s *state) Project() map[string]any {
	var req any
	if r := s.req; r != nil {
		req = map[string]any{
			"request_id": r.requestID, "action": r.action, "summary": r.summary,
			"details": base64.StdEncoding.EncodeToString(r.details), "required_approvals": r.required,
			"requested_by": r.requestedBy,
		}
	}
	ballots := make(map[string]any, len(s.ballots))
	order := make([]any, len(s.ballots))
	for k, bl := range s.ballots {
		name := s.names[bl.idx]
		ballots[name] = map[string]any{"choice": choiceNames[bl.choice], "reason": bl.reason, "request_id": bl.requestID}
		order[k] = name
	}
	t := s.tally()
	interp := s.rules.interpretation
	if interp == "" {
		interp = AbstainNeutral
	}
	positive, negative := false, false
	if !s.committed {
		positive, negative = t.positive, t.negative
	}
	return map[string]any{
		"phase":                     s.phase().String(),
		"request":                   req,
		"ballots":                   ballots,
		"ballot_order":              order,
		"approvals":                 s.approvals,
		"rejections":                s.rejections,
		"abstentions":               s.abstentions,
		"remaining":                 t.remaining,
		"eligible_participants":     t.n,
		"threshold":                 t.threshold,
		"threshold_source":          thresholdSources[s.rules.kind],
		"counted_approvals":         t.approved,
		"possible_approvals":        t.open,
		"participation":             t.participation,
		"participation_met":         t.participates,
		"abstention_interpretation": interp,
		"eligible":                  map[string]any{"positive": positive, "negative": negative},
	}
}
