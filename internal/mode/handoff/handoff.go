// Package handoff implements macp.mode.handoff.v1 (RFC-MACP-0010): the
// current responsibility owner — the session initiator — offers a scoped
// responsibility to one named declared participant at a time, may attach
// context, and the target accepts or declines; one Commitment binds the
// transfer (positive, e.g. handoff.accepted) or its failure (negative, e.g.
// handoff.declined).
//
// Phases (as projected):
//
//	Idle          no offer yet
//	OfferPending  one offer awaits its target's answer (RFC-MACP-0010 §5.5:
//	              at most one at a time)
//	Declined      the latest offer was declined; the owner may offer again
//	              (new handoff_id, new target) or commit a negative outcome
//	Accepted      an offer was accepted; no further offers (§5.5); eligible
//	              for a positive Commitment
//	Committed     a Commitment was accepted
//
// Late HandoffContext (checklist HAND-6, ⚠C7). RFC-MACP-0010 §2.1 says
// context SHOULD precede HandoffAccept/HandoffDecline and that late context
// "is permitted ... as supplementary documentation"; the April spec fixture
// handoff_reject_paths (our baseline, CONF-27) rejects a HandoffContext sent
// after the accept with INVALID_ENVELOPE, as does the reference runtime at
// that baseline. Decision: under ProfileApril New follows the fixture and
// refuses context for an offer that is no longer pending; under
// ProfileLatest, or with NewWithOptions(Options{AcceptLateContext: true}),
// it is accepted and recorded as late (the newest spec fixture
// handoff_reject_paths, CONF-40/41).
//
// Implicit acceptance (RFC-MACP-0012 §4.5, RFC-MACP-0010 §5.1, POL-55):
// acceptance.implicit_accept_timeout_ms needs a timer that appends a
// synthetic HandoffAccept{implicit: true} to history; the policy evaluator
// only sees that history. A client-sent HandoffAccept with implicit=true is
// refused INVALID_ENVELOPE under both profiles (no April client can send
// the field). The pure parts the runtime's timer needs are here
// (ImplicitAcceptTimeout, ImplicitAcceptDue, PendingImplicitAccept,
// ImplicitAccepter); until the runtime wires a timer, Decision: a policy
// that sets the timeout > 0 is refused at Start with
// INVALID_POLICY_DEFINITION rather than silently ignored, unless the mode
// was built with Options{ImplicitAccept: true}.
//
// The package is pure: no clock, I/O, goroutines or map-order dependence.
// Every interpretation of an ambiguous spec sentence is marked "Decision:".
package handoff

import (
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/proto"

	handoffv1 "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
)

// ModeID and ModeVersion identify the mode (RFC-MACP-0010 §2).
const (
	ModeID      = "macp.mode.handoff.v1"
	ModeVersion = "1.0.0"
)

// Mode-specific message types (RFC-MACP-0010 §4).
const (
	TypeOffer   = "HandoffOffer"
	TypeContext = "HandoffContext"
	TypeAccept  = "HandoffAccept"
	TypeDecline = "HandoffDecline"
)

// Phase is the handoff phase as projected; see the package doc.
type Phase uint8

// Phases.
const (
	PhaseIdle Phase = iota
	PhaseOfferPending
	PhaseDeclined
	PhaseAccepted
	PhaseCommitted
)

var phaseNames = [...]string{"Idle", "OfferPending", "Declined", "Accepted", "Committed"}

func (p Phase) String() string { return phaseNames[p] }

// Disposition of one offer as projected (checklist CONF-16, CONF-27).
type Disposition uint8

// Dispositions.
const (
	Pending Disposition = iota
	Accepted
	Declined
)

var dispositionNames = [...]string{"Pending", "Accepted", "Declined"}

func (d Disposition) String() string { return dispositionNames[d] }

