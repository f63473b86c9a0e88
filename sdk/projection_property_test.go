package sdk_test

// Projection/runtime agreement (issue: "the projection must agree with what
// the runtime accepts and resolves"). For every mode, random envelope
// sequences go through the runtime's own pure core (session.Start /
// Session.Step with the built-in mode registry and policy.default); the
// accepted envelopes, exactly as recorded in history, are folded by the
// SDK projection, and then:
//   - the projection's state equals the mode's own Project() view (every
//     field the projection models, compared after a JSON round trip);
//   - the projection's message count equals the session's sequence number;
//   - it is resolved exactly when the session is, by the same Commitment;
//   - before each well-formed Commitment from the initiator, the
//     projection's Eligible() predicts whether the runtime accepts it;
//   - suspend, resume and cancel calls (the runtime's Session.Suspend,
//     Resume and Cancel, by the initiator or someone else) are accepted
//     exactly when the projection's State() says they can be, and after
//     each step State() equals the session's status.
// Every mode runs under both profiles (2026-04: a cancel ends EXPIRED;
// 2026-09: CANCELLED, and the newest Decision rules).
// RFC-MACP-0003 §4 (replay determinism), RFC-MACP-0001 §7.2-7.5
// (lifecycle), RFC-MACP-0007..0011 (mode rules).

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	handoffv1 "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
	proposalv1 "github.com/macpd/macpd/gen/macp/modes/proposal/v1"
	quorumv1 "github.com/macpd/macpd/gen/macp/modes/quorum/v1"
	taskv1 "github.com/macpd/macpd/gen/macp/modes/task/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/protobuf/proto"
)

// propHistories is the number of random histories per mode and profile:
// 10,000 (the bar), 1,000 by default under the race detector,
// where .ci/run adds a full run without it, and 300 with -short (make
// test is time-bounded; make test-all runs the full count).
var propHistories = flag.Int("sdk.histories", 0, "random histories per mode and profile in the projection agreement property (0: 10000, 1000 under -race, 300 with -short)")

const (
	propSID = "3f2b8c1e-9a4d-4f6b-8c2e-1d5a7b9c0e3f"
	propT0  = int64(1_760_000_000_000)
)

// gen builds random envelopes for one history.
type gen struct {
	r     *rand.Rand
	ids   []string // message ids used so far (for duplicates)
	n     int
	mode  string
	start *macpv1.SessionStartPayload
}

