package task_test

import (
	"math"
	"strings"
	"testing"

	taskv1 "github.com/macpd/macpd/gen/macp/modes/task/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/modetest"
	"github.com/macpd/macpd/internal/mode/task"
)

// badUTF8 is a TaskRequestPayload whose task_id is not valid UTF-8, which
// proto3 string fields refuse.
var badUTF8 = []byte{0x0a, 0x02, 0xc3, 0x28}

const reassign = `{"assignment":{"allow_reassignment_on_reject":true}}`

// TestSuite runs the shared mode suite over the message-level scenarios.
func TestSuite(t *testing.T) {
	modetest.Run(t, task.New(), messageScenarios(t)...)
}

func messageScenarios(t *testing.T) []modetest.Scenario {
	return []modetest.Scenario{
		{
			// RFC-MACP-0009 §4, §5, §6; checklist CONF-24 (task_happy_path).
			Name:    "happy path",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), "RFC-MACP-0009 §4 TaskRequest"),
				ok(acceptIn(worker, "t1", worker), "RFC-MACP-0009 §4 TaskAccept"),
				ok(updateIn(worker, "t1", 0.5), "RFC-MACP-0009 §4 TaskUpdate"),
				ok(completeIn(worker, "t1", worker, []byte("result")), "RFC-MACP-0009 §4 TaskComplete"),
				ok(commitIn(planner, true), "RFC-MACP-0009 §6 task.completed"),
			},
			WantState: map[string]any{
				"phase": "Committed", "status": "completed", "assignee": worker,
				"task": map[string]any{
					"task_id": "t1", "title": "Build", "instructions": "Do it", "requested_assignee": worker,
					"requester": planner, "input": "aW4=", "deadline_unix_ms": 0,
				},
				"accepts":  []any{map[string]any{"assignee": worker, "reason": "ready"}},
				"updates":  []any{map[string]any{"status": "running", "progress": 0.5, "message": "working", "partial_output": "cA==", "sender": worker}},
				"progress": 0.5,
				"report":   map[string]any{"kind": "complete", "task_id": "t1", "assignee": worker, "output": "cmVzdWx0", "summary": "done"},
				"eligible": map[string]any{"positive": false, "negative": false},
			},
		},
		{
			// RFC-MACP-0009 §2.1 authority matrix; §8 "reject forged
			// completions and failures from non-assignees". Authority is
			// checked before the payload is decoded.
			Name:    "authority",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(requestIn(worker, "t1", worker), forbidden, "§2.1 TaskRequest: initiator only (CONF-25)"),
				rej(requestIn(outsider, "t1", worker), forbidden, "§2.1 TaskRequest from an outsider"),
				rej(rawIn(task.TypeTaskRequest, worker, garbage), forbidden, "authority before decoding"),
				rej(acceptIn(outsider, "t1", ""), forbidden, "§2.1 TaskAccept from an outsider"),
				rej(acceptIn(planner, "t1", ""), forbidden, "the initiator is no assignee"),
				rej(rejectIn(outsider, "t1", ""), forbidden, "§2.1 TaskReject from an outsider"),
				rej(acceptIn(worker, "t1", ""), invalidEnv, "an eligible assignee, but no task yet"),
				ok(requestIn(planner, "t1", worker), ""),
				rej(acceptIn(w2, "t1", ""), forbidden, "§5 rule 2: not the requested assignee"),
				rej(rejectIn(w2, "t1", ""), forbidden, "§5 rule 2: not the requested assignee"),
				rej(rawIn(task.TypeTaskAccept, w2, garbage), forbidden, "authority before decoding"),
				rej(updateIn(worker, "t1", 0.1), forbidden, "§5 rule 4: no active assignee yet"),
				rej(completeIn(worker, "t1", "", []byte("x")), forbidden, "§5 rule 4: no active assignee yet"),
				rej(failIn(worker, "t1", ""), forbidden, "§5 rule 4: no active assignee yet"),
				ok(acceptIn(worker, "t1", ""), "empty payload assignee: the sender is the assignee"),
				rej(updateIn(w2, "t1", 0.1), forbidden, "§5 rule 4 TaskUpdate by a non-assignee"),
				rej(updateIn(planner, "t1", 0.1), forbidden, "§5 rule 4 TaskUpdate by the requester"),
				rej(completeIn(w2, "t1", w2, []byte("x")), forbidden, "§8 forged completion"),
				rej(completeIn(outsider, "t1", worker, []byte("x")), forbidden, "§8 forged completion naming the assignee"),
				rej(failIn(w2, "t1", ""), forbidden, "§8 forged failure"),
				rej(rawIn(task.TypeTaskUpdate, w2, garbage), forbidden, "authority before decoding"),
				rej(rawIn(task.TypeTaskComplete, w2, garbage), forbidden, "authority before decoding"),
				rej(rawIn(task.TypeTaskFail, outsider, garbage), forbidden, "authority before decoding"),
				ok(updateIn(worker, "t1", 0.2), "the active assignee"),
			},
			WantState: map[string]any{"phase": "InProgress", "status": "in_progress", "assignee": worker},
		},
		{
			// RFC-MACP-0009 §5 rule 1; checklist TASK-4, CONF-25 (task_reject_paths).
			Name:    "one TaskRequest per session",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(requestIn(worker, "t1", worker), forbidden, "CONF-25 non-initiator TaskRequest"),
				ok(requestIn(planner, "t1", worker), ""),
				rej(requestIn(planner, "t2", worker), invalidEnv, "§5 rule 1 second TaskRequest (CONF-25)"),
				rej(requestIn(planner, "t1", worker), invalidEnv, "§5 rule 1 same task again"),
				rej(requestIn(worker, "t2", worker), forbidden, "authority first"),
			},
			WantState: map[string]any{"phase": "Requested", "status": "requested", "task": map[string]any{"task_id": "t1"}},
		},
		{
			// RFC-MACP-0009 §4/§9 payload validation (Decisions in task.go).
			Name:    "TaskRequest validation",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(rawIn(task.TypeTaskRequest, planner, garbage), invalidEnv, "§9 task.proto payload"),
				rej(rawIn(task.TypeTaskRequest, planner, badUTF8), invalidEnv, "proto3 strings are UTF-8"),
				rej(rawIn(task.TypeTaskRequest, planner, nil), invalidEnv, "empty payload: task_id missing"),
				rej(requestIn(planner, "", worker), invalidEnv, "task_id required"),
				rej(requestIn(planner, "  ", worker), invalidEnv, "blank task_id"),
				rej(requestIn(planner, "t1", outsider), invalidEnv, "requested_assignee not declared"),
				rej(requestIn(planner, "t1", planner), invalidEnv, "requested_assignee is the requester"),
				rej(in(task.TypeTaskRequest, planner, &taskv1.TaskRequestPayload{TaskId: "t1", DeadlineUnixMs: -1}), invalidEnv,
					"deadline_unix_ms negative is refused"),
				ok(in(task.TypeTaskRequest, planner, &taskv1.TaskRequestPayload{TaskId: "t1", DeadlineUnixMs: 5}),
					"deadline_unix_ms informational, never compared with a clock"),
			},
			WantState: map[string]any{"task": map[string]any{"task_id": "t1", "requested_assignee": "", "deadline_unix_ms": 5, "title": ""}},
		},
		{
			// RFC-MACP-0009 §2: a listed initiator is still the requester,
			// never an assignee (orchestrated model).
			Name:    "listed initiator is no assignee",
			Binding: binding(t, "", planner, worker),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", ""), "open request"),
				rej(acceptIn(planner, "t1", ""), forbidden, "requester accepting its own task"),
				rej(rejectIn(planner, "t1", ""), forbidden, "requester rejecting its own task"),
				ok(acceptIn(worker, "t1", worker), ""),
			},
		},
		{
			// RFC-MACP-0009 §4: task_id references the task; the payload
			// assignee, when set, must be the sender.
			Name:    "references",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", ""), ""),
				rej(acceptIn(worker, "t2", ""), invalidEnv, "unknown task_id"),
				rej(acceptIn(worker, "", ""), invalidEnv, "empty task_id"),
				rej(acceptIn(worker, "t1", w2), invalidEnv, "payload assignee is someone else"),
				rej(rejectIn(worker, "t9", ""), invalidEnv, "unknown task_id"),
				rej(rejectIn(worker, "t1", w2), invalidEnv, "payload assignee is someone else"),
				rej(rawIn(task.TypeTaskAccept, worker, garbage), invalidEnv, "§9 TaskAcceptPayload"),
				rej(rawIn(task.TypeTaskReject, worker, garbage), invalidEnv, "§9 TaskRejectPayload"),
				ok(acceptIn(worker, "t1", worker), "payload assignee = sender"),
				rej(updateIn(worker, "t2", 0.5), invalidEnv, "unknown task_id"),
				rej(completeIn(worker, "t2", "", []byte("x")), invalidEnv, "unknown task_id"),
				rej(completeIn(worker, "t1", w2, []byte("x")), invalidEnv, "payload assignee is someone else"),
				rej(failIn(worker, "", ""), invalidEnv, "empty task_id"),
				rej(failIn(worker, "t1", w2), invalidEnv, "payload assignee is someone else"),
				rej(rawIn(task.TypeTaskUpdate, worker, garbage), invalidEnv, "§9 TaskUpdatePayload"),
				rej(rawIn(task.TypeTaskComplete, worker, garbage), invalidEnv, "§9 TaskCompletePayload"),
				rej(rawIn(task.TypeTaskFail, worker, garbage), invalidEnv, "§9 TaskFailPayload"),
				ok(failIn(worker, "t1", worker), ""),
			},
			WantState: map[string]any{"phase": "Failed", "status": "failed", "report": map[string]any{"kind": "fail", "error_code": "E1", "reason": "broke", "retryable": true}},
		},
		{
			// RFC-MACP-0009 §5 rules 2, 3, 3a: with requested_assignee
			// empty any eligible participant may take the task; the first
			// TaskAccept wins.
			Name:    "open request, first accept wins",
			Binding: binding(t, "", planner, worker, w2, w3),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", ""), ""),
				ok(rejectIn(w3, "t1", ""), "§5 rule 2 any eligible participant may decline"),
				rej(acceptIn(w3, "t1", ""), invalidEnv, "a TaskReject is final for its sender"),
				rej(rejectIn(w3, "t1", ""), invalidEnv, "a second TaskReject"),
				ok(acceptIn(w2, "t1", ""), "§5 rule 3a first accept designates the assignee"),
				rej(acceptIn(worker, "t1", ""), invalidEnv, "§5 rule 3a later accepts rejected"),
				rej(acceptIn(w2, "t1", ""), invalidEnv, "the assignee accepting again"),
				rej(rejectIn(worker, "t1", ""), invalidEnv, "declining a task assigned to someone else"),
			},
			WantState: map[string]any{
				"phase": "InProgress", "status": "accepted", "assignee": w2,
				"rejections": []any{map[string]any{"assignee": w3, "reason": "busy", "withdrawal": false}},
				"eligible":   map[string]any{"positive": false, "negative": false},
			},
		},
		{
			// RFC-MACP-0009 §5 rule 3b: TaskAccept is irrevocable by default.
			Name:    "accept is irrevocable",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), ""),
				ok(acceptIn(worker, "t1", ""), ""),
				rej(rejectIn(worker, "t1", ""), invalidEnv, "§5 rule 3b no TaskReject after TaskAccept"),
				rej(rejectIn(worker, "t1", worker), invalidEnv, "§5 rule 3b with payload assignee"),
				ok(updateIn(worker, "t1", 0.3), "still the assignee"),
			},
			WantState: map[string]any{"assignee": worker, "rejections": []any{}},
		},
		{
			// RFC-MACP-0009 §5 rule 3c; RFC-MACP-0012 §4.4
			// assignment.allow_reassignment_on_reject.
			Name:    "reassignment on reject",
			Binding: binding(t, reassign, planner, worker, w2),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), ""),
				rej(acceptIn(w2, "t1", ""), forbidden, "requested assignee only, before it declines"),
				ok(acceptIn(worker, "t1", ""), ""),
				ok(updateIn(worker, "t1", 0.4), ""),
				ok(rejectIn(worker, "t1", worker), "§5 rule 3c the assignee withdraws"),
				rej(updateIn(worker, "t1", 0.5), forbidden, "no longer the assignee"),
				rej(acceptIn(worker, "t1", ""), invalidEnv, "the withdrawn assignee cannot re-accept"),
				ok(acceptIn(w2, "t1", ""), "§5 rule 3c another eligible participant accepts the same task_id"),
				ok(completeIn(w2, "t1", "", []byte("r")), ""),
				ok(commitIn(planner, true), ""),
			},
			WantState: map[string]any{
				"phase": "Committed", "assignee": w2,
				"accepts":    []any{map[string]any{"assignee": worker}, map[string]any{"assignee": w2}},
				"rejections": []any{map[string]any{"assignee": worker, "withdrawal": true}},
				"report":     map[string]any{"assignee": w2},
			},
		},
		{
			// Rule 3c withdrawal returns the session to Requested; with
			// nobody left the task is unassignable.
			Name:    "withdrawal by the only assignee",
			Binding: binding(t, reassign, planner, worker),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", ""), ""),
				ok(acceptIn(worker, "t1", ""), ""),
				rej(commitIn(planner, false), invalidEnv, "assigned, no report: not eligible"),
				ok(rejectIn(worker, "t1", ""), "§5 rule 3c"),
				ok(commitIn(planner, false), "nobody left: negative outcome eligible"),
			},
			WantState: map[string]any{"phase": "Committed", "status": "rejected", "assignee": ""},
		},
		{
			// Without reassignment, the requested assignee's decline leaves
			// nobody who may take the task (Decision in task.go).
			Name:    "requested assignee declines",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), ""),
				rej(commitIn(planner, false), invalidEnv, "not eligible while the assignee may still accept"),
				ok(rejectIn(worker, "t1", worker), "§4 TaskReject"),
				rej(acceptIn(w2, "t1", ""), forbidden, "§5 rule 2 still restricted to the requested assignee"),
				rej(acceptIn(worker, "t1", ""), invalidEnv, "a TaskReject is final"),
				rej(commitIn(planner, true), invalidEnv, "positive needs a TaskComplete"),
			},
			WantState: map[string]any{"phase": "Requested", "status": "rejected", "eligible": map[string]any{"positive": false, "negative": true}},
		},
		{
			Name:    "requested assignee declines, negative commitment",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), ""),
				ok(rejectIn(worker, "t1", worker), ""),
				ok(commitIn(planner, false), "§6 task.failed: nobody left to take the task"),
			},
			WantState: map[string]any{"phase": "Committed"},
		},
		{
			// RFC-MACP-0012 §4.4 / task-rules.schema.json: "a rejected task
			// can be reassigned to a different participant".
			Name:    "requested assignee declines, reassignment allowed",
			Binding: binding(t, reassign),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), ""),
				ok(rejectIn(worker, "t1", ""), ""),
				ok(rejectIn(w2, "t1", ""), "the task is open to the other eligible participants"),
				rej(acceptIn(w2, "t1", ""), invalidEnv, "w2 declined"),
			},
			WantState: map[string]any{"status": "rejected", "eligible": map[string]any{"negative": true}},
		},
		{
			Name:    "requested assignee declines, another accepts",
			Binding: binding(t, reassign),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), ""),
				ok(rejectIn(worker, "t1", ""), ""),
				rej(commitIn(planner, false), invalidEnv, "w2 may still accept"),
				ok(acceptIn(w2, "t1", w2), ""),
			},
			WantState: map[string]any{"assignee": w2, "status": "accepted"},
		},
		{
			// Open request: every eligible participant declines.
			Name:    "open request, everyone declines",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", ""), ""),
				ok(rejectIn(worker, "t1", ""), ""),
				rej(commitIn(planner, false), invalidEnv, "w2 may still accept"),
				ok(rejectIn(w2, "t1", ""), ""),
				rej(commitIn(planner, true), invalidEnv, "no TaskComplete"),
				ok(commitIn(planner, false), "nobody left"),
			},
		},
		{
			// RFC-MACP-0009 §4 TaskUpdate: non-terminal; progress a fraction.
			Name:    "updates",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), ""),
				ok(acceptIn(worker, "t1", ""), ""),
				ok(updateIn(worker, "t1", 0), "progress 0"),
				ok(updateIn(worker, "t1", 1), "progress 1"),
				rej(updateIn(worker, "t1", -0.1), invalidEnv, "progress below 0"),
				rej(updateIn(worker, "t1", 1.01), invalidEnv, "progress above 1"),
				rej(updateIn(worker, "t1", math.NaN()), invalidEnv, "progress NaN"),
				rej(updateIn(worker, "t1", math.Inf(1)), invalidEnv, "progress +Inf"),
				ok(updateIn(worker, "t1", 0.75), "updates keep coming"),
				rej(commitIn(planner, true), invalidEnv, "§5 rule 5 updates make nothing eligible"),
				ok(completeIn(worker, "t1", "", nil), "empty output is fine without require_output"),
				rej(updateIn(worker, "t1", 0.9), invalidEnv, "no update after the outcome report"),
			},
			WantState: map[string]any{"progress": 0.75, "updates": []any{
				map[string]any{"progress": 0}, map[string]any{"progress": 1}, map[string]any{"progress": 0.75},
			}, "report": map[string]any{"output": ""}},
		},
		{
			// RFC-MACP-0009 §5 rule 5, §8: one outcome report; it does not
			// resolve the session.
			Name:    "one outcome report",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), ""),
				ok(acceptIn(worker, "t1", ""), ""),
				ok(completeIn(worker, "t1", worker, []byte("r")), ""),
				rej(completeIn(worker, "t1", worker, []byte("r2")), invalidEnv, "second TaskComplete"),
				rej(failIn(worker, "t1", ""), invalidEnv, "TaskFail after TaskComplete"),
				rej(rejectIn(worker, "t1", ""), invalidEnv, "TaskReject after the report"),
				rej(acceptIn(worker, "t1", ""), invalidEnv, "TaskAccept after the report"),
			},
			WantState: map[string]any{
				"phase": "Completed", "status": "completed",
				"report":   map[string]any{"kind": "complete", "output": "cg=="},
				"eligible": map[string]any{"positive": true, "negative": true},
			},
		},
		{
			// RFC-MACP-0009 §6: task.failed after a TaskFail; a positive
			// outcome is not eligible.
			Name:    "failure",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), ""),
				ok(acceptIn(worker, "t1", ""), ""),
				ok(failIn(worker, "t1", worker), "§4 TaskFail"),
				rej(completeIn(worker, "t1", "", []byte("r")), invalidEnv, "TaskComplete after TaskFail"),
				rej(commitIn(planner, true), invalidEnv, "positive after TaskFail"),
				ok(commitIn(planner, false), "§6 task.failed"),
			},
			WantState: map[string]any{"phase": "Committed", "status": "failed"},
		},
		{
			// Decision: the requester may commit task.failed on a delivered
			// result it refuses.
			Name:    "negative outcome after completion",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), ""),
				ok(acceptIn(worker, "t1", ""), ""),
				ok(completeIn(worker, "t1", "", []byte("r")), ""),
				ok(commitIn(planner, false), ""),
			},
		},
		{
			// RFC-MACP-0009 §5 rule 5: nothing is eligible before a report.
			Name:    "commitment eligibility",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(commitIn(planner, true), invalidEnv, "no TaskRequest"),
				rej(commitIn(planner, false), invalidEnv, "no TaskRequest"),
				ok(requestIn(planner, "t1", ""), ""),
				rej(commitIn(planner, true), invalidEnv, "requested only"),
				rej(commitIn(planner, false), invalidEnv, "requested only"),
				ok(acceptIn(worker, "t1", ""), ""),
				rej(commitIn(planner, true), invalidEnv, "assigned, no report"),
				rej(commitIn(planner, false), invalidEnv, "assigned, no report"),
			},
			WantState: map[string]any{"phase": "InProgress", "eligible": map[string]any{"positive": false, "negative": false}},
		},
		{
			// RFC-MACP-0002 §1: types the mode does not define.
			Name:    "undefined message types",
			Binding: binding(t, ""),
			Steps: []modetest.Step{
				rej(rawIn(coord.TypeCommitment, planner, nil), invalidEnv, "Commitment goes through Commit, never Step"),
				rej(rawIn(coord.TypeSessionStart, planner, nil), invalidEnv, "SessionStart is the core's"),
				rej(rawIn("Approve", worker, nil), invalidEnv, "another mode's type"),
				rej(rawIn("taskrequest", planner, nil), invalidEnv, "type names are case-sensitive"),
			},
			WantState: map[string]any{"phase": "Pending", "status": "none", "task": nil, "report": nil},
		},
		{
			// RFC-MACP-0009 §3: someone to delegate to is required.
			Name:     "no eligible assignee",
			Binding:  binding(t, "", planner),
			StartErr: invalidEnv,
		},
		{
			Name:     "no participants",
			Binding:  binding(t, "", []string{}...),
			StartErr: invalidEnv,
		},
	}
}