var descriptor = &macpv1.ModeDescriptor{
	Mode:        ModeID,
	ModeVersion: ModeVersion,
	Title:       "Handoff",
	Description: "Transfer of scoped responsibility: the current owner offers it to one named participant at a time and shares context; " +
		"the target accepts or declines, and the owner (or policy authority) commits the transfer or its failure.",
	DeterminismClass:     "context-frozen",
	ParticipantModel:     "delegated",
	MessageTypes:         []string{coord.TypeSessionStart, TypeOffer, TypeContext, TypeAccept, TypeDecline, coord.TypeCommitment},
	TerminalMessageTypes: []string{coord.TypeCommitment},
	SchemaUris: map[string]string{
		"proto":       "buf.build/multiagentcoordinationprotocol/macp/macp.modes.handoff.v1",
		"json_schema": "https://macp.dev/schemas/policy/handoff-rules.schema.json",
		"docs":        "https://github.com/multiagentcoordinationprotocol/multiagentcoordinationprotocol/blob/main/rfcs/RFC-MACP-0010-handoff-mode.md",
	},
}

// Options tune behaviour the spec leaves open.
type Options struct {
	// AcceptLateContext accepts a HandoffContext for an offer already
	// accepted or declined (⚠C7; see the package doc). The default refuses
	// it, as the April spec fixture handoff_reject_paths requires.
	AcceptLateContext bool
	// ImplicitAccept says the runtime runs the implicit-accept timer
	// (see ImplicitAccepter): policies with
	// acceptance.implicit_accept_timeout_ms > 0 are then accepted.
	ImplicitAccept bool
}

type handoffMode struct{ opts Options }

// New returns the Handoff Mode with default Options (late context refused).
func New() mode.Mode { return handoffMode{} }

// NewWithOptions returns the Handoff Mode with o. The descriptor is the same.
func NewWithOptions(o Options) mode.Mode { return handoffMode{opts: o} }

// Descriptor returns the shared descriptor; callers must not modify it.
func (handoffMode) Descriptor() *macpv1.ModeDescriptor { return descriptor }

// ValidateRules implements mode.RulesValidator: the handoff sections
// (checkRules; none depends on the participants).
func (m handoffMode) ValidateRules(p *policy.Policy) error { return checkRules(p, m.opts) }

// Start checks the SessionStart requirements and the bound policy's handoff
// rules. Decision: RFC-MACP-0010 §3 binds "participants - current owner and
// eligible targets", so the initiator (the owner, §2) must be a declared
// participant and at least one other declared participant must exist
// (INVALID_ENVELOPE; as the reference runtime).
func (m handoffMode) Start(b *mode.Binding) (mode.State, error) {
	if !b.IsParticipant(b.Initiator) {
		return nil, coord.Errorf(coord.CodeInvalidEnvelope,
			"%s: the initiator %s is the current owner and must be a declared participant (RFC-MACP-0010 §3)", ModeID, b.Initiator)
	}
	targets := 0
	for _, p := range b.Participants {
		if p != b.Initiator {
			targets++
		}
	}
	if targets == 0 {
		return nil, coord.Errorf(coord.CodeInvalidEnvelope,
			"%s requires at least one declared participant besides the owner to hand off to (RFC-MACP-0010 §3)", ModeID)
	}
	if err := checkRules(b.Policy, m.opts); err != nil {
		return nil, err
	}
	set := make(map[string]struct{}, len(b.Participants))
	for _, p := range b.Participants {
		set[p] = struct{}{}
	}
	return &state{opts: m.opts, latest: coord.IsLatest(b.Profile), owner: b.Initiator, participants: set, pending: -1, accepted: -1}, nil
}

func badPolicy(format string, args ...any) error {
	return coord.Errorf(coord.CodeInvalidPolicyDefinition, format, args...)
}

// checkRules validates the handoff sections of p against
// handoff-rules.schema.json (RFC-MACP-0012 §4.5). The commitment section is
// the core's (policy.Parse).
func checkRules(p *policy.Policy, o Options) error {
	v, err := ImplicitAcceptTimeout(p)
	if err != nil {
		return err
	}
	if v > 0 && !o.ImplicitAccept {
		return badPolicy("acceptance.implicit_accept_timeout_ms %v is not supported by this runtime: "+
			"implicit accepts need a mode timer that appends a synthetic HandoffAccept (RFC-MACP-0012 §4.5), which macpd does not implement; use 0", v)
	}
	return nil
}

