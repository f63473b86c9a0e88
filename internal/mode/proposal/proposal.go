// Package proposal implements macp.mode.proposal.v1 (RFC-MACP-0008): declared
// participants negotiate with Proposals and CounterProposals, Accept, Reject
// and Withdraw them, and the session ends with one Commitment — positive when
// the required participants accept the same live proposal, negative after a
// terminal rejection. The bound policy's proposal rules (RFC-MACP-0012 §4.3)
// are parsed once at Start (rules.go).
//
// Phases (as projected; derived from the state, checklist PROP-9):
//
//	Negotiating       no live proposal meets the acceptance criterion and no
//	                  terminal Reject was accepted
//	Converged         some live proposal meets the acceptance criterion
//	                  (eligible for a positive Commitment)
//	TerminalRejected  a terminal Reject was accepted (eligible for a negative
//	                  Commitment; takes precedence over Converged in the
//	                  phase name, as in the reference runtime — both
//	                  eligibilities are projected separately)
//	Committed         a Commitment was accepted
//
// Negotiation stays open in Converged and TerminalRejected: the Commitment
// authority "MAY await further proposals" (RFC-MACP-0008 §5.6).
//
// Required participants (RFC-MACP-0008 §5.6, policy acceptance.criterion).
// A proposal P "meets the criterion" when P is live, at least one declared
// participant's latest Accept targets P, and:
//
//   - all_parties (default): every declared participant's latest Accept
//     targets P — the proposer too: proposing is not accepting (spec fixture
//     proposal_happy_path has the proposer Accept explicitly);
//   - counterparty: every declared participant other than P's proposer
//     (the sender of that Proposal or CounterProposal) accepts P;
//   - initiator: the session initiator's latest Accept targets P (the
//     initiator must then be a declared participant, checked at Start).
//
// The package is pure: no clock, I/O, goroutines or map-order dependence.
// Every interpretation of an ambiguous spec sentence is marked "Decision:".
package proposal

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	proposalv1 "github.com/macpd/macpd/gen/macp/modes/proposal/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
)

// ModeID and ModeVersion identify the mode (RFC-MACP-0008 §2).
const (
	ModeID      = "macp.mode.proposal.v1"
	ModeVersion = "1.0.0"
)

// Mode-specific message types (RFC-MACP-0008 §4).
const (
	TypeProposal        = "Proposal"
	TypeCounterProposal = "CounterProposal"
	TypeAccept          = "Accept"
	TypeReject          = "Reject"
	TypeWithdraw        = "Withdraw"
)

// Phase is the negotiation phase as projected.
type Phase uint8

// Phases; see the package doc.
const (
	PhaseNegotiating Phase = iota
	PhaseConverged
	PhaseTerminalRejected
	PhaseCommitted
)

var phaseNames = [...]string{"Negotiating", "Converged", "TerminalRejected", "Committed"}

func (p Phase) String() string { return phaseNames[p] }

// Proposal dispositions as projected (checklist PROP-9).
const (
	DispositionLive      = "Live"
	DispositionWithdrawn = "Withdrawn"
)

var descriptor = &macpv1.ModeDescriptor{
	Mode:        ModeID,
	ModeVersion: ModeVersion,
	Title:       "Proposal",
	Description: "Bounded negotiation with proposals, counterproposals, acceptance, rejection and withdrawal; " +
		"declared participants negotiate as peers and the initiator (or policy authority) commits the accepted proposal or a terminal rejection.",
	DeterminismClass:     "semantic-deterministic",
	ParticipantModel:     "peer",
	MessageTypes:         []string{coord.TypeSessionStart, TypeProposal, TypeCounterProposal, TypeAccept, TypeReject, TypeWithdraw, coord.TypeCommitment},
	TerminalMessageTypes: []string{coord.TypeCommitment},
	SchemaUris: map[string]string{
		"proto":       "buf.build/multiagentcoordinationprotocol/macp/macp.modes.proposal.v1",
		"json_schema": "https://macp.dev/schemas/policy/proposal-rules.schema.json",
		"docs":        "https://github.com/multiagentcoordinationprotocol/multiagentcoordinationprotocol/blob/main/rfcs/RFC-MACP-0008-proposal-mode.md",
	},
}

type proposalMode struct{}

// New returns the Proposal Mode.
func New() mode.Mode { return proposalMode{} }

