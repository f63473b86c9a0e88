// Package task implements macp.mode.task.v1 (RFC-MACP-0009): the session
// initiator requests one bounded task, one declared participant accepts it
// and reports progress and completion or failure, and the session ends with
// one Commitment, positive (task.completed) or negative (task.failed). The
// bound policy's task rules (RFC-MACP-0012 §4.4) are parsed once at Start and
// act inside message validation (checklist POL-31, ⚠C15).
//
// Lifecycle (projected as "phase"):
//
//	Pending --TaskRequest--> Requested --TaskAccept--> InProgress --TaskComplete--> Completed
//	                             ^                        |      \--TaskFail-----> Failed
//	                             +--TaskReject (policy)---+
//	any of the above --Commitment (when eligible)--> Committed
//
// Terms used below: the eligible assignees are the declared participants
// other than the initiator; a responder is an eligible assignee allowed to
// send TaskAccept/TaskReject (RFC-MACP-0009 §2.1); the active assignee is the
// participant whose TaskAccept was accepted and not since withdrawn.
//
// The package is pure: no clock, I/O, goroutines or map-order dependence.
// Every interpretation of an ambiguous or silent spec sentence is marked
// "Decision:".
package task

import (
	"encoding/base64"
	"strings"

	"google.golang.org/protobuf/proto"

	taskv1 "github.com/macpd/macpd/gen/macp/modes/task/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
)

// ModeID and ModeVersion identify the mode (RFC-MACP-0009 §2).
const (
	ModeID      = "macp.mode.task.v1"
	ModeVersion = "1.0.0"
)

// Mode-specific message types (RFC-MACP-0009 §4).
const (
	TypeTaskRequest  = "TaskRequest"
	TypeTaskAccept   = "TaskAccept"
	TypeTaskReject   = "TaskReject"
	TypeTaskUpdate   = "TaskUpdate"
	TypeTaskComplete = "TaskComplete"
	TypeTaskFail     = "TaskFail"
)

// Phase is the session phase as projected.
type Phase uint8

// Phases.
const (
	PhasePending Phase = iota
	PhaseRequested
	PhaseInProgress
	PhaseCompleted
	PhaseFailed
	PhaseCommitted
)

var phaseNames = [...]string{"Pending", "Requested", "InProgress", "Completed", "Failed", "Committed"}

func (p Phase) String() string { return phaseNames[p] }

var descriptor = &macpv1.ModeDescriptor{
	Mode:        ModeID,
	ModeVersion: ModeVersion,
	Title:       "Task",
	Description: "One bounded delegated task: the initiator requests it, one declared participant accepts it and reports " +
		"progress and completion or failure, and the initiator (or policy authority) commits task.completed or task.failed.",
	DeterminismClass: "structural-only",
	ParticipantModel: "orchestrated",
	MessageTypes: []string{coord.TypeSessionStart, TypeTaskRequest, TypeTaskAccept, TypeTaskReject,
		TypeTaskUpdate, TypeTaskComplete, TypeTaskFail, coord.TypeCommitment},
	TerminalMessageTypes: []string{coord.TypeCommitment},
	SchemaUris: map[string]string{
		"proto":       "buf.build/multiagentcoordinationprotocol/macp/macp.modes.task.v1",
		"json_schema": "https://macp.dev/schemas/policy/task-rules.schema.json",
		"docs":        "https://github.com/multiagentcoordinationprotocol/multiagentcoordinationprotocol/blob/main/rfcs/RFC-MACP-0009-task-mode.md",
	},
}

type taskMode struct{}

// New returns the Task Mode.
func New() mode.Mode { return taskMode{} }

// Descriptor returns the shared descriptor; callers must not modify it.
func (taskMode) Descriptor() *macpv1.ModeDescriptor { return descriptor }

// ValidateRules implements mode.RulesValidator: the task sections against
// task-rules.schema.json (none depends on the participants).
func (taskMode) ValidateRules(p *policy.Policy) error {
	_, err := parseRules(p)
	return err
}