// TestPolicyRequireOutput covers RFC-MACP-0012 §4.4 completion.require_output.
func TestPolicyRequireOutput(t *testing.T) {
	const req = `{"completion":{"require_output":true}}`
	scs := []modetest.Scenario{
		{
			Name: "require_output", Binding: binding(t, req),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), ""),
				ok(acceptIn(worker, "t1", ""), ""),
				rej(completeIn(worker, "t1", "", nil), denied, "RFC-MACP-0012 §4.4 empty output"),
				rej(completeIn(worker, "t1", "", []byte{}), denied, "RFC-MACP-0012 §4.4 empty output"),
				rej(completeIn(outsider, "t1", "", nil), forbidden, "authority first"),
				rej(completeIn(worker, "t9", "", nil), invalidEnv, "validation before policy"),
				ok(completeIn(worker, "t1", "", []byte{0}), "one byte of output"),
				ok(commitIn(planner, true), ""),
			},
		},
		{
			Name: "require_output leaves TaskFail alone", Binding: binding(t, req),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), ""),
				ok(acceptIn(worker, "t1", ""), ""),
				ok(failIn(worker, "t1", ""), ""),
				ok(commitIn(planner, false), ""),
			},
		},
		{
			Name: "require_output false", Binding: binding(t, `{"completion":{"require_output":false},"assignment":{}}`),
			Steps: []modetest.Step{
				ok(requestIn(planner, "t1", worker), ""),
				ok(acceptIn(worker, "t1", ""), ""),
				ok(completeIn(worker, "t1", "", nil), ""),
			},
		},
	}
	modetest.Run(t, task.New(), scs...)

	// The denial carries its reason (RFC-MACP-0012 §6.2).
	b := binding(t, req)
	st, err := task.New().Start(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []modetest.Input{requestIn(planner, "t1", worker), acceptIn(worker, "t1", "")} {
		if err := st.Step(b, &in.Msg); err != nil {
			t.Fatal(err)
		}
	}
	c := completeIn(worker, "t1", "", nil)
	ce := coord.AsError(st.Step(b, &c.Msg))
	if ce == nil || ce.Code != denied || len(ce.Reasons) != 1 || !strings.Contains(ce.Reasons[0], "require_output") {
		t.Errorf("got %#v", ce)
	}
}