// Descriptor returns the shared descriptor; callers must not modify it.
func (proposalMode) Descriptor() *macpv1.ModeDescriptor { return descriptor }

// ValidateRules implements mode.RulesValidator: the proposal sections
// against proposal-rules.schema.json (none depends on the participants).
func (proposalMode) ValidateRules(p *policy.Policy) error {
	_, err := parseRules(p)
	return err
}

// Start requires declared participants (RFC-MACP-0008 §3 "participants -
// required negotiating parties") and parses the bound policy's proposal
// rules. Decision: acceptance.criterion "initiator" with an initiator who is
// not a declared participant is refused (INVALID_POLICY_DEFINITION): only
// declared participants may Accept (§2.1), so no proposal could ever be
// accepted.
func (proposalMode) Start(b *mode.Binding) (mode.State, error) {
	if len(b.Participants) == 0 {
		return nil, coord.Errorf(coord.CodeInvalidEnvelope, "%s requires declared participants (RFC-MACP-0008 §3)", ModeID)
	}
	r, err := parseRules(b.Policy)
	if err != nil {
		return nil, err
	}
	s := &state{rules: r, participant: make(map[string]int, len(b.Participants)), initiator: -1}
	for _, p := range b.Participants {
		if _, dup := s.participant[p]; !dup {
			s.participant[p] = len(s.names)
			s.names = append(s.names, p)
		}
	}
	if i, ok := s.participant[b.Initiator]; ok {
		s.initiator = i
	}
	if r.criterion == initiatorOnly && s.initiator < 0 {
		return nil, badPolicy("acceptance.criterion initiator: the initiator %s is not a declared participant and could never Accept", b.Initiator)
	}
	s.accepts = make([]int, len(s.names))
	for i := range s.accepts {
		s.accepts[i] = -1
	}
	return s, nil
}

// state is one session's negotiation state. Everything is kept in
// acceptance order; maps are used only for lookups, never iterated.
type state struct {
	rules rules
	// participant maps a declared participant to its index in names
	// (distinct participants in SessionStart order).
	participant map[string]int
	names       []string
	// initiator is the initiator's participant index, -1 if undeclared.
	initiator int

	proposals []*record
	byID      map[string]*record
	// accepts[i] is the order of the proposal participant i's latest Accept
	// targets, -1 for none.
	accepts    []int
	rejections []rejection
	// terminal counts accepted terminal rejections; counters accepted
	// CounterProposals; converged live proposals meeting the criterion.
	terminal, counters, converged int

	committed       bool
	outcomePositive bool
}

type record struct {
	order                      int
	id, proposer, supersedes   string
	title, summary             string
	tags                       []string
	detailsLen                 int
	counter, withdrawn         bool
	proposerIdx                int
	acceptors                  int  // participants whose latest Accept targets this
	proposerAccepts, converged bool // converged: meets the criterion (see meets)
}

type rejection struct {
	proposalID, sender, reason string
	terminal                   bool
}

func forbidden(m *mode.Message, why string) error {
	return coord.Errorf(coord.CodeForbidden, "%s may not send %s: %s (RFC-MACP-0008 §2.1)", m.Sender, m.Type, why)
}

func invalid(format string, args ...any) error {
	return coord.Errorf(coord.CodeInvalidEnvelope, format, args...)
}

func isBlank(s string) bool { return strings.TrimSpace(s) == "" }

// Step validates and applies Proposal, CounterProposal, Accept, Reject and
// Withdraw: authority (FORBIDDEN), then payload, references and state
// (INVALID_ENVELOPE), then counter_proposal.max_rounds (POLICY_DENIED).
// Nothing changes on error.
func (s *state) Step(b *mode.Binding, m *mode.Message) error {
	if s.committed {
		return coord.Errorf(coord.CodeSessionNotOpen, "proposal session already committed")
	}
	var handle func(int, *mode.Message) error
	switch m.Type {
	case TypeProposal:
		handle = s.propose
	case TypeCounterProposal:
		handle = s.counter
	case TypeAccept:
		handle = s.accept
	case TypeReject:
		handle = s.reject
	case TypeWithdraw:
		handle = s.withdraw
	default:
		return invalid("message type %q is not defined by %s", m.Type, ModeID)
	}
	// RFC-MACP-0008 §2.1: every message type is sent by declared
	// participants only (Withdraw further by the author, checked once the
	// payload names the proposal). Decision: an initiator who is not a
	// declared participant has no negotiation authority (unlike Decision
	// Mode's ⚠C3, nothing in RFC-MACP-0008 or its fixtures grants it one).
	idx, ok := s.participant[m.Sender]
	if !ok {
		return forbidden(m, "not a declared participant")
	}
	return handle(idx, m)
}