// Start requires at least one eligible assignee and parses the bound
// policy's task rules.
//
// Decision: the eligible assignees are the declared participants other than
// the initiator. The mode is "orchestrated" (RFC-MACP-0002 §5: one
// coordinator assigns work): the requester delegates to someone else, so
// the initiator never accepts its own task even when it is listed (the spec
// fixtures list it, RFC-MACP-0009 §3 "participants - requester and eligible
// assignee participants"). Listing the initiator is allowed but not
// required. A session with no eligible assignee could never progress, so
// Start refuses it (INVALID_ENVELOPE; the reference runtime likewise needs
// two participants).
func (taskMode) Start(b *mode.Binding) (mode.State, error) {
	r, err := parseRules(b.Policy)
	if err != nil {
		return nil, err
	}
	s := &state{rules: r, requested: -1, active: -1, eligible: make(map[string]int, len(b.Participants))}
	for _, p := range b.Participants {
		if _, dup := s.eligible[p]; dup || p == b.Initiator {
			continue
		}
		s.eligible[p] = len(s.names)
		s.names = append(s.names, p)
	}
	if len(s.names) == 0 {
		return nil, coord.Errorf(coord.CodeInvalidEnvelope,
			"%s requires at least one declared participant other than the initiator to assign the task to (RFC-MACP-0009 §3)", ModeID)
	}
	s.declined = make([]bool, len(s.names))
	return s, nil
}

// state is one session's task state. Slices are kept in acceptance order;
// the map is only used for lookups, never iterated.
type state struct {
	rules rules
	// eligible maps an eligible assignee to its index in names.
	eligible map[string]int
	names    []string

	committed bool
	task      *request
	// requested is the index of TaskRequest.requested_assignee, -1 when empty.
	requested int
	// active is the index of the active assignee, -1 when none.
	active int
	// activeUpdated: the active assignee has sent a TaskUpdate.
	activeUpdated bool
	// declined[i]: eligible assignee i sent a TaskReject (before or after
	// accepting) and can no longer respond.
	declined      []bool
	declinedCount int
	accepts       []response
	rejections    []response
	updates       []update
	report        *report
}

type request struct {
	taskID, title, instructions, requestedAssignee, requester string
	input                                                     []byte
	deadline                                                  int64
}

type response struct {
	assignee, reason string
	// withdrawal: a TaskReject by the then active assignee (rule 3c).
	withdrawal bool
}

type update struct {
	status, message, sender string
	progress                float64
	partial                 []byte
}

type report struct {
	complete  bool
	assignee  string
	messageID string
	// TaskComplete
	output  []byte
	summary string
	// TaskFail
	errorCode, reason string
	retryable         bool
}

func forbidden(m *mode.Message, why string) error {
	return coord.Errorf(coord.CodeForbidden, "%s may not send %s: %s (RFC-MACP-0009 §2.1)", m.Sender, m.Type, why)
}

func invalid(format string, args ...any) error {
	return coord.Errorf(coord.CodeInvalidEnvelope, format, args...)
}

func isBlank(s string) bool { return strings.TrimSpace(s) == "" }

// Step validates and applies the six task message types: authority
// (FORBIDDEN), then payload, references and phase (INVALID_ENVELOPE), then
// the policy's completion rule (POLICY_DENIED). Nothing changes on error.
func (s *state) Step(b *mode.Binding, m *mode.Message) error {
	if s.committed {
		return coord.Errorf(coord.CodeSessionNotOpen, "task session already committed")
	}
	switch m.Type {
	case TypeTaskRequest:
		return s.request(b, m)
	case TypeTaskAccept, TypeTaskReject:
		return s.respond(m)
	case TypeTaskUpdate:
		return s.update(m)
	case TypeTaskComplete, TypeTaskFail:
		return s.finish(m)
	default:
		return invalid("message type %q is not defined by %s", m.Type, ModeID)
	}
}