// TestPolicyDefinitions: the task sections are validated against
// task-rules.schema.json at Start (RFC-MACP-0012 §4.4).
func TestPolicyDefinitions(t *testing.T) {
	var scs []modetest.Scenario
	for _, r := range []string{
		`{"assignment":5}`,
		`{"assignment":[]}`,
		`{"assignment":{"allow_reassignment_on_reject":"yes"}}`,
		`{"completion":{"require_output":1}}`,
		`{"completion":"strict"}`,
	} {
		scs = append(scs, modetest.Scenario{Name: "invalid " + r, Binding: binding(t, r), StartErr: badPolicy})
	}
	for _, r := range []string{
		`{}`,
		`{"assignment":null,"completion":null}`,
		`{"assignment":{"allow_reassignment_on_reject":false,"x":1},"x-vendor":true}`,
		// The SDK's build_task_policy shape.
		`{"assignment":{"allow_reassignment_on_reject":false},"completion":{"require_output":false},` +
			`"commitment":{"authority":"initiator_only","designated_roles":[],"require_vote_quorum":false}}`,
	} {
		scs = append(scs, modetest.Scenario{Name: "valid " + r, Binding: binding(t, r),
			Steps: []modetest.Step{ok(requestIn(planner, "t1", worker), "")}})
	}
	nilPolicy := binding(t, "")
	nilPolicy.Policy = nil
	scs = append(scs, modetest.Scenario{Name: "nil policy is policy.default", Binding: nilPolicy,
		Steps: []modetest.Step{
			ok(requestIn(planner, "t1", worker), ""), ok(acceptIn(worker, "t1", ""), ""), ok(completeIn(worker, "t1", "", nil), ""),
			ok(commitIn(planner, true), ""),
		}})
	modetest.Run(t, task.New(), scs...)
}

