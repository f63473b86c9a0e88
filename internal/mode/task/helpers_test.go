package task_test

import (
	"fmt"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	taskv1 "github.com/macpd/macpd/gen/macp/modes/task/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/mode/task"
)

const (
	planner  = "agent://planner"
	outsider = "agent://outsider"
	worker   = "agent://worker"
	w2       = "agent://w2"
	w3       = "agent://w3"
)

const (
	invalidEnv = coord.CodeInvalidEnvelope
	forbidden  = coord.CodeForbidden
	denied     = coord.CodePolicyDenied
	badPolicy  = coord.CodeInvalidPolicyDefinition
)

var garbage = modetest.Garbage

var msg = modetest.Messages()

var marshal = modetest.Marshal

// binding returns a task binding with the given policy rules JSON ("" =
// policy.default) and participants (default planner, worker, w2).
func binding(t testing.TB, rules string, participants ...string) *mode.Binding {
	if participants == nil {
		participants = []string{planner, worker, w2}
	}
	return modetest.Binding(t, task.ModeID, task.ModeVersion, "policy.test.task", rules, planner, participants)
}

func in(typ, sender string, m proto.Message) modetest.Input {
	return modetest.Input{Msg: msg(typ, sender, marshal(m))}
}

func requestIn(sender, taskID, assignee string) modetest.Input {
	return in(task.TypeTaskRequest, sender, &taskv1.TaskRequestPayload{
		TaskId: taskID, Title: "Build", Instructions: "Do it", RequestedAssignee: assignee, Input: []byte("in"),
	})
}

func acceptIn(sender, taskID, assignee string) modetest.Input {
	return in(task.TypeTaskAccept, sender, &taskv1.TaskAcceptPayload{TaskId: taskID, Assignee: assignee, Reason: "ready"})
}

func rejectIn(sender, taskID, assignee string) modetest.Input {
	return in(task.TypeTaskReject, sender, &taskv1.TaskRejectPayload{TaskId: taskID, Assignee: assignee, Reason: "busy"})
}

func updateIn(sender, taskID string, progress float64) modetest.Input {
	return in(task.TypeTaskUpdate, sender, &taskv1.TaskUpdatePayload{
		TaskId: taskID, Status: "running", Progress: progress, Message: "working", PartialOutput: []byte("p"),
	})
}

func completeIn(sender, taskID, assignee string, output []byte) modetest.Input {
	return in(task.TypeTaskComplete, sender, &taskv1.TaskCompletePayload{TaskId: taskID, Assignee: assignee, Output: output, Summary: "done"})
}

func failIn(sender, taskID, assignee string) modetest.Input {
	return in(task.TypeTaskFail, sender, &taskv1.TaskFailPayload{TaskId: taskID, Assignee: assignee, ErrorCode: "E1", Reason: "broke", Retryable: true})
}

func rawIn(typ, sender string, payload []byte) modetest.Input {
	return modetest.Input{Msg: msg(typ, sender, payload)}
}

func commitIn(sender string, positive bool) modetest.Input {
	return modetest.Commitment(msg(coord.TypeCommitment, sender, nil), task.ModeVersion, "task.completed", "task.failed", positive)
}

var ok, rej = modetest.Ok, modetest.Rej

// gen is the Task Mode generator for randomized runs and fuzzing: mostly
// well-formed messages from plausible senders over a tiny task-id pool, so
// requests, assignments, withdrawals, reports and both Commitment outcomes
// are all reached, plus undecodable payloads.
type gen struct{}

var genPolicies = []string{
	"",
	`{"assignment":{"allow_reassignment_on_reject":true}}`,
	`{"completion":{"require_output":true}}`,
	`{"assignment":{"allow_reassignment_on_reject":true},"completion":{"require_output":true}}`,
}

var genWorkers = []string{worker, w2, w3}

func (gen) Binding(r *modetest.Rand) *mode.Binding {
	n := 1 + r.Intn(len(genWorkers))
	participants := append([]string(nil), genWorkers[:n]...)
	if r.Bool() {
		participants = append([]string{planner}, participants...)
	}
	return binding(nil, genPolicies[r.Intn(len(genPolicies))], participants...)
}

func (gen) Next(r *modetest.Rand, b *mode.Binding, seq int) modetest.Input {
	// Senders: mostly the eligible assignees (worker first, most often),
	// sometimes the initiator or an outsider.
	var eligible []string
	for _, p := range b.Participants {
		if p != b.Initiator {
			eligible = append(eligible, p)
		}
	}
	sender := eligible[0]
	switch k := r.Intn(16); {
	case k < 1:
		sender = outsider
	case k < 2:
		sender = b.Initiator
	case k < 9:
		sender = eligible[r.Intn(len(eligible))]
	}
	id := "t1"
	if r.Chance(1, 10) {
		id = r.Pick("t2", "")
	}
	assignee := ""
	if r.Chance(1, 5) {
		assignee = r.Pick(sender, sender, worker, "agent://nobody")
	}
	var in modetest.Input
	switch k := r.Intn(24); {
	case k < 3:
		in = requestIn(b.Initiator, id, r.Pick("", "", "", worker, worker, w2, planner, "agent://nobody"))
		if r.Chance(1, 6) {
			in.Msg.Sender = sender
		}
	case k < 7:
		in = acceptIn(sender, id, assignee)
	case k < 9:
		in = rejectIn(sender, id, assignee)
	case k < 12:
		in = updateIn(sender, id, []float64{0, 0.5, 1, 0.25, 1.5, -0.1, math.NaN()}[r.Intn(7)])
	case k < 16:
		in = completeIn(sender, id, assignee, [][]byte{nil, []byte("out"), []byte("result")}[r.Intn(3)])
	case k < 18:
		in = failIn(sender, id, assignee)
	case k < 22:
		// The core passes on only Commitments from a sender with authority.
		in = commitIn(b.Initiator, r.Chance(1, 2))
	default:
		in = rawIn(r.Pick(task.TypeTaskRequest, task.TypeTaskAccept, task.TypeTaskReject,
			task.TypeTaskUpdate, task.TypeTaskComplete, task.TypeTaskFail), sender, r.Bytes(10))
	}
	in.Msg.ID = fmt.Sprintf("m%d", seq)
	return in
}