// request handles TaskRequest (RFC-MACP-0009 §5 rule 1).
func (s *state) request(b *mode.Binding, m *mode.Message) error {
	if m.Sender != b.Initiator {
		return forbidden(m, "only the session initiator requests the task")
	}
	var p taskv1.TaskRequestPayload
	if err := proto.Unmarshal(m.Payload, &p); err != nil {
		return invalid("payload is not a task TaskRequestPayload")
	}
	if s.task != nil {
		return invalid("the session already has task %q; Task Mode v1 accepts one TaskRequest per session (RFC-MACP-0009 §5 rule 1)", s.task.taskID)
	}
	// Decision: task_id is required (not blank): every later message must
	// name it, and it is part of the outcome idempotency key (§8).
	if isBlank(p.TaskId) {
		return invalid("task_id is required")
	}
	// Decision: a requested_assignee must be an eligible assignee (a
	// declared participant other than the initiator); naming anyone else
	// would make the task unassignable from the start.
	requested := -1
	if p.RequestedAssignee != "" {
		i, ok := s.eligible[p.RequestedAssignee]
		if !ok {
			return invalid("requested_assignee %q is not a declared participant other than the initiator", p.RequestedAssignee)
		}
		requested = i
	}
	// Decision: deadline_unix_ms is informational (the session TTL is the
	// enforced deadline, RFC-MACP-0009 §3) and is never compared with a
	// clock; only negative values are refused.
	if p.DeadlineUnixMs < 0 {
		return invalid("deadline_unix_ms %d is negative", p.DeadlineUnixMs)
	}
	s.task = &request{
		taskID: p.TaskId, title: p.Title, instructions: p.Instructions,
		requestedAssignee: p.RequestedAssignee, requester: m.Sender,
		input: p.Input, deadline: p.DeadlineUnixMs,
	}
	s.requested = requested
	return nil
}

// mayRespond reports whether eligible assignee i may send TaskAccept or
// TaskReject (RFC-MACP-0009 §2.1, §5 rule 2).
//
// Decision: requested_assignee restricts the responders only until it
// declines. Once it has sent a TaskReject and the policy allows reassignment
// (§5 rule 3c "Other eligible participants MAY then send TaskAccept";
// task-rules.schema.json "a rejected task can be reassigned to a different
// participant"), every eligible assignee may respond. Without that policy a
// requested assignee's TaskReject leaves nobody able to take the task.
func (s *state) mayRespond(i int) bool {
	return s.task == nil || s.requested < 0 || s.requested == i ||
		(s.rules.allowReassignment && s.declined[s.requested])
}

