package task_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	taskv1 "github.com/macpd/macpd/gen/macp/modes/task/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/mode/task"
)

// pinnedCodes are the codes macpd returns for each fixture message where the
// fixture gives none (checklist CONF-14 only asks for "reject"); they pin
// the decisions documented in task.go.
var pinnedCodes = map[string][]coord.Code{
	"task_happy_path.json":   {"", "", "", ""},
	"task_reject_paths.json": {coord.CodeForbidden, "", coord.CodeInvalidEnvelope},
}

// pinnedState is matched against the final projection in addition to any
// expected_mode_state (the task fixtures carry none).
var pinnedState = map[string]map[string]any{
	"task_happy_path.json": {
		"phase": "Committed", "status": "completed", "assignee": "agent://worker",
		"task":   map[string]any{"task_id": "t1", "requested_assignee": "agent://worker", "requester": "agent://planner"},
		"report": map[string]any{"kind": "complete", "task_id": "t1", "assignee": "agent://worker", "message_id": "m3", "summary": "done"},
	},
	"task_reject_paths.json": {"phase": "Requested", "status": "requested", "assignee": "", "task": map[string]any{"task_id": "t1"}},
}

// TestConformanceFixtures runs the spec's task_*.json fixtures (checklist
// CONF-24, CONF-25) at the mode level. The core's part of a Commitment
// (authority) is emulated with policy.MayCommit; everything else is the
// mode's.
func TestConformanceFixtures(t *testing.T) {
	modetest.RunFixtures(t, task.New(), modetest.FixtureOptions{
		Glob:          "task_*.json",
		ModeID:        task.ModeID,
		PayloadPrefix: "task.",
		Payloads: map[string]func() proto.Message{
			"TaskRequest":  func() proto.Message { return &taskv1.TaskRequestPayload{} },
			"TaskAccept":   func() proto.Message { return &taskv1.TaskAcceptPayload{} },
			"TaskReject":   func() proto.Message { return &taskv1.TaskRejectPayload{} },
			"TaskUpdate":   func() proto.Message { return &taskv1.TaskUpdatePayload{} },
			"TaskComplete": func() proto.Message { return &taskv1.TaskCompletePayload{} },
			"TaskFail":     func() proto.Message { return &taskv1.TaskFailPayload{} },
		},
		NumberedIDs: true, // message i has id m<i>
		PinnedCodes: pinnedCodes,
		PinnedState: pinnedState,
	})
}