// ImplicitAcceptTimeout returns acceptance.implicit_accept_timeout_ms of
// p (0: no implicit acceptance). A value that is not an integer >= 0 is
// INVALID_POLICY_DEFINITION.
func ImplicitAcceptTimeout(p *policy.Policy) (uint64, error) {
	if p == nil {
		return 0, nil
	}
	var a struct {
		ImplicitAcceptTimeoutMs *float64 `json:"implicit_accept_timeout_ms"`
	}
	if err := p.DecodeSection("acceptance", &a); err != nil {
		return 0, err
	}
	if a.ImplicitAcceptTimeoutMs == nil {
		return 0, nil
	}
	v := *a.ImplicitAcceptTimeoutMs
	if v != math.Trunc(v) || v < 0 || v > 1<<53 {
		return 0, badPolicy("acceptance.implicit_accept_timeout_ms %v must be an integer >= 0", v)
	}
	return uint64(v), nil
}

// ImplicitAcceptDue reports whether an offer accepted into history at
// offeredAtMs (the runtime's acceptance clock, never an envelope
// timestamp) is implicitly accepted at nowMs under timeoutMs: timeoutMs > 0
// and nowMs - offeredAtMs >= timeoutMs.
func ImplicitAcceptDue(timeoutMs uint64, offeredAtMs, nowMs int64) bool {
	return timeoutMs > 0 && nowMs >= offeredAtMs && uint64(nowMs-offeredAtMs) >= timeoutMs
}

// ImplicitAccepter is implemented by the handoff State. The runtime's
// implicit-accept timer, when ImplicitAcceptDue holds for the pending
// offer (PendingImplicitAccept), appends the returned message to history
// as runtime-emitted and applies it with StepImplicit — and on replay
// applies a recorded runtime-emitted accept the same way. The policy
// evaluator then only sees accepted history (RFC-MACP-0012 §4.5).
type ImplicitAccepter interface {
	// PendingImplicitAccept returns the synthetic HandoffAccept for the
	// pending offer (sender and accepted_by its target, implicit true),
	// or false when no offer is pending.
	PendingImplicitAccept() (mode.Message, bool)
	// StepImplicit applies a runtime-emitted HandoffAccept with
	// implicit=true for the pending offer; INVALID_ENVELOPE otherwise.
	StepImplicit(b *mode.Binding, m *mode.Message) error
}

// ImplicitReason is the reason of a synthetic implicit HandoffAccept.
const ImplicitReason = "implicit accept (timeout)"

// ImplicitAcceptTimeoutMs implements mode.ImplicitAccepter: the bound
// policy's acceptance.implicit_accept_timeout_ms (Start already refused an
// invalid value).
func (s *state) ImplicitAcceptTimeoutMs(b *mode.Binding) uint64 {
	v, err := ImplicitAcceptTimeout(b.Policy)
	if err != nil {
		return 0
	}
	return v
}

// PendingImplicitAccept implements ImplicitAccepter.
func (s *state) PendingImplicitAccept() (mode.Message, bool) {
	if s.committed || s.pending < 0 {
		return mode.Message{}, false
	}
	o := s.offers[s.pending]
	payload, _ := proto.Marshal(&handoffv1.HandoffAcceptPayload{HandoffId: o.id, AcceptedBy: o.target, Reason: ImplicitReason, Implicit: true})
	return mode.Message{Type: TypeAccept, Sender: o.target, Payload: payload}, true
}

// StepImplicit implements ImplicitAccepter.
func (s *state) StepImplicit(b *mode.Binding, m *mode.Message) error {
	if s.committed {
		return coord.Errorf(coord.CodeSessionNotOpen, "handoff session already committed")
	}
	var p handoffv1.HandoffAcceptPayload
	if m.Type != TypeAccept || proto.Unmarshal(m.Payload, &p) != nil || !p.Implicit {
		return invalid("an implicit accept is a HandoffAccept with implicit=true")
	}
	if s.pending < 0 || s.offers[s.pending].id != p.HandoffId {
		return invalid("implicit accept of %q: it is not the pending offer", p.HandoffId)
	}
	o := s.offers[s.pending]
	if m.Sender != o.target || (p.AcceptedBy != "" && p.AcceptedBy != o.target) {
		return invalid("implicit accept of %q must be on behalf of its target %s", o.id, o.target)
	}
	o.respondedBy, o.responseReason, o.implicit = o.target, p.Reason, true
	o.disposition = Accepted
	s.accepted = o.order
	s.pending = -1
	return nil
}