// respond handles TaskAccept and TaskReject (RFC-MACP-0009 §5 rules 2–3c).
func (s *state) respond(m *mode.Message) error {
	i, ok := s.eligible[m.Sender]
	if !ok {
		return forbidden(m, "not a declared participant other than the initiator")
	}
	if !s.mayRespond(i) {
		return forbidden(m, "the task was requested of "+s.task.requestedAssignee)
	}
	accept := m.Type == TypeTaskAccept
	var taskID, assignee, reason string
	if accept {
		var p taskv1.TaskAcceptPayload
		if err := proto.Unmarshal(m.Payload, &p); err != nil {
			return invalid("payload is not a task TaskAcceptPayload")
		}
		taskID, assignee, reason = p.TaskId, p.Assignee, p.Reason
	} else {
		var p taskv1.TaskRejectPayload
		if err := proto.Unmarshal(m.Payload, &p); err != nil {
			return invalid("payload is not a task TaskRejectPayload")
		}
		taskID, assignee, reason = p.TaskId, p.Assignee, p.Reason
	}
	if err := s.checkRef(taskID, assignee, m.Sender); err != nil {
		return err
	}
	if s.report != nil {
		return invalid("the task's outcome has already been reported")
	}
	withdrawal := false
	switch {
	case s.active == i && accept:
		return invalid("%s has already accepted the task", m.Sender)
	case s.active == i:
		// Rule 3b: TaskAccept is irrevocable unless the policy permits
		// reassignment. Decision: INVALID_ENVELOPE, not POLICY_DENIED —
		// base v1 forbids the withdrawal, the policy can only relax it
		// (policy.default adds no constraints, RFC-MACP-0012 §5).
		if !s.rules.allowReassignment {
			return invalid("%s accepted the task and may not reject it unless policy assignment.allow_reassignment_on_reject is set (RFC-MACP-0009 §5 rule 3b)", m.Sender)
		}
		withdrawal = true
	case s.active >= 0:
		// Rule 3a: one active assignee; Decision: a TaskReject from another
		// responder while the task is assigned is equally out of phase.
		return invalid("the task is already assigned to %s (RFC-MACP-0009 §5 rule 3a)", s.names[s.active])
	case s.declined[i]:
		// Decision: a participant's TaskReject is its final answer.
		return invalid("%s has already rejected the task", m.Sender)
	}
	r := response{assignee: m.Sender, reason: reason, withdrawal: withdrawal}
	if accept {
		s.accepts = append(s.accepts, r)
		s.active = i
		s.activeUpdated = false
		return nil
	}
	s.rejections = append(s.rejections, r)
	s.declined[i] = true
	s.declinedCount++
	if withdrawal {
		// Rule 3c: back to the pre-assignment state; the request stands.
		s.active = -1
		s.activeUpdated = false
	}
	return nil
}

// checkRef validates the task reference and the optional assignee field of
// an assignee's message.
//
// Decision: task_id must equal the requested task's id exactly (empty is a
// mismatch), as in the reference runtime. The payload assignee field of
// TaskAccept, TaskReject, TaskComplete and TaskFail may be empty; when set it
// must equal the authenticated sender (§4: it is redundant, for
// auditability, and §8 "reject forged completions") — INVALID_ENVELOPE,
// since the sender itself is authorized.
func (s *state) checkRef(taskID, assignee, sender string) error {
	if s.task == nil {
		return invalid("no task has been requested yet")
	}
	if taskID != s.task.taskID {
		return invalid("task_id %q does not reference the session's task %q", taskID, s.task.taskID)
	}
	if assignee != "" && assignee != sender {
		return invalid("payload assignee %q does not match the sender %q", assignee, sender)
	}
	return nil
}

func (s *state) isActive(sender string) bool {
	return s.active >= 0 && s.names[s.active] == sender
}

// update handles TaskUpdate (RFC-MACP-0009 §4, §5 rule 4).
func (s *state) update(m *mode.Message) error {
	if !s.isActive(m.Sender) {
		return forbidden(m, "not the active assignee")
	}
	var p taskv1.TaskUpdatePayload
	if err := proto.Unmarshal(m.Payload, &p); err != nil {
		return invalid("payload is not a task TaskUpdatePayload")
	}
	if err := s.checkRef(p.TaskId, "", m.Sender); err != nil {
		return err
	}
	if s.report != nil {
		return invalid("the task's outcome has already been reported")
	}
	// Decision: progress is a fraction in [0, 1] (the spec example sends
	// 0.5 with "50% complete"; the SDK projections use 1.0 for done).
	if !(p.Progress >= 0 && p.Progress <= 1) { // also rejects NaN
		return invalid("progress %v is outside [0, 1]", p.Progress)
	}
	s.updates = append(s.updates, update{
		status: p.Status, message: p.Message, sender: m.Sender, progress: p.Progress, partial: p.PartialOutput,
	})
	s.activeUpdated = true
	return nil
}