// TestRejectedLeavesProjectUnchanged: "On error nothing changed" (mode.State
// contract), checked with reflect.DeepEqual on every reject path from
// states with content.
func TestRejectedLeavesProjectUnchanged(t *testing.T) {
	b := binding(t, `{"completion":{"require_output":true}}`)
	st, err := task.New().Start(b)
	if err != nil {
		t.Fatal(err)
	}
	check := func(ins ...modetest.Input) {
		t.Helper()
		modetest.RejectUnchanged(t, st, b, ins...)
	}
	apply := func(ins ...modetest.Input) {
		t.Helper()
		modetest.Apply(t, st, b, ins...)
	}
	check(acceptIn(worker, "t1", ""), requestIn(worker, "t1", ""), requestIn(planner, "", ""), commitIn(planner, false))
	apply(requestIn(planner, "t1", ""))
	check(requestIn(planner, "t2", ""), acceptIn(worker, "t2", ""), acceptIn(worker, "t1", w2), acceptIn(planner, "t1", ""),
		rawIn(task.TypeTaskAccept, worker, garbage), updateIn(worker, "t1", 0.5), commitIn(planner, true), commitIn(planner, false))
	apply(rejectIn(w2, "t1", ""))
	check(acceptIn(w2, "t1", ""), rejectIn(w2, "t1", ""))
	apply(acceptIn(worker, "t1", ""), updateIn(worker, "t1", 0.5))
	check(rejectIn(worker, "t1", ""), acceptIn(worker, "t1", ""), updateIn(worker, "t1", 2), updateIn(w2, "t1", 0.1),
		completeIn(worker, "t1", "", nil), completeIn(worker, "t1", w2, []byte("x")), failIn(worker, "t2", ""),
		commitIn(planner, true), rawIn("Bogus", worker, nil))
	apply(completeIn(worker, "t1", "", []byte("x")))
	check(completeIn(worker, "t1", "", []byte("y")), failIn(worker, "t1", ""), updateIn(worker, "t1", 1), rejectIn(worker, "t1", ""))
}