// state is one session's handoff state. Offers are kept in acceptance
// order; the map is used only for lookups, never iterated.
type state struct {
	opts Options
	// latest: the session is bound to ProfileLatest.
	latest bool
	owner  string
	// participants is the declared participant set (lookups only).
	participants map[string]struct{}

	offers []*offer
	byID   map[string]*offer
	// pending and accepted are offer orders, -1 for none. At most one
	// offer is pending (§5.5) and at most one is ever accepted.
	pending, accepted int
	contexts          []contextRecord

	committed, outcomePositive bool
}

type offer struct {
	order                       int
	id, target, scope, reason   string
	offeredBy                   string
	disposition                 Disposition
	respondedBy, responseReason string
	contexts                    int
	// implicit: accepted by a runtime-emitted implicit accept.
	implicit bool
}

type contextRecord struct {
	handoffID, contentType, sender string
	size                           int
	late                           bool
}

func forbidden(m *mode.Message, why string) error {
	return coord.Errorf(coord.CodeForbidden, "%s may not send %s: %s (RFC-MACP-0010 §2.1)", m.Sender, m.Type, why)
}

func invalid(format string, args ...any) error {
	return coord.Errorf(coord.CodeInvalidEnvelope, format, args...)
}

func (s *state) isParticipant(id string) bool {
	_, ok := s.participants[id]
	return ok
}

func isBlank(s string) bool { return strings.TrimSpace(s) == "" }

// Step validates and applies HandoffOffer, HandoffContext, HandoffAccept and
// HandoffDecline: authority (FORBIDDEN), then payload, references and state
// (INVALID_ENVELOPE). Nothing changes on error.
func (s *state) Step(b *mode.Binding, m *mode.Message) error {
	if s.committed {
		return coord.Errorf(coord.CodeSessionNotOpen, "handoff session already committed")
	}
	switch m.Type {
	case TypeOffer:
		return s.offer(m)
	case TypeContext:
		return s.addContext(m)
	case TypeAccept, TypeDecline:
		return s.respond(m)
	default:
		return invalid("message type %q is not defined by %s", m.Type, ModeID)
	}
}

func (s *state) offer(m *mode.Message) error {
	if m.Sender != s.owner {
		return forbidden(m, "only the current owner "+s.owner+" may offer the handoff")
	}
	var p handoffv1.HandoffOfferPayload
	if err := proto.Unmarshal(m.Payload, &p); err != nil {
		return invalid("payload is not a handoff HandoffOfferPayload")
	}
	// Decision: blank handoff_id or target_participant is refused — an
	// unnamed offer cannot be referenced, an untargeted one not answered.
	if isBlank(p.HandoffId) {
		return invalid("handoff_id is required (RFC-MACP-0010 §5.1)")
	}
	if isBlank(p.TargetParticipant) {
		return invalid("target_participant is required (RFC-MACP-0010 §2)")
	}
	if _, dup := s.byID[p.HandoffId]; dup {
		return invalid("handoff_id %q already identifies an offer (RFC-MACP-0010 §5.1, §5.3a)", p.HandoffId)
	}
	if s.accepted >= 0 {
		return invalid("offer %q was accepted; no further offers may be issued (RFC-MACP-0010 §5.5)", s.offers[s.accepted].id)
	}
	if s.pending >= 0 {
		return invalid("offer %q is still pending; at most one offer may be outstanding (RFC-MACP-0010 §5.5)", s.offers[s.pending].id)
	}
	// Decision: the target must be a declared participant other than the
	// owner — SessionStart binds "current owner and eligible targets" (§3),
	// and handing responsibility to oneself transfers nothing.
	if p.TargetParticipant == s.owner {
		return invalid("target_participant %s is the current owner", p.TargetParticipant)
	}
	if !s.isParticipant(p.TargetParticipant) {
		return invalid("target_participant %s is not a declared participant (RFC-MACP-0010 §3)", p.TargetParticipant)
	}
	// Decision: §5.3a "a new HandoffOffer MUST be issued with a different
	// target_participant" and §5.5 "sequential handoff offers to different
	// targets": a participant who declined is not offered again. (Every
	// earlier offer was declined: none is pending or accepted.)
	for _, o := range s.offers {
		if o.target == p.TargetParticipant {
			return invalid("%s already declined offer %q; a new offer needs a different target (RFC-MACP-0010 §5.3a)", o.target, o.id)
		}
	}
	o := &offer{
		order: len(s.offers), id: p.HandoffId, target: p.TargetParticipant, scope: p.Scope, reason: p.Reason,
		offeredBy: m.Sender, disposition: Pending,
	}
	if s.byID == nil {
		s.byID = make(map[string]*offer, 2)
	}
	s.byID[o.id] = o
	s.offers = append(s.offers, o)
	s.pending = o.order
	return nil
}