// finish handles TaskComplete and TaskFail (RFC-MACP-0009 §5 rules 4–5).
func (s *state) finish(m *mode.Message) error {
	if !s.isActive(m.Sender) {
		return forbidden(m, "not the active assignee")
	}
	r := &report{complete: m.Type == TypeTaskComplete, assignee: m.Sender, messageID: m.ID}
	var taskID, assignee string
	if r.complete {
		var p taskv1.TaskCompletePayload
		if err := proto.Unmarshal(m.Payload, &p); err != nil {
			return invalid("payload is not a task TaskCompletePayload")
		}
		taskID, assignee, r.output, r.summary = p.TaskId, p.Assignee, p.Output, p.Summary
	} else {
		var p taskv1.TaskFailPayload
		if err := proto.Unmarshal(m.Payload, &p); err != nil {
			return invalid("payload is not a task TaskFailPayload")
		}
		taskID, assignee, r.errorCode, r.reason, r.retryable = p.TaskId, p.Assignee, p.ErrorCode, p.Reason, p.Retryable
	}
	if err := s.checkRef(taskID, assignee, m.Sender); err != nil {
		return err
	}
	// Decision: the first TaskComplete or TaskFail is the task's outcome
	// report (it keys side effects, §8); a second report of either kind is
	// refused.
	if s.report != nil {
		return invalid("the task's outcome has already been reported")
	}
	// completion.require_output (RFC-MACP-0012 §4.4: "TaskComplete must
	// include a non-empty output field"). Decision (⚠C15, POL-31): it acts
	// on the TaskComplete itself, so the assignee can resend with output,
	// and refuses it with POLICY_DENIED — the envelope is well-formed; the
	// bound policy forbids it.
	if r.complete && s.rules.requireOutput && len(r.output) == 0 {
		reason := "completion.require_output: TaskComplete must include a non-empty output"
		return &coord.Error{Code: coord.CodePolicyDenied, Message: "policy denies the TaskComplete: " + reason, Reasons: []string{reason}}
	}
	s.report = r
	return nil
}

// unassignable reports that a requested task has no assignee and nobody is
// left who may still accept it.
func (s *state) unassignable() bool {
	if s.task == nil || s.active >= 0 || s.report != nil {
		return false
	}
	if s.requested >= 0 && !s.declined[s.requested] {
		return false
	}
	if s.requested >= 0 && !s.rules.allowReassignment {
		return true
	}
	return s.declinedCount == len(s.names)
}

// eligible reports which Commitment outcomes the session is eligible for.
//
// Decisions (RFC-MACP-0009 §5 rule 5, §6):
//   - positive (task.completed) needs an accepted TaskComplete;
//   - negative (task.failed) needs an accepted TaskFail or TaskComplete —
//     the requester may refuse a delivered result — or an unassignable
//     task: every responder rejected it, which no TaskFail can ever report
//     since nobody is assigned;
//   - nothing is eligible before a TaskRequest, nor while an assignee is
//     still working (it must report; otherwise CancelSession or TTL).
func (s *state) eligibleOutcomes() (positive, negative bool) {
	if s.report != nil {
		return s.report.complete, true
	}
	return false, s.unassignable()
}

// Commit checks eligibility (INVALID_ENVELOPE). The only policy rule
// touching completion (require_output) was enforced on the TaskComplete.
func (s *state) Commit(b *mode.Binding, m *mode.Message, c *macpv1.CommitmentPayload) error {
	if s.committed {
		return coord.Errorf(coord.CodeSessionNotOpen, "task session already committed")
	}
	if c == nil {
		return invalid("commitment payload is required")
	}
	if s.task == nil {
		return invalid("a Commitment requires a TaskRequest (RFC-MACP-0009 §5 rule 5)")
	}
	positive, negative := s.eligibleOutcomes()
	if c.GetOutcomePositive() && !positive {
		return invalid("a positive Commitment requires an accepted TaskComplete (RFC-MACP-0009 §5 rule 5)")
	}
	if !c.GetOutcomePositive() && !negative {
		return invalid("a negative Commitment requires an accepted TaskComplete or TaskFail, or a task nobody may still accept (RFC-MACP-0009 §5 rule 5)")
	}
	s.committed = true
	return nil
}