func (s *state) add(r *record) {
	r.order = len(s.proposals)
	if s.byID == nil {
		s.byID = make(map[string]*record, 4)
	}
	s.byID[r.id] = r
	s.proposals = append(s.proposals, r)
	// A new proposal has no acceptors, so it cannot meet the criterion yet.
}

func (s *state) propose(idx int, m *mode.Message) error {
	var p proposalv1.ProposalPayload
	if err := proto.Unmarshal(m.Payload, &p); err != nil {
		return invalid("payload is not a proposal ProposalPayload")
	}
	if err := s.newID(p.ProposalId); err != nil {
		return err
	}
	s.add(&record{
		id: p.ProposalId, proposer: m.Sender, proposerIdx: idx,
		title: p.Title, summary: p.Summary, tags: p.Tags, detailsLen: len(p.Details),
	})
	return nil
}

// newID checks RFC-MACP-0008 §5.1. Decision: a blank proposal_id (empty or
// whitespace) is refused — an unnamed proposal cannot be referenced.
func (s *state) newID(id string) error {
	if isBlank(id) {
		return invalid("proposal_id is required")
	}
	if _, dup := s.byID[id]; dup {
		return invalid("proposal_id %q already exists (RFC-MACP-0008 §5.1)", id)
	}
	return nil
}

func (s *state) counter(idx int, m *mode.Message) error {
	var p proposalv1.CounterProposalPayload
	if err := proto.Unmarshal(m.Payload, &p); err != nil {
		return invalid("payload is not a proposal CounterProposalPayload")
	}
	if err := s.newID(p.ProposalId); err != nil {
		return err
	}
	// RFC-MACP-0008 §5.2 (spec fixture proposal_reject_paths: empty →
	// INVALID_ENVELOPE). Decision: a withdrawn proposal still "exists" and
	// may be countered; supersession records intent only (§5.2a).
	if isBlank(p.SupersedesProposalId) {
		return invalid("supersedes_proposal_id is required (RFC-MACP-0008 §5.2)")
	}
	if s.byID[p.SupersedesProposalId] == nil {
		return invalid("supersedes_proposal_id %q does not reference an existing proposal (RFC-MACP-0008 §5.2)", p.SupersedesProposalId)
	}
	// Decision: counter_proposal.max_rounds ("maximum negotiation rounds")
	// counts the session's accepted CounterProposals; the one that would
	// exceed it is refused when it arrives with POLICY_DENIED (the envelope
	// is well-formed, the bound policy forbids it; as Decision Mode's
	// required_before_voting, ⚠C15). The reference runtime instead accepts
	// it and then denies every Commitment, which leaves the session no way
	// to resolve.
	if s.rules.maxRounds > 0 && s.counters >= s.rules.maxRounds {
		reason := fmt.Sprintf("counter_proposal.max_rounds: %d of %d counter-proposal round(s) already used", s.counters, s.rules.maxRounds)
		return &coord.Error{Code: coord.CodePolicyDenied, Message: "policy denies the counter-proposal: " + reason, Reasons: []string{reason}}
	}
	s.counters++
	s.add(&record{
		id: p.ProposalId, proposer: m.Sender, proposerIdx: idx, supersedes: p.SupersedesProposalId, counter: true,
		title: p.Title, summary: p.Summary, detailsLen: len(p.Details),
	})
	return nil
}

// target returns the proposal an Accept, Reject or Withdraw references
// (RFC-MACP-0008 §5.3).
func (s *state) target(id string) (*record, error) {
	r := s.byID[id]
	if r == nil {
		return nil, invalid("proposal_id %q does not reference an existing proposal (RFC-MACP-0008 §5.3)", id)
	}
	return r, nil
}