// ref returns the offer a Context, Accept or Decline references
// (RFC-MACP-0010 §5.2; spec fixture handoff_reject_paths).
func (s *state) ref(id string) (*offer, error) {
	o := s.byID[id]
	if o == nil {
		return nil, invalid("handoff_id %q does not reference an existing offer (RFC-MACP-0010 §5.2)", id)
	}
	return o, nil
}

func (s *state) addContext(m *mode.Message) error {
	if m.Sender != s.owner {
		return forbidden(m, "only the current owner "+s.owner+" may send handoff context")
	}
	var p handoffv1.HandoffContextPayload
	if err := proto.Unmarshal(m.Payload, &p); err != nil {
		return invalid("payload is not a handoff HandoffContextPayload")
	}
	o, err := s.ref(p.HandoffId)
	if err != nil {
		return err
	}
	late := o.disposition != Pending
	if late && !s.opts.AcceptLateContext && !s.latest {
		return invalid("offer %q was already %s; context must precede the answer (RFC-MACP-0010 §2.1; spec fixture handoff_reject_paths, ⚠C7)",
			o.id, strings.ToLower(o.disposition.String()))
	}
	o.contexts++
	s.contexts = append(s.contexts, contextRecord{handoffID: o.id, contentType: p.ContentType, sender: m.Sender, size: len(p.Context), late: late})
	return nil
}

// respond handles HandoffAccept and HandoffDecline.
func (s *state) respond(m *mode.Message) error {
	// Authority in two steps: a sender who can never be a target (not a
	// declared participant, or the owner) is FORBIDDEN before decoding; the
	// offer's target_participant is known only once the payload names the
	// offer, and an unknown offer is INVALID_ENVELOPE (spec fixture
	// handoff_reject_paths) before the target check.
	if m.Sender == s.owner || !s.isParticipant(m.Sender) {
		return forbidden(m, "only the target participant of the referenced offer may answer it")
	}
	accept := m.Type == TypeAccept
	var id, by, reason string
	if accept {
		var p handoffv1.HandoffAcceptPayload
		if err := proto.Unmarshal(m.Payload, &p); err != nil {
			return invalid("payload is not a handoff HandoffAcceptPayload")
		}
		// RFC-MACP-0010 §5.1 (macp-proto 0.1.6): implicit=true is
		// runtime-emitted only (ImplicitAccepter); a client may not send it.
		if p.Implicit {
			return invalid("HandoffAccept.implicit is set only on runtime-emitted implicit accepts (RFC-MACP-0010 §5.1)")
		}
		id, by, reason = p.HandoffId, p.AcceptedBy, p.Reason
	} else {
		var p handoffv1.HandoffDeclinePayload
		if err := proto.Unmarshal(m.Payload, &p); err != nil {
			return invalid("payload is not a handoff HandoffDeclinePayload")
		}
		id, by, reason = p.HandoffId, p.DeclinedBy, p.Reason
	}
	o, err := s.ref(id)
	if err != nil {
		return err
	}
	if m.Sender != o.target {
		return forbidden(m, fmt.Sprintf("offer %q targets %s (RFC-MACP-0010 §5.3)", o.id, o.target))
	}
	// Decision: accepted_by / declined_by, when set, must name the sender
	// (the authenticated identity); empty means the sender.
	if by != "" && by != m.Sender {
		field := "declined_by"
		if accept {
			field = "accepted_by"
		}
		return invalid("%s %s is not the sender %s", field, by, m.Sender)
	}
	// RFC-MACP-0010 §5.4: one answer per offer.
	if o.disposition != Pending {
		return invalid("offer %q was already %s (RFC-MACP-0010 §5.4)", o.id, strings.ToLower(o.disposition.String()))
	}
	o.respondedBy, o.responseReason = m.Sender, reason
	if accept {
		o.disposition = Accepted
		s.accepted = o.order
	} else {
		o.disposition = Declined
	}
	s.pending = -1
	return nil
}