func (s *state) phase() Phase {
	switch {
	case s.committed:
		return PhaseCommitted
	case s.report != nil && s.report.complete:
		return PhaseCompleted
	case s.report != nil:
		return PhaseFailed
	case s.active >= 0:
		return PhaseInProgress
	case s.task != nil:
		return PhaseRequested
	}
	return PhasePending
}

// status is the task's status in the SDK projections' vocabulary.
func (s *state) status() string {
	switch {
	case s.report != nil && s.report.complete:
		return "completed"
	case s.report != nil:
		return "failed"
	case s.active >= 0 && s.activeUpdated:
		return "in_progress"
	case s.active >= 0:
		return "accepted"
	case s.unassignable():
		return "rejected"
	case s.task != nil:
		return "requested"
	}
	return "none"
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// Project returns:
//
//	{"phase": "InProgress", "status": "accepted", "assignee": "agent://w",
//	 "task": {"task_id", "title", "instructions", "requested_assignee", "requester", "input", "deadline_unix_ms"} | null,
//	 "accepts":    [{"assignee", "reason"}],
//	 "rejections": [{"assignee", "reason", "withdrawal"}],
//	 "updates":    [{"status", "progress", "message", "partial_output", "sender"}],
//	 "progress":   latest update's progress (0 before any),
//	 "report": {"kind": "complete"|"fail", "task_id", "assignee", "message_id",
//	            "output", "summary" | "error_code", "reason", "retryable"} | null,
//	 "eligible": {"positive": bool, "negative": bool}}
//
// Lists are in acceptance order; bytes are base64 (protojson style).
// report.task_id/assignee/message_id are the RFC-MACP-0009 §8 idempotency
// key parts.
func (s *state) Project() map[string]any {
	var task, rep any
	if t := s.task; t != nil {
		task = map[string]any{
			"task_id": t.taskID, "title": t.title, "instructions": t.instructions,
			"requested_assignee": t.requestedAssignee, "requester": t.requester,
			"input": b64(t.input), "deadline_unix_ms": t.deadline,
		}
	}
	if r := s.report; r != nil {
		rm := map[string]any{"task_id": s.task.taskID, "assignee": r.assignee, "message_id": r.messageID}
		if r.complete {
			rm["kind"], rm["output"], rm["summary"] = "complete", b64(r.output), r.summary
		} else {
			rm["kind"], rm["error_code"], rm["reason"], rm["retryable"] = "fail", r.errorCode, r.reason, r.retryable
		}
		rep = rm
	}
	assignee := ""
	if s.active >= 0 {
		assignee = s.names[s.active]
	}
	accepts := make([]any, len(s.accepts))
	for i, a := range s.accepts {
		accepts[i] = map[string]any{"assignee": a.assignee, "reason": a.reason}
	}
	rejections := make([]any, len(s.rejections))
	for i, r := range s.rejections {
		rejections[i] = map[string]any{"assignee": r.assignee, "reason": r.reason, "withdrawal": r.withdrawal}
	}
	updates := make([]any, len(s.updates))
	progress := 0.0
	for i, u := range s.updates {
		updates[i] = map[string]any{
			"status": u.status, "progress": u.progress, "message": u.message,
			"partial_output": b64(u.partial), "sender": u.sender,
		}
		progress = u.progress
	}
	positive, negative := false, false
	if !s.committed {
		positive, negative = s.eligibleOutcomes()
	}
	return map[string]any{
		"phase":      s.phase().String(),
		"status":     s.status(),
		"assignee":   assignee,
		"task":       task,
		"accepts":    accepts,
		"rejections": rejections,
		"updates":    updates,
		"progress":   progress,
		"report":     rep,
		"eligible":   map[string]any{"positive": positive, "negative": negative},
	}
}