// TestAfterCommit: a committed state refuses everything with
// SESSION_NOT_OPEN (the core normally stops first).
func TestAfterCommit(t *testing.T) {
	modetest.CheckAfterCommit(t, task.New(), binding(t, ""),
		[]modetest.Input{requestIn(planner, "t1", worker), acceptIn(worker, "t1", ""), failIn(worker, "t1", "")}, commitIn(planner, false),
		updateIn(worker, "t1", 0.5))
}

// TestDescriptor pins the discovery descriptor (RFC-MACP-0009 §2, §4, §7;
// RFC-MACP-0002 §4; checklist MODE-6, TASK-1, TASK-2).
func TestDescriptor(t *testing.T) {
	modetest.CheckDescriptorIs(t, task.New, modetest.WantDescriptor{
		Mode: "macp.mode.task.v1", Version: "1.0.0",
		Determinism: "structural-only", ParticipantModel: "orchestrated",
		MessageTypes: []string{"SessionStart", "TaskRequest", "TaskAccept", "TaskReject", "TaskUpdate", "TaskComplete", "TaskFail", "Commitment"},
		Standard:     true,
	})
}

// TestRandomRuns drives the generator through the suite invariants with
// fixed seeds, and checks it reaches the valid paths.
func TestRandomRuns(t *testing.T) {
	modetest.RandomRunsReach(t, task.New(), gen{}, 11, 600, 60, 160,
		func(n int) int { return n / 20 }, func(n int) int { return n })
}

// FuzzTask feeds fuzzer-chosen message sequences through the shared suite's
// invariants (no panic, rejections inert, determinism, replay).
func FuzzTask(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 4, 1, 0, 0, 0, 14, 0, 0, 0, 18})
	f.Add([]byte("\x01\x01\x00\x02\x00\x00\x00\x05\x02\x00\x00\x00\x0e\x01\x00\x00\x13\x00"))
	f.Add([]byte("task fuzz seed with a longer body to produce more messages................................"))
	f.Fuzz(func(t *testing.T, data []byte) {
		modetest.FuzzSteps(t, task.New(), gen{}, data)
	})
}
