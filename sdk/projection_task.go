package sdk

import (
	"slices"

	taskv1 "github.com/macpd/macpd/gen/macp/modes/task/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// Task Mode phases and statuses as projected (RFC-MACP-0009).
const (
	PhasePending    = "Pending"
	PhaseRequested  = "Requested"
	PhaseInProgress = "InProgress"
	PhaseCompleted  = "Completed"
	PhaseFailed     = "Failed"

	TaskStatusNone       = "none"
	TaskStatusRequested  = "requested"
	TaskStatusAccepted   = "accepted"
	TaskStatusInProgress = "in_progress"
	TaskStatusCompleted  = "completed"
	TaskStatusFailed     = "failed"
	// TaskStatusRejected: nobody may accept the task any more.
	TaskStatusRejected = "rejected"
)

// TaskProjection is the state of a Task Mode session.
type TaskProjection struct {
	SessionView
	// Request is the session's TaskRequest (nil before it); its sender is
	// the Initiator.
	Request *taskv1.TaskRequestPayload
	// Assignee is the active assignee ("" if none).
	Assignee   string
	Accepts    []TaskResponse
	Rejections []TaskResponse
	Updates    []TaskUpdate
	// Report is the TaskComplete or TaskFail (nil before it).
	Report *TaskReport

	declined []string
	updated  bool // the active assignee sent a TaskUpdate
}

// TaskResponse is one TaskAccept or TaskReject; Withdrawal marks a reject
// by the active assignee.
type TaskResponse struct {
	Assignee, Reason string
	Withdrawal       bool
}

// TaskUpdate is one progress report.
type TaskUpdate struct {
	Status, Message, Sender string
	Progress                float64
	PartialOutput           []byte
}

// TaskReport is the task's outcome.
type TaskReport struct {
	Complete  bool
	Assignee  string
	MessageID string
	// Output and Summary of a TaskComplete.
	Output  []byte
	Summary string
	// ErrorCode, Reason and Retryable of a TaskFail.
	ErrorCode, Reason string
	Retryable         bool
}

// NewTaskProjection returns an empty projection.
func NewTaskProjection() *TaskProjection { return &TaskProjection{} }

// Apply folds one accepted envelope.
func (p *TaskProjection) Apply(env *macpv1.Envelope) error {
	done, err := p.begin(TaskMode, env)
	if err != nil || done {
		return err
	}
	switch env.MessageType {
	case TypeTaskRequest:
		var m taskv1.TaskRequestPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		p.Request = &m
	case TypeTaskAccept:
		var m taskv1.TaskAcceptPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		p.Accepts = append(p.Accepts, TaskResponse{Assignee: env.Sender, Reason: m.Reason})
		p.Assignee, p.updated = env.Sender, false
	case TypeTaskReject:
		var m taskv1.TaskRejectPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		w := env.Sender == p.Assignee
		p.Rejections = append(p.Rejections, TaskResponse{Assignee: env.Sender, Reason: m.Reason, Withdrawal: w})
		if !slices.Contains(p.declined, env.Sender) {
			p.declined = append(p.declined, env.Sender)
		}
		if w {
			p.Assignee, p.updated = "", false
		}
	case TypeTaskUpdate:
		var m taskv1.TaskUpdatePayload
		if err := decode(env, &m); err != nil {
			return err
		}
		p.Updates = append(p.Updates, TaskUpdate{Status: m.Status, Message: m.Message, Sender: env.Sender, Progress: m.Progress, PartialOutput: m.PartialOutput})
		p.updated = true
	case TypeTaskComplete:
		var m taskv1.TaskCompletePayload
		if err := decode(env, &m); err != nil {
			return err
		}
		p.Report = &TaskReport{Complete: true, Assignee: env.Sender, MessageID: env.MessageId, Output: m.Output, Summary: m.Summary}
	case TypeTaskFail:
		var m taskv1.TaskFailPayload
		if err := decode(env, &m); err != nil {
			return err
		}
		p.Report = &TaskReport{Assignee: env.Sender, MessageID: env.MessageId, ErrorCode: m.ErrorCode, Reason: m.Reason, Retryable: m.Retryable}
	default:
		return unknownType(env)
	}
	p.Messages++
	return nil
}

// Assignees returns the eligible assignees: the declared participants
// other than the initiator.
func (p *TaskProjection) Assignees() []string {
	var out []string
	for _, id := range p.Participants {
		if id != p.Initiator {
			out = append(out, id)
		}
	}
	return out
}

// Progress is the latest reported progress (0 before any update).
func (p *TaskProjection) Progress() float64 {
	if n := len(p.Updates); n > 0 {
		return p.Updates[n-1].Progress
	}
	return 0
}

// unassignable: nobody may still accept the task (base rules: no
// reassignment after the requested assignee declined).
func (p *TaskProjection) unassignable() bool {
	if p.Request == nil || p.Assignee != "" || p.Report != nil {
		return false
	}
	if ra := p.Request.RequestedAssignee; ra != "" {
		return slices.Contains(p.declined, ra)
	}
	return len(p.declined) == len(p.Assignees())
}

// Status is none, requested, accepted, in_progress, completed, failed or
// rejected.
func (p *TaskProjection) Status() string {
	switch {
	case p.Report != nil && p.Report.Complete:
		return TaskStatusCompleted
	case p.Report != nil:
		return TaskStatusFailed
	case p.Assignee != "" && p.updated:
		return TaskStatusInProgress
	case p.Assignee != "":
		return TaskStatusAccepted
	case p.unassignable():
		return TaskStatusRejected
	case p.Request != nil:
		return TaskStatusRequested
	}
	return TaskStatusNone
}

// Phase is Pending, Requested, InProgress, Completed, Failed or
// Committed.
func (p *TaskProjection) Phase() string {
	switch {
	case p.Resolved():
		return PhaseCommitted
	case p.Report != nil && p.Report.Complete:
		return PhaseCompleted
	case p.Report != nil:
		return PhaseFailed
	case p.Assignee != "":
		return PhaseInProgress
	case p.Request != nil:
		return PhaseRequested
	}
	return PhasePending
}

// Eligible reports which Commitment outcomes the base rules allow now
// (RFC-MACP-0009 §5 rule 5): positive after a TaskComplete; negative after
// a TaskComplete or TaskFail, or when nobody may still accept the task.
func (p *TaskProjection) Eligible() (positive, negative bool) {
	if !p.Accepting() || p.Request == nil {
		return false, false
	}
	if p.Report != nil {
		return p.Report.Complete, true
	}
	return false, p.unassignable()
}