func (s *state) accept(idx int, m *mode.Message) error {
	var p proposalv1.AcceptPayload
	if err := proto.Unmarshal(m.Payload, &p); err != nil {
		return invalid("payload is not a proposal AcceptPayload")
	}
	r, err := s.target(p.ProposalId)
	if err != nil {
		return err
	}
	if r.withdrawn {
		return invalid("proposal %q was withdrawn and cannot be accepted (RFC-MACP-0008 §5.4)", r.id)
	}
	// RFC-MACP-0008 §5.5: the latest Accept replaces the earlier one.
	// Re-accepting the current target is accepted and changes nothing.
	if s.accepts[idx] != r.order {
		s.unaccept(idx)
		s.accepts[idx] = r.order
		r.acceptors++
		if idx == r.proposerIdx {
			r.proposerAccepts = true
		}
		s.refresh(r)
	}
	return nil
}

// unaccept clears participant idx's current Accept, if any.
func (s *state) unaccept(idx int) {
	o := s.accepts[idx]
	if o < 0 {
		return
	}
	q := s.proposals[o]
	q.acceptors--
	if idx == q.proposerIdx {
		q.proposerAccepts = false
	}
	s.accepts[idx] = -1
	s.refresh(q)
}

func (s *state) reject(idx int, m *mode.Message) error {
	var p proposalv1.RejectPayload
	if err := proto.Unmarshal(m.Payload, &p); err != nil {
		return invalid("payload is not a proposal RejectPayload")
	}
	// Decision: a withdrawn proposal may still be rejected — RFC-MACP-0008
	// §5.3 only requires that it exist, and a terminal Reject ends the
	// negotiation whatever it names (as the reference runtime).
	r, err := s.target(p.ProposalId)
	if err != nil {
		return err
	}
	// RFC-MACP-0012 §4.3 rejection.terminal_on_any_reject: "any rejection
	// terminates the session", i.e. makes it eligible for a negative
	// Commitment exactly as Reject{terminal=true} does.
	terminal := p.Terminal || s.rules.terminalOnAnyReject
	s.rejections = append(s.rejections, rejection{proposalID: r.id, sender: m.Sender, reason: p.Reason, terminal: terminal})
	if terminal {
		s.terminal++
	}
	// Decision: rejecting the proposal one currently accepts withdraws that
	// acceptance — the participant's latest word on it is a rejection
	// (RFC-MACP-0008 §5.5 "the latest ... supersedes").
	if s.accepts[idx] == r.order {
		s.unaccept(idx)
	}
	return nil
}

func (s *state) withdraw(_ int, m *mode.Message) error {
	var p proposalv1.WithdrawPayload
	if err := proto.Unmarshal(m.Payload, &p); err != nil {
		return invalid("payload is not a proposal WithdrawPayload")
	}
	r, err := s.target(p.ProposalId)
	if err != nil {
		return err
	}
	if r.proposer != m.Sender {
		return forbidden(m, fmt.Sprintf("only the author of proposal %q may withdraw it", r.id))
	}
	if r.withdrawn {
		return invalid("proposal %q is already withdrawn", r.id)
	}
	r.withdrawn = true
	// Decision: Accepts that targeted the withdrawn proposal are cleared
	// (as the reference runtime): they can never count again (§5.4), and
	// the projected accepts show only live targets. Terminal rejections
	// stay: they were accepted into history and keep the session eligible
	// for a negative Commitment (unlike the reference runtime, which drops
	// those naming the withdrawn proposal).
	if r.acceptors > 0 {
		for i, o := range s.accepts {
			if o == r.order {
				s.accepts[i] = -1
			}
		}
		r.acceptors, r.proposerAccepts = 0, false
	}
	s.refresh(r)
	return nil
}

// meets reports whether r meets the acceptance criterion (package doc).
func (s *state) meets(r *record) bool {
	if r.withdrawn || r.acceptors == 0 {
		return false
	}
	switch s.rules.criterion {
	case initiatorOnly:
		return s.accepts[s.initiator] == r.order
	case counterparty:
		others := r.acceptors
		if r.proposerAccepts {
			others--
		}
		return others == len(s.names)-1
	default:
		return r.acceptors == len(s.names)
	}
}

// refresh recomputes r.converged and the converged count.
func (s *state) refresh(r *record) {
	if m := s.meets(r); m != r.converged {
		r.converged = m
		if m {
			s.converged++
		} else {
			s.converged--
		}
	}
}

func (s *state) phase() Phase {
	switch {
	case s.committed:
		return PhaseCommitted
	case s.terminal > 0:
		return PhaseTerminalRejected
	case s.converged > 0:
		return PhaseConverged
	default:
		return PhaseNegotiating
	}
}

