package sdk

import (
	"context"
	"encoding/json"

	handoffv1 "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	proposalv1 "github.com/macpd/macpd/gen/macp/modes/proposal/v1"
	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	taskv1 "github.com/macpd/macpd/gen/macp/modes/task/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// Mode ids, versions and message types of the standard modes other than
// Decision (RFC-MACP-0008..0011) and of the ext.multi_round.v1 extension.
// Message type names shared by several modes (Proposal, Reject) are one
// constant.
const (
	ProposalMode        = "macp.mode.proposal.v1"
	ProposalModeVersion = "1.0.0"
	TypeCounterProposal = "CounterProposal"
	TypeAccept          = "Accept"
	TypeReject          = "Reject"
	TypeWithdraw        = "Withdraw"

	TaskMode         = "macp.mode.task.v1"
	TaskModeVersion  = "1.0.0"
	TypeTaskRequest  = "TaskRequest"
	TypeTaskAccept   = "TaskAccept"
	TypeTaskReject   = "TaskReject"
	TypeTaskUpdate   = "TaskUpdate"
	TypeTaskComplete = "TaskComplete"
	TypeTaskFail     = "TaskFail"

	HandoffMode        = "macp.mode.handoff.v1"
	HandoffModeVersion = "1.0.0"
	TypeHandoffOffer   = "HandoffOffer"
	TypeHandoffContext = "HandoffContext"
	TypeHandoffAccept  = "HandoffAccept"
	TypeHandoffDecline = "HandoffDecline"

	QuorumMode          = "macp.mode.quorum.v1"
	QuorumModeVersion   = "1.0.0"
	TypeApprovalRequest = "ApprovalRequest"
	TypeApprove         = "Approve"
	TypeAbstain         = "Abstain"

	MultiRoundMode        = "ext.multi_round.v1"
	MultiRoundModeVersion = "1.0.0"
	TypeContribute        = "Contribute"
)

// ProposalSession is one Proposal Mode session (RFC-MACP-0008): declared
// participants negotiate with proposals and counter-proposals; the
// initiator commits once the required participants accept the same live
// proposal (positive) or after a terminal Reject (negative).
type ProposalSession struct{ *Session }

// Proposal returns a ProposalSession for sessionID ("" = a new id).
func (c *Client) Proposal(sessionID string) *ProposalSession {
	return &ProposalSession{c.Session(ProposalMode, ProposalModeVersion, sessionID)}
}

// Propose submits a proposal under proposalID (unique within the session).
func (s *ProposalSession) Propose(ctx context.Context, proposalID, title, summary string, tags ...string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeProposal, &proposalv1.ProposalPayload{ProposalId: proposalID, Title: title, Summary: summary, Tags: tags})
}

// CounterPropose submits proposalID superseding an existing proposal.
func (s *ProposalSession) CounterPropose(ctx context.Context, proposalID, supersedes, title, summary string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeCounterProposal, &proposalv1.CounterProposalPayload{ProposalId: proposalID, SupersedesProposalId: supersedes, Title: title, Summary: summary})
}

// Accept accepts a live proposal; a participant's latest Accept counts.
func (s *ProposalSession) Accept(ctx context.Context, proposalID, reason string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeAccept, &proposalv1.AcceptPayload{ProposalId: proposalID, Reason: reason})
}

// Reject rejects a proposal; terminal ends the negotiation (the session
// becomes eligible for a negative Commitment).
func (s *ProposalSession) Reject(ctx context.Context, proposalID string, terminal bool, reason string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeReject, &proposalv1.RejectPayload{ProposalId: proposalID, Terminal: terminal, Reason: reason})
}

// Withdraw withdraws the caller's own proposal.
func (s *ProposalSession) Withdraw(ctx context.Context, proposalID, reason string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeWithdraw, &proposalv1.WithdrawPayload{ProposalId: proposalID, Reason: reason})
}

// TaskSession is one Task Mode session (RFC-MACP-0009): the initiator
// requests one task, one declared participant accepts it, reports
// progress and completes or fails it, and the initiator commits
// task.completed or task.failed.
type TaskSession struct{ *Session }

// Task returns a TaskSession for sessionID ("" = a new id).
func (c *Client) Task(sessionID string) *TaskSession {
	return &TaskSession{c.Session(TaskMode, TaskModeVersion, sessionID)}
}

// Request sends the session's one TaskRequest (initiator only); an empty
// assignee lets any eligible participant accept.
func (s *TaskSession) Request(ctx context.Context, p *taskv1.TaskRequestPayload) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeTaskRequest, p)
}

// Accept takes the task on (the caller becomes the active assignee).
func (s *TaskSession) Accept(ctx context.Context, taskID, reason string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeTaskAccept, &taskv1.TaskAcceptPayload{TaskId: taskID, Reason: reason})
}

// Reject declines the task.
func (s *TaskSession) Reject(ctx context.Context, taskID, reason string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeTaskReject, &taskv1.TaskRejectPayload{TaskId: taskID, Reason: reason})
}