func (g *gen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

func (g *gen) chance(pct int) bool { return g.r.IntN(100) < pct }

func (g *gen) env(sender, typ string, payload []byte) *macpv1.Envelope {
	id := ""
	if len(g.ids) > 0 && g.chance(3) {
		id = g.ids[g.r.IntN(len(g.ids))] // a duplicate message_id
	} else {
		g.n++
		id = "m" + strconv.Itoa(g.n)
		g.ids = append(g.ids, id)
	}
	return &macpv1.Envelope{MacpVersion: "1.0", Mode: g.mode, MessageType: typ, MessageId: id, SessionId: propSID,
		Sender: sender, TimestampUnixMs: propT0, Payload: payload}
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// sender is a random sender: mostly the initiator or a declared
// participant, sometimes an outsider.
func (g *gen) sender() string { return g.pick("coord", "a", "b", "c", "a", "b", "c", "mallory") }

// commitment is a random Commitment; wellFormed says whether the core's
// shape, authority and version checks pass, so that the mode's eligibility
// alone decides.
func (g *gen) commitment() (env *macpv1.Envelope, positive, wellFormed bool) {
	positive = g.chance(50)
	c := &macpv1.CommitmentPayload{CommitmentId: "c" + strconv.Itoa(g.n), Action: "test.outcome", AuthorityScope: "s",
		Reason: "r", ModeVersion: g.start.ModeVersion, ConfigurationVersion: g.start.ConfigurationVersion, PolicyVersion: g.start.PolicyVersion,
		OutcomePositive: positive}
	sender := "coord"
	wellFormed = true
	if g.chance(10) {
		sender, wellFormed = g.sender(), false
	}
	if g.chance(5) {
		c.ModeVersion, wellFormed = "9.9.9", false
	}
	return g.env(sender, sdk.TypeCommitment, mustMarshal(c)), positive, wellFormed && sender == "coord"
}

type modeCase struct {
	mode, version string
	newProj       func() sdk.Projection
	// message returns a random non-Commitment envelope.
	message func(g *gen) *macpv1.Envelope
	// view renders the projection in the shape of the mode's Project().
	view     func(p sdk.Projection) map[string]any
	eligible func(p sdk.Projection) (bool, bool)
	view0    func(p sdk.Projection) *sdk.SessionView
}

func TestProjectionAgreesWithRuntime(t *testing.T) {
	n := *propHistories
	if n <= 0 {
		n = 10000
		switch {
		case testing.Short(): // the full count: make test-all (scripts/test-extra.sh)
			n = 300
		case raceEnabled:
			n = 1000
		}
	}
	for _, profile := range []string{sdk.ProfileApril, sdk.ProfileLatest} {
		for _, mc := range modeCases() {
			t.Run(profile+"/"+mc.mode, func(t *testing.T) {
				t.Parallel()
				stats := runProperty(t, mc, profile, n)
				t.Logf("%s %s: %d histories: %d envelopes offered, %d accepted, %d resolved, %d commitment predictions (%d accepted), "+
					"%d control calls (%d suspended, %d resumed, %d cancelled)",
					profile, mc.mode, n, stats.offered, stats.accepted, stats.resolved, stats.predictions, stats.predictedOK,
					stats.controls, stats.suspended, stats.resumed, stats.cancelled)
				// The generator must reach the interesting states, or the
				// property proves little.
				if stats.resolved < n/50 || stats.predictedOK == 0 || stats.predictions-stats.predictedOK == 0 ||
					stats.suspended < n/20 || stats.resumed < n/50 || stats.cancelled < n/50 || stats.suspendedCommit == 0 {
					t.Fatalf("generator coverage too low: %+v", stats)
				}
			})
		}
	}
}

type propStats struct {
	offered, accepted, resolved, predictions, predictedOK int
	controls, suspended, resumed, cancelled               int
	suspendedCommit                                       int // Commitments predicted while SUSPENDED
}

// stateOf is the wire state of a session status (the numbers coincide).
func stateOf(st session.Status) macpv1.SessionState { return macpv1.SessionState(st) }

// control offers one suspend, resume or cancel call to s and checks the
// outcome against what the projection's State() predicts; it returns the
// accepted record, if any.
func control(t *testing.T, g *gen, s *session.Session, v *sdk.SessionView, now int64, st *propStats) (*macpv1.Envelope, string) {
	t.Helper()
	caller := "coord"
	if g.chance(15) {
		caller = g.pick("a", "b", "mallory")
	}
	g.n++
	id := "ctl" + strconv.Itoa(g.n)
	state := v.State()
	// Mostly the calls that change the state, some that cannot.
	op := g.pick("suspend", "suspend", "suspend", "suspend", "suspend", "resume", "cancel")
	if state == macpv1.SessionState_SESSION_STATE_SUSPENDED {
		op = g.pick("resume", "resume", "resume", "resume", "resume", "resume", "suspend", "cancel")
	}
	var out session.Outcome
	var want bool
	switch op {
	case "suspend":
		out = s.Suspend(caller, "hold", id, now)
		want = caller == "coord" && state == macpv1.SessionState_SESSION_STATE_OPEN
	case "resume":
		out = s.Resume(caller, "go on", id, now)
		want = caller == "coord" && state == macpv1.SessionState_SESSION_STATE_SUSPENDED
	default:
		out = s.Cancel(caller, "stop", id, now)
		want = caller == "coord" && (state == macpv1.SessionState_SESSION_STATE_OPEN || state == macpv1.SessionState_SESSION_STATE_SUSPENDED)
	}
	st.controls++
	got := out.Err == nil && len(out.Records) == 1
	if got != want {
		return nil, fmt.Sprintf("%s by %s in projected state %s: projection predicts accepted=%v, runtime %v (%d records)", op, caller, state, want, out.Err, len(out.Records))
	}
	if !got {
		return nil, ""
	}
	switch op {
	case "suspend":
		st.suspended++
	case "resume":
		st.resumed++
	default:
		st.cancelled++
	}
	return out.Records[0].Envelope, ""
}

func runProperty(t *testing.T, mc modeCase, profile string, n int) propStats {
	modes := builtin.Modes()
	lim := session.DefaultLimits()
	lim.Profile = profile
	deps := session.Deps{Modes: modes, Policies: policy.DefaultOnly{}, Limits: lim}
	// The same seed under both profiles: the same draws, so the differences
	// are the profile's.
	r := rand.New(rand.NewPCG(uint64(len(mc.mode)), 19))
	var st propStats
	for h := 0; h < n; {
		g := &gen{r: r, mode: mc.mode}
		parts := []string{}
		for _, p := range []string{"coord", "a", "b", "c"} {
			if g.chance(70) {
				parts = append(parts, p)
			}
		}
		if g.chance(10) && len(parts) > 0 {
			parts = append(parts, parts[0]) // a duplicate participant
		}
		g.start = &macpv1.SessionStartPayload{Intent: "i", Participants: parts, ModeVersion: mc.version, ConfigurationVersion: "v1", TtlMs: 60_000}
		s, rec, err := session.Start(g.env("coord", sdk.TypeSessionStart, mustMarshal(g.start)), propT0, deps)
		if err != nil {
			continue // the mode refused these participants; draw again
		}
		h++
		p := mc.newProj()
		view := mc.view0(p)
		view.Profile = profile
		if err := p.Apply(rec.Envelope); err != nil {
			t.Fatalf("history %d: SessionStart: %v", h, err)
		}
		var trace []traceStep
		steps := 1 + r.IntN(40)
		lifecycle := g.chance(50) // this history sees suspend, resume and cancel calls
		if lifecycle {
			steps += 10 // for the steps spent SUSPENDED
		}
		for i := 0; i < steps; i++ {
			now := propT0 + int64(i)
			if (lifecycle && g.chance(8)) || (view.Suspended && g.chance(25)) {
				env, bad := control(t, g, s, view, now, &st)
				if bad != "" {
					t.Fatalf("history %d: %s\n%s", h, bad, joinLines(trace))
				}
				if env != nil {
					trace = append(trace, traceStep{env, nil})
					if err := p.Apply(env); err != nil {
						t.Fatalf("history %d: Apply %s: %v\n%s", h, env.MessageType, err, joinLines(trace))
					}
				}
				if got, want := view.State(), stateOf(s.Status); got != want {
					t.Fatalf("history %d: projection state %s, session %s\n%s", h, got, want, joinLines(trace))
				}
				continue
			}
			var env *macpv1.Envelope
			predict, positive := false, false
			if g.chance(12) {
				var wf bool
				env, positive, wf = g.commitment()
				predict = wf && !s.Seen(env.MessageId)
			} else {
				env = mc.message(g)
			}
			var wantPos, wantNeg bool
			if predict {
				wantPos, wantNeg = mc.eligible(p)
			}
			if predict && view.Suspended {
				st.suspendedCommit++
			}
			out := s.Step(env, now, lim)
			st.offered++
			trace = append(trace, traceStep{env, out.Err})
			if predict {
				st.predictions++
				want := wantNeg
				if positive {
					want = wantPos
				}
				if want != out.Accepted() {
					t.Fatalf("history %d: projection predicts a %v Commitment accepted=%v, runtime: %v\nparticipants %v\n%s\nprojection %v\nruntime %v",
						h, positive, want, out.Err, parts, joinLines(trace), mc.view(p), s.ModeProjection())
				}
				if out.Accepted() {
					st.predictedOK++
				}
			}
			if !out.Accepted() {
				continue
			}
			st.accepted++
			if err := p.Apply(out.Records[0].Envelope); err != nil {
				t.Fatalf("history %d: Apply: %v\n%s", h, err, joinLines(trace))
			}
		}
		v := mc.view0(p)
		if got, want := v.State(), stateOf(s.Status); got != want {
			t.Fatalf("history %d: projection state %s, session %s\n%s", h, got, want, joinLines(trace))
		}
		if uint64(v.Messages) != s.Seq {
			t.Fatalf("history %d: projection folded %d envelopes, session seq %d", h, v.Messages, s.Seq)
		}
		if v.Resolved() != (s.Status == session.Resolved) || (v.Resolved() && !proto.Equal(v.Commitment, s.Resolution)) {
			t.Fatalf("history %d: projection resolved=%v (%v), session %v (%v)", h, v.Resolved(), v.Commitment, s.Status, s.Resolution)
		}
		if v.Resolved() {
			st.resolved++
		}
		if v.Initiator != "coord" || v.PolicyVersion != sdk.DefaultPolicy || v.ModeVersion != mc.version {
			t.Fatalf("history %d: session view %+v", h, v)
		}
		pv := mc.view(p)
		if v.Suspended || v.Cancelled {
			// The mode's own view does not know the session's lifecycle:
			// its "eligible" is the mode's alone, where the projection's
			// says no Commitment is accepted now.
			delete(pv, "eligible")
		}
		if d := subsetDiff("", normJSON(pv), normJSON(s.ModeProjection())); d != "" {
			t.Fatalf("history %d: projection disagrees with the runtime at %s\nparticipants %v\n%s\nprojection %v\nruntime    %v",
				h, d, parts, joinLines(trace), pv, s.ModeProjection())
		}
	}
	return st
}

type traceStep struct {
	env *macpv1.Envelope
	err error
}

func joinLines(xs []traceStep) string {
	out := ""
	for _, x := range xs {
		out += fmt.Sprintf("  %s %s %x -> %v\n", x.env.Sender, x.env.MessageType, x.env.Payload, x.err)
	}
	return out
}

func normJSON(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// subsetDiff returns where want (the projection's view) differs from got
// (the runtime's): every key of a want map must be in got with an equal
// value (recursively); lists must have the same length.
func subsetDiff(path string, want, got any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path + ": not an object"
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return path + "." + k + ": missing in the runtime's view"
			}
			if d := subsetDiff(path+"."+k, wv, gv); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: list %v vs %v", path, want, got)
		}
		for i := range w {
			if d := subsetDiff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); d != "" {
				return d
			}
		}
		return ""
	default:
		if !reflect.DeepEqual(want, got) {
			return fmt.Sprintf("%s: %v vs %v", path, want, got)
		}
		return ""
	}
}