// Commit checks eligibility (RFC-MACP-0008 §5.6, INVALID_ENVELOPE as the
// spec fixture proposal_reject_paths). Decision: the outcome decides which
// eligibility is needed — a positive Commitment (proposal.accepted) needs a
// live proposal meeting the acceptance criterion, a negative one
// (proposal.rejected) an accepted terminal rejection (§6 "when a terminal
// reject has been accepted into history"). CommitmentPayload names no
// proposal; §6 asks the authority to reference it in reason or context.
func (s *state) Commit(b *mode.Binding, m *mode.Message, c *macpv1.CommitmentPayload) error {
	if s.committed {
		return coord.Errorf(coord.CodeSessionNotOpen, "proposal session already committed")
	}
	if c == nil {
		return invalid("commitment payload is required")
	}
	if c.GetOutcomePositive() {
		if s.converged == 0 {
			return invalid("a positive Commitment requires a live proposal accepted by all required participants (acceptance.criterion %s, RFC-MACP-0008 §5.6)", s.rules.criterion)
		}
	} else if s.terminal == 0 {
		return invalid("a negative Commitment requires an accepted terminal Reject (RFC-MACP-0008 §5.6, §6)")
	}
	s.committed = true
	s.outcomePositive = c.GetOutcomePositive()
	return nil
}

// Project returns the checklist PROP-9 view:
//
//	{"phase": "Negotiating",
//	 "accepts":   {sender: proposal_id},          // latest Accept per participant
//	 "proposals": {id: {"proposal_id", "proposer", "disposition": "Live"|"Withdrawn",
//	                    "kind": "Proposal"|"CounterProposal", "supersedes_proposal_id",
//	                    "title", "summary", "tags", "details_bytes", "accepted_by": [sender], "meets_criterion"}},
//	 "proposal_order": [id],                      // acceptance order
//	 "rejections": [{"proposal_id", "sender", "reason", "terminal"}],
//	 "converged": [id],                           // live proposals meeting the criterion
//	 "terminal_rejected": bool, "counter_proposals": n,
//	 "acceptance_criterion": "all_parties",
//	 "outcome_positive": bool}                    // only once committed
//
// Raw details bytes are not projected (RFC-MACP-0008 §8: payloads may be
// confidential); their length is.
func (s *state) Project() map[string]any {
	proposals := make(map[string]any, len(s.proposals))
	order := make([]any, len(s.proposals))
	acceptedBy := make([][]any, len(s.proposals))
	for i, o := range s.accepts {
		if o >= 0 {
			acceptedBy[o] = append(acceptedBy[o], s.names[i])
		}
	}
	converged := []any{}
	for i, r := range s.proposals {
		order[i] = r.id
		disposition, kind := DispositionLive, TypeProposal
		if r.withdrawn {
			disposition = DispositionWithdrawn
		}
		if r.counter {
			kind = TypeCounterProposal
		}
		tags := make([]any, len(r.tags))
		for j, t := range r.tags {
			tags[j] = t
		}
		by := acceptedBy[i]
		if by == nil {
			by = []any{}
		}
		proposals[r.id] = map[string]any{
			"proposal_id":            r.id,
			"proposer":               r.proposer,
			"disposition":            disposition,
			"kind":                   kind,
			"supersedes_proposal_id": r.supersedes,
			"title":                  r.title,
			"summary":                r.summary,
			"tags":                   tags,
			"details_bytes":          r.detailsLen,
			"accepted_by":            by,
			"meets_criterion":        r.converged,
		}
		if r.converged {
			converged = append(converged, r.id)
		}
	}
	accepts := make(map[string]any)
	for i, o := range s.accepts {
		if o >= 0 {
			accepts[s.names[i]] = s.proposals[o].id
		}
	}
	rejections := make([]any, len(s.rejections))
	for i, x := range s.rejections {
		rejections[i] = map[string]any{"proposal_id": x.proposalID, "sender": x.sender, "reason": x.reason, "terminal": x.terminal}
	}
	out := map[string]any{
		"phase":                s.phase().String(),
		"accepts":              accepts,
		"proposals":            proposals,
		"proposal_order":       order,
		"rejections":           rejections,
		"converged":            converged,
		"terminal_rejected":    s.terminal > 0,
		"counter_proposals":    s.counters,
		"acceptance_criterion": s.rules.criterion.String(),
	}
	if s.committed {
		out["outcome_positive"] = s.outcomePositive
	}
	return out
}