// Update reports progress in [0, 1] (active assignee only).
func (s *TaskSession) Update(ctx context.Context, taskID, status string, progress float64, message string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeTaskUpdate, &taskv1.TaskUpdatePayload{TaskId: taskID, Status: status, Progress: progress, Message: message})
}

// Complete reports the task done with its output (active assignee only).
func (s *TaskSession) Complete(ctx context.Context, taskID string, output []byte, summary string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeTaskComplete, &taskv1.TaskCompletePayload{TaskId: taskID, Output: output, Summary: summary})
}

// Fail reports the task failed (active assignee only).
func (s *TaskSession) Fail(ctx context.Context, taskID, errorCode, reason string, retryable bool) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeTaskFail, &taskv1.TaskFailPayload{TaskId: taskID, ErrorCode: errorCode, Reason: reason, Retryable: retryable})
}

// HandoffSession is one Handoff Mode session (RFC-MACP-0010): the owner
// (initiator, a declared participant) offers a scoped responsibility to one
// declared participant at a time; the target accepts or declines.
type HandoffSession struct{ *Session }

// Handoff returns a HandoffSession for sessionID ("" = a new id).
func (c *Client) Handoff(sessionID string) *HandoffSession {
	return &HandoffSession{c.Session(HandoffMode, HandoffModeVersion, sessionID)}
}

// Offer offers the handoff handoffID to target (owner only; one pending
// offer at a time).
func (s *HandoffSession) Offer(ctx context.Context, handoffID, target, scope, reason string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeHandoffOffer, &handoffv1.HandoffOfferPayload{HandoffId: handoffID, TargetParticipant: target, Scope: scope, Reason: reason})
}

// Context attaches context to a pending offer (owner only).
func (s *HandoffSession) Context(ctx context.Context, handoffID, contentType string, data []byte) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeHandoffContext, &handoffv1.HandoffContextPayload{HandoffId: handoffID, ContentType: contentType, Context: data})
}

// Accept accepts an offer made to the caller.
func (s *HandoffSession) Accept(ctx context.Context, handoffID, reason string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeHandoffAccept, &handoffv1.HandoffAcceptPayload{HandoffId: handoffID, Reason: reason})
}

// Decline declines an offer made to the caller.
func (s *HandoffSession) Decline(ctx context.Context, handoffID, reason string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeHandoffDecline, &handoffv1.HandoffDeclinePayload{HandoffId: handoffID, Reason: reason})
}

// QuorumSession is one Quorum Mode session (RFC-MACP-0011): the initiator
// asks the declared participants to approve one action; each casts one
// ballot; the initiator commits quorum.approved once required approvals
// are reached, or quorum.rejected once they no longer can be.
type QuorumSession struct{ *Session }

// Quorum returns a QuorumSession for sessionID ("" = a new id).
func (c *Client) Quorum(sessionID string) *QuorumSession {
	return &QuorumSession{c.Session(QuorumMode, QuorumModeVersion, sessionID)}
}

// RequestApproval sends the session's one ApprovalRequest (initiator
// only); required is in 1..number of declared participants.
func (s *QuorumSession) RequestApproval(ctx context.Context, requestID, action, summary string, required int) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeApprovalRequest, &quorumv1.ApprovalRequestPayload{RequestId: requestID, Action: action, Summary: summary, RequiredApprovals: uint32(max(required, 0))})
}

// Approve casts the caller's ballot for the request.
func (s *QuorumSession) Approve(ctx context.Context, requestID, reason string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeApprove, &quorumv1.ApprovePayload{RequestId: requestID, Reason: reason})
}

// Reject casts the caller's ballot against the request.
func (s *QuorumSession) Reject(ctx context.Context, requestID, reason string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeReject, &quorumv1.RejectPayload{RequestId: requestID, Reason: reason})
}

// Abstain casts the caller's abstention (it removes the caller from the
// potential approvers).
func (s *QuorumSession) Abstain(ctx context.Context, requestID, reason string) (*macpv1.Ack, error) {
	return s.Send(ctx, TypeAbstain, &quorumv1.AbstainPayload{RequestId: requestID, Reason: reason})
}

// MultiRoundSession is one ext.multi_round.v1 session: declared
// participants Contribute string values, revising them, until all hold the
// same value; the initiator then commits.
type MultiRoundSession struct{ *Session }

// MultiRound returns a MultiRoundSession for sessionID ("" = a new id).
func (c *Client) MultiRound(sessionID string) *MultiRoundSession {
	return &MultiRoundSession{c.Session(MultiRoundMode, MultiRoundModeVersion, sessionID)}
}

// Contribute sends the caller's current value (JSON {"value": value}).
func (s *MultiRoundSession) Contribute(ctx context.Context, value string) (*macpv1.Ack, error) {
	b, err := json.Marshal(struct {
		Value string `json:"value"`
	}{value})
	if err != nil {
		return nil, err
	}
	return s.SendRaw(ctx, TypeContribute, b)
}