func (s *state) phase() Phase {
	switch {
	case s.committed:
		return PhaseCommitted
	case s.accepted >= 0:
		return PhaseAccepted
	case s.pending >= 0:
		return PhaseOfferPending
	case len(s.offers) > 0:
		return PhaseDeclined
	default:
		return PhaseIdle
	}
}

// Commit checks eligibility (INVALID_ENVELOPE). Decision (RFC-MACP-0010 §6,
// checklist HAND-7): a positive Commitment (handoff.accepted) needs an
// accepted offer; a negative one (declined outcome) needs the latest offer
// declined — at least one offer, none accepted and none pending: a
// Commitment binds a definitive outcome, which a pending offer is not (the
// owner can cancel the session instead). A "no-target" outcome without any
// offer is not eligible: nothing in history supports it.
func (s *state) Commit(b *mode.Binding, m *mode.Message, c *macpv1.CommitmentPayload) error {
	if s.committed {
		return coord.Errorf(coord.CodeSessionNotOpen, "handoff session already committed")
	}
	if c == nil {
		return invalid("commitment payload is required")
	}
	switch ph := s.phase(); {
	case c.GetOutcomePositive() && ph != PhaseAccepted:
		return invalid("a positive Commitment requires an accepted HandoffOffer (RFC-MACP-0010 §6); phase is %s", ph)
	case !c.GetOutcomePositive() && ph != PhaseDeclined:
		return invalid("a negative Commitment requires the latest HandoffOffer to be declined (RFC-MACP-0010 §6); phase is %s", ph)
	}
	s.committed = true
	s.outcomePositive = c.GetOutcomePositive()
	if s.outcomePositive {
		s.owner = s.offers[s.accepted].target
	}
	return nil
}

// Project returns the view (checklist CONF-16, CONF-27):
//
//	{"phase": "OfferPending",
//	 "owner": current responsibility owner (the initiator; the accepted
//	          target once a positive Commitment binds the transfer),
//	 "pending_offer": id or "", "accepted_offer": id or "",
//	 "offers": {id: {"handoff_id", "target_participant", "scope", "reason", "offered_by",
//	                 "disposition": "Pending"|"Accepted"|"Declined",
//	                 "responded_by", "response_reason", "contexts": n,
//	                 "implicit": true (only for an implicit accept)}},
//	 "offer_order": [id],
//	 "contexts": [{"handoff_id", "content_type", "sender", "bytes", "late"}],
//	 "outcome_positive": bool}   // only once committed
//
// Raw context bytes are not projected (RFC-MACP-0010 §8: protect sensitive
// handoff context); their length is.
func (s *state) Project() map[string]any {
	offers := make(map[string]any, len(s.offers))
	order := make([]any, len(s.offers))
	for i, o := range s.offers {
		order[i] = o.id
		view := map[string]any{
			"handoff_id":         o.id,
			"target_participant": o.target,
			"scope":              o.scope,
			"reason":             o.reason,
			"offered_by":         o.offeredBy,
			"disposition":        o.disposition.String(),
			"responded_by":       o.respondedBy,
			"response_reason":    o.responseReason,
			"contexts":           o.contexts,
		}
		if o.implicit { // only then, so April projections are unchanged
			view["implicit"] = true
		}
		offers[o.id] = view
	}
	contexts := make([]any, len(s.contexts))
	for i, c := range s.contexts {
		contexts[i] = map[string]any{
			"handoff_id": c.handoffID, "content_type": c.contentType, "sender": c.sender, "bytes": c.size, "late": c.late,
		}
	}
	id := func(i int) string {
		if i < 0 {
			return ""
		}
		return s.offers[i].id
	}
	out := map[string]any{
		"phase":          s.phase().String(),
		"owner":          s.owner,
		"pending_offer":  id(s.pending),
		"accepted_offer": id(s.accepted),
		"offers":         offers,
		"offer_order":    order,
		"contexts":       contexts,
	}
	if s.committed {
		out["outcome_positive"] = s.outcomePositive
	}
	return out
}