func anyList[T any](xs []T, f func(T) any) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func eligibleMap(pos, neg bool) map[string]any {
	return map[string]any{"positive": pos, "negative": neg}
}

func modeCases() []modeCase {
	return []modeCase{
		{
			mode: sdk.DecisionMode, version: sdk.DecisionModeVersion,
			newProj:  func() sdk.Projection { return sdk.NewDecisionProjection() },
			view0:    func(p sdk.Projection) *sdk.SessionView { return &p.(*sdk.DecisionProjection).SessionView },
			eligible: func(p sdk.Projection) (bool, bool) { return p.(*sdk.DecisionProjection).Eligible() },
			message: func(g *gen) *macpv1.Envelope {
				pid := g.pick("p1", "p2", "p3", "p1", " ")
				var m proto.Message
				typ := g.pick(sdk.TypeProposal, sdk.TypeEvaluation, sdk.TypeObjection, sdk.TypeVote, sdk.TypeVote, "Bogus")
				switch typ {
				case sdk.TypeProposal:
					m = &decisionv1.ProposalPayload{ProposalId: pid, Option: g.pick("x", "y", ""), Rationale: g.pick("", "why")}
				case sdk.TypeEvaluation:
					m = &decisionv1.EvaluationPayload{ProposalId: pid, Recommendation: g.pick("APPROVE", "REVIEW", "BLOCK", "REJECT", "approve"),
						Confidence: []float64{0, 0.5, 1, 1.5}[g.r.IntN(4)], Reason: g.pick("", "r")}
				case sdk.TypeObjection:
					m = &decisionv1.ObjectionPayload{ProposalId: pid, Severity: g.pick("", "low", "critical", "CRITICAL"), Reason: "o"}
				default:
					m = &decisionv1.VotePayload{ProposalId: pid, Vote: g.pick("APPROVE", "REJECT", "ABSTAIN", "yes"), Reason: g.pick("", "v")}
				}
				return g.env(g.sender(), typ, mustMarshal(m))
			},
			view: func(pp sdk.Projection) map[string]any {
				p := pp.(*sdk.DecisionProjection)
				proposals, votes := map[string]any{}, map[string]any{}
				for _, pr := range p.Proposals {
					proposals[pr.ID] = map[string]any{"proposal_id": pr.ID, "option": pr.Option, "rationale": pr.Rationale, "sender": pr.Sender}
					if len(pr.Votes) > 0 {
						vs := map[string]any{}
						for _, v := range pr.Votes {
							vs[v.Sender] = map[string]any{"vote": v.Vote, "reason": v.Reason}
						}
						votes[pr.ID] = vs
					}
				}
				return map[string]any{
					"phase": p.Phase(), "proposals": proposals, "votes": votes,
					"evaluations": anyList(p.Evaluations, func(e sdk.DecisionEvaluation) any {
						return map[string]any{"proposal_id": e.ProposalID, "recommendation": e.Recommendation, "confidence": e.Confidence, "reason": e.Reason, "sender": e.Sender}
					}),
					"objections": anyList(p.Objections, func(o sdk.DecisionObjection) any {
						return map[string]any{"proposal_id": o.ProposalID, "reason": o.Reason, "severity": o.Severity, "sender": o.Sender}
					}),
				}
			},
		},
		{
			mode: sdk.ProposalMode, version: sdk.ProposalModeVersion,
			newProj:  func() sdk.Projection { return sdk.NewProposalProjection() },
			view0:    func(p sdk.Projection) *sdk.SessionView { return &p.(*sdk.ProposalProjection).SessionView },
			eligible: func(p sdk.Projection) (bool, bool) { return p.(*sdk.ProposalProjection).Eligible() },
			message: func(g *gen) *macpv1.Envelope {
				pid := g.pick("p1", "p1", "p1", "p2", "p3", "")
				typ := g.pick(sdk.TypeProposal, sdk.TypeCounterProposal, sdk.TypeAccept, sdk.TypeAccept, sdk.TypeAccept, sdk.TypeReject, sdk.TypeWithdraw)
				var m proto.Message
				switch typ {
				case sdk.TypeProposal:
					m = &proposalv1.ProposalPayload{ProposalId: pid, Title: g.pick("t", ""), Summary: "s", Tags: []string{"x"}[:g.r.IntN(2)]}
				case sdk.TypeCounterProposal:
					m = &proposalv1.CounterProposalPayload{ProposalId: pid, SupersedesProposalId: g.pick("p1", "p2", "", "p9"), Title: "c"}
				case sdk.TypeAccept:
					m = &proposalv1.AcceptPayload{ProposalId: pid, Reason: "ok"}
				case sdk.TypeReject:
					m = &proposalv1.RejectPayload{ProposalId: pid, Terminal: g.chance(30), Reason: "no"}
				default:
					m = &proposalv1.WithdrawPayload{ProposalId: pid}
				}
				return g.env(g.sender(), typ, mustMarshal(m))
			},
			view: func(pp sdk.Projection) map[string]any {
				p := pp.(*sdk.ProposalProjection)
				props := map[string]any{}
				conv := map[string]bool{}
				for _, id := range p.Converged() {
					conv[id] = true
				}
				for _, r := range p.Proposals {
					kind, disp := sdk.TypeProposal, "Live"
					if r.Counter {
						kind = sdk.TypeCounterProposal
					}
					if r.Withdrawn {
						disp = "Withdrawn"
					}
					props[r.ID] = map[string]any{"proposal_id": r.ID, "proposer": r.Proposer, "disposition": disp, "kind": kind,
						"supersedes_proposal_id": r.Supersedes, "title": r.Title, "summary": r.Summary,
						"tags": anyList(r.Tags, func(s string) any { return s }), "accepted_by": anyList(p.AcceptedBy(r.ID), func(s string) any { return s }),
						"meets_criterion": conv[r.ID]}
				}
				accepts := map[string]any{}
				for k, v := range p.Accepts {
					accepts[k] = v
				}
				counters := 0
				for _, r := range p.Proposals {
					if r.Counter {
						counters++
					}
				}
				out := map[string]any{
					"phase": p.Phase(), "accepts": accepts, "proposals": props,
					"proposal_order": anyList(p.Proposals, func(r *sdk.ProposalRecord) any { return r.ID }),
					"rejections": anyList(p.Rejections, func(x sdk.ProposalRejection) any {
						return map[string]any{"proposal_id": x.ProposalID, "sender": x.Sender, "reason": x.Reason, "terminal": x.Terminal}
					}),
					"converged":         anyList(p.Converged(), func(s string) any { return s }),
					"terminal_rejected": p.TerminalRejected(), "counter_proposals": counters,
				}
				if p.Resolved() {
					out["outcome_positive"] = p.Commitment.OutcomePositive
				}
				return out
			},
		},
		{
			mode: sdk.TaskMode, version: sdk.TaskModeVersion,
			newProj:  func() sdk.Projection { return sdk.NewTaskProjection() },
			view0:    func(p sdk.Projection) *sdk.SessionView { return &p.(*sdk.TaskProjection).SessionView },
			eligible: func(p sdk.Projection) (bool, bool) { return p.(*sdk.TaskProjection).Eligible() },
			message: func(g *gen) *macpv1.Envelope {
				tid := g.pick("t1", "t1", "t1", "t2", "")
				sender := g.sender()
				who := g.pick("", "", sender, "zed")
				typ := g.pick(sdk.TypeTaskRequest, sdk.TypeTaskAccept, sdk.TypeTaskAccept, sdk.TypeTaskReject, sdk.TypeTaskReject, sdk.TypeTaskUpdate, sdk.TypeTaskComplete, sdk.TypeTaskFail)
				var m proto.Message
				switch typ {
				case sdk.TypeTaskRequest:
					sender = g.pick("coord", "coord", "a")
					m = &taskv1.TaskRequestPayload{TaskId: tid, Title: "t", Instructions: "do", RequestedAssignee: g.pick("", "", "a", "b", "coord", "zed"),
						Input: []byte("in")[:g.r.IntN(3)], DeadlineUnixMs: []int64{0, 5, -1}[g.r.IntN(3)]}
				case sdk.TypeTaskAccept:
					m = &taskv1.TaskAcceptPayload{TaskId: tid, Assignee: who, Reason: g.pick("", "ok")}
				case sdk.TypeTaskReject:
					m = &taskv1.TaskRejectPayload{TaskId: tid, Assignee: who, Reason: "busy"}
				case sdk.TypeTaskUpdate:
					m = &taskv1.TaskUpdatePayload{TaskId: tid, Status: g.pick("working", ""), Progress: []float64{0.25, 0.5, 2}[g.r.IntN(3)], Message: "m", PartialOutput: []byte("p")[:g.r.IntN(2)]}
				case sdk.TypeTaskComplete:
					m = &taskv1.TaskCompletePayload{TaskId: tid, Assignee: who, Output: []byte("out")[:g.r.IntN(4)], Summary: "done"}
				default:
					m = &taskv1.TaskFailPayload{TaskId: tid, Assignee: who, ErrorCode: "E", Reason: "r", Retryable: g.chance(50)}
				}
				return g.env(sender, typ, mustMarshal(m))
			},
			view: func(pp sdk.Projection) map[string]any {
				p := pp.(*sdk.TaskProjection)
				var task, rep any
				if q := p.Request; q != nil {
					task = map[string]any{"task_id": q.TaskId, "title": q.Title, "instructions": q.Instructions, "requested_assignee": q.RequestedAssignee,
						"requester": p.Initiator, "input": b64(q.Input), "deadline_unix_ms": q.DeadlineUnixMs}
				}
				if r := p.Report; r != nil {
					m := map[string]any{"task_id": p.Request.TaskId, "assignee": r.Assignee, "message_id": r.MessageID}
					if r.Complete {
						m["kind"], m["output"], m["summary"] = "complete", b64(r.Output), r.Summary
					} else {
						m["kind"], m["error_code"], m["reason"], m["retryable"] = "fail", r.ErrorCode, r.Reason, r.Retryable
					}
					rep = m
				}
				resp := func(x sdk.TaskResponse) any { return map[string]any{"assignee": x.Assignee, "reason": x.Reason} }
				pos, neg := p.Eligible()
				return map[string]any{
					"phase": p.Phase(), "status": p.Status(), "assignee": p.Assignee, "task": task, "report": rep,
					"accepts": anyList(p.Accepts, resp),
					"rejections": anyList(p.Rejections, func(x sdk.TaskResponse) any {
						return map[string]any{"assignee": x.Assignee, "reason": x.Reason, "withdrawal": x.Withdrawal}
					}),
					"updates": anyList(p.Updates, func(u sdk.TaskUpdate) any {
						return map[string]any{"status": u.Status, "progress": u.Progress, "message": u.Message, "partial_output": b64(u.PartialOutput), "sender": u.Sender}
					}),
					"progress": p.Progress(), "eligible": eligibleMap(pos, neg),
				}
			},
		},
		{
			mode: sdk.HandoffMode, version: sdk.HandoffModeVersion,
			newProj:  func() sdk.Projection { return sdk.NewHandoffProjection() },
			view0:    func(p sdk.Projection) *sdk.SessionView { return &p.(*sdk.HandoffProjection).SessionView },
			eligible: func(p sdk.Projection) (bool, bool) { return p.(*sdk.HandoffProjection).Eligible() },
			message: func(g *gen) *macpv1.Envelope {
				hid := g.pick("h1", "h2", "h3", "h1", "h2", "")
				sender := g.sender()
				typ := g.pick(sdk.TypeHandoffOffer, sdk.TypeHandoffOffer, sdk.TypeHandoffContext, sdk.TypeHandoffAccept, sdk.TypeHandoffDecline, sdk.TypeHandoffDecline)
				if typ == sdk.TypeHandoffAccept || typ == sdk.TypeHandoffDecline {
					sender = g.pick("a", "b", "c", "coord")
				}
				var m proto.Message
				switch typ {
				case sdk.TypeHandoffOffer:
					sender = g.pick("coord", "coord", "a")
					m = &handoffv1.HandoffOfferPayload{HandoffId: hid, TargetParticipant: g.pick("a", "b", "c", "coord", "", "zed"), Scope: "s", Reason: "r"}
				case sdk.TypeHandoffContext:
					sender = g.pick("coord", "coord", "b")
					m = &handoffv1.HandoffContextPayload{HandoffId: hid, ContentType: "text/plain", Context: []byte("ctx")[:g.r.IntN(4)]}
				case sdk.TypeHandoffAccept:
					m = &handoffv1.HandoffAcceptPayload{HandoffId: hid, AcceptedBy: g.pick("", "", sender, "zed"), Reason: "y"}
				default:
					m = &handoffv1.HandoffDeclinePayload{HandoffId: hid, DeclinedBy: g.pick("", "", sender, "zed"), Reason: "n"}
				}
				return g.env(sender, typ, mustMarshal(m))
			},
			view: func(pp sdk.Projection) map[string]any {
				p := pp.(*sdk.HandoffProjection)
				offers := map[string]any{}
				for _, o := range p.Offers {
					offers[o.ID] = map[string]any{"handoff_id": o.ID, "target_participant": o.Target, "scope": o.Scope, "reason": o.Reason,
						"offered_by": o.OfferedBy, "disposition": o.Disposition, "responded_by": o.RespondedBy, "response_reason": o.ResponseReason, "contexts": o.Contexts}
				}
				id := func(o *sdk.HandoffOffer) string {
					if o == nil {
						return ""
					}
					return o.ID
				}
				out := map[string]any{
					"phase": p.Phase(), "owner": p.Owner, "offers": offers,
					"pending_offer": id(p.PendingOffer()), "accepted_offer": id(p.AcceptedOffer()),
					"offer_order": anyList(p.Offers, func(o *sdk.HandoffOffer) any { return o.ID }),
					"contexts": anyList(p.Contexts, func(c sdk.HandoffContext) any {
						return map[string]any{"handoff_id": c.HandoffID, "content_type": c.ContentType, "sender": c.Sender, "bytes": len(c.Context), "late": c.Late}
					}),
				}
				if p.Resolved() {
					out["outcome_positive"] = p.Commitment.OutcomePositive
				}
				return out
			},
		},
		{
			mode: sdk.QuorumMode, version: sdk.QuorumModeVersion,
			newProj:  func() sdk.Projection { return sdk.NewQuorumProjection() },
			view0:    func(p sdk.Projection) *sdk.SessionView { return &p.(*sdk.QuorumProjection).SessionView },
			eligible: func(p sdk.Projection) (bool, bool) { return p.(*sdk.QuorumProjection).Eligible() },
			message: func(g *gen) *macpv1.Envelope {
				rid := g.pick("r1", "r1", "r1", "r2", "")
				sender := g.sender()
				typ := g.pick(sdk.TypeApprovalRequest, sdk.TypeApprove, sdk.TypeApprove, sdk.TypeReject, sdk.TypeAbstain)
				var m proto.Message
				switch typ {
				case sdk.TypeApprovalRequest:
					sender = g.pick("coord", "coord", "a")
					m = &quorumv1.ApprovalRequestPayload{RequestId: rid, Action: g.pick("deploy", "deploy", ""), Summary: g.pick("", "s"), RequiredApprovals: uint32(g.r.IntN(5))}
				case sdk.TypeApprove:
					m = &quorumv1.ApprovePayload{RequestId: rid, Reason: g.pick("", "y")}
				case sdk.TypeReject:
					m = &quorumv1.RejectPayload{RequestId: rid, Reason: "n"}
				default:
					m = &quorumv1.AbstainPayload{RequestId: rid}
				}
				return g.env(sender, typ, mustMarshal(m))
			},
			view: func(pp sdk.Projection) map[string]any {
				p := pp.(*sdk.QuorumProjection)
				var req any
				if q := p.Request; q != nil {
					req = map[string]any{"request_id": q.RequestId, "action": q.Action, "summary": q.Summary, "required_approvals": q.RequiredApprovals, "requested_by": p.Initiator}
				}
				ballots := map[string]any{}
				for _, b := range p.Ballots {
					ballots[b.Sender] = map[string]any{"choice": b.Choice, "reason": b.Reason, "request_id": p.Request.RequestId}
				}
				a, rj, ab := p.Counts()
				pos, neg := p.Eligible()
				return map[string]any{
					"phase": p.Phase(), "request": req, "ballots": ballots,
					"ballot_order": anyList(p.Ballots, func(b sdk.QuorumBallot) any { return b.Sender }),
					"approvals":    a, "rejections": rj, "abstentions": ab, "remaining": p.Remaining(),
					"eligible_participants": len(p.Participants), "threshold": p.Threshold(), "eligible": eligibleMap(pos, neg),
				}
			},
		},
		{
			mode: sdk.MultiRoundMode, version: sdk.MultiRoundModeVersion,
			newProj:  func() sdk.Projection { return sdk.NewMultiRoundProjection() },
			view0:    func(p sdk.Projection) *sdk.SessionView { return &p.(*sdk.MultiRoundProjection).SessionView },
			eligible: func(p sdk.Projection) (bool, bool) { return p.(*sdk.MultiRoundProjection).Eligible() },
			message: func(g *gen) *macpv1.Envelope {
				payload := []byte(`{"value":"` + g.pick("x", "x", "y") + `"}`)
				if g.chance(5) {
					payload = []byte(g.pick(`{"value":1}`, `not json`, `{"other":"x","value":"x"}`))
				}
				return g.env(g.sender(), g.pick(sdk.TypeContribute, sdk.TypeContribute, sdk.TypeContribute, "Bogus"), payload)
			},
			view: func(pp sdk.Projection) map[string]any {
				p := pp.(*sdk.MultiRoundProjection)
				cv, ok := p.Converged()
				values := map[string]any{}
				for k, v := range p.Values {
					values[k] = v
				}
				return map[string]any{
					"phase": p.Phase(), "converged": ok, "converged_value": cv, "round": p.Round,
					"values": values, "contributors": len(p.Values), "contributions": p.Contributions,
					"participants": anyList(p.Participants, func(s string) any { return s }),
				}
			},
		},
	}
}
