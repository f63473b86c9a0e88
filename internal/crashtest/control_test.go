package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/bench/loadgen"
	"github.com/macpd/macpd/sdk"
)

// initiator starts every session of the test (the loads' and the control
// workload's) and is one of its declared participants, so that its
// Proposals are accepted under both profiles (under 2026-09 only declared
// participants propose, RFC-MACP-0007 §2.1); the checks read as it.
const initiator = "p1"

// step is one call of a control script.
type step string

const (
	stepPropose  step = "propose"  // Proposal from the initiator
	stepEvaluate step = "evaluate" // Evaluation from p2
	stepCommit   step = "commit"   // Commitment from the initiator
	stepSuspend  step = "suspend"  // SuspendSession
	stepResume   step = "resume"   // ResumeSession
	stepCancel   step = "cancel"   // CancelSession
)

// controlScripts are the lifecycles the control workload drives sessions
// through: cancelled from OPEN and from SUSPENDED (EXPIRED under 2026-04,
// CANCELLED under latest), suspended and resumed more than once, resolved
// after a resumption, and left SUSPENDED or OPEN (so that restarts find
// them so, and recovery must restore them).
var controlScripts = [][]step{
	{stepPropose, stepSuspend, stepResume, stepEvaluate, stepSuspend, stepCancel},
	{stepSuspend, stepResume, stepSuspend},
	{stepPropose, stepSuspend, stepResume, stepEvaluate, stepCommit},
	{stepPropose, stepCancel},
	{stepSuspend, stepResume, stepPropose},
	{stepPropose, stepSuspend},
}

// controlLoad runs workers that each start a Decision session, play one
// control script on it call by call, and go on to the next session; a
// call that is not acked (refused, or unanswered across a kill) ends the
// session's script. Every call goes through the tracker (connection tag
// "control"), which checks them afterwards. It returns once ctx ends and
// every worker stopped.
//
// It returns the acked-log entries of its acked Sends (one sender stream
// per worker: a worker sends one envelope at a time, in order); its
// control calls are checked from the tracker.
func controlLoad(ctx context.Context, cl macpv1.MACPRuntimeServiceClient, seed uint64, workers int) []loadgen.Acked {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var out []loadgen.Acked
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			stream := fmt.Sprintf("control-%d", w)
			logAck := func(sid, mid string) {
				mu.Lock()
				out = append(out, loadgen.Acked{SessionID: sid, MessageID: mid, Stream: stream, Line: len(out) + 1})
				mu.Unlock()
			}
			for ctx.Err() == nil {
				if !playScript(ctx, cl, controlScripts[rng.IntN(len(controlScripts))], logAck) {
					// The server is down or refused: do not spin.
					sleepCtx(ctx, 20*time.Millisecond)
				}
				sleepCtx(ctx, 25*time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// playScript starts a session and plays script on it; it reports whether
// every call was acked.
func playScript(ctx context.Context, cl macpv1.MACPRuntimeServiceClient, script []step, logAck func(sid, mid string)) bool {
	send := func(ctx context.Context, cl macpv1.MACPRuntimeServiceClient, sender string, env *macpv1.Envelope) bool {
		ok := sendOne(ctx, cl, sender, env)
		if ok {
			logAck(env.GetSessionId(), env.GetMessageId())
		}
		return ok
	}
	sid := sdk.NewSessionID()
	start, err := sdk.NewSessionStart(sid, sdk.DecisionMode, sdk.StartPayload{
		Intent: "control", Participants: []string{initiator, "p2"}, TTL: time.Hour,
		ModeVersion: "1.0.0", ConfigurationVersion: sdk.DefaultConfigurationVersion,
	})
	if err != nil {
		panic(err)
	}
	if !send(ctx, cl, initiator, start) {
		return false
	}
	for _, s := range script {
		var ok bool
		switch s {
		case stepPropose:
			env, _ := sdk.NewProposal(sid, &decisionv1.ProposalPayload{ProposalId: "prop-1", Option: "option 1"})
			ok = send(ctx, cl, initiator, env)
		case stepEvaluate:
			env, _ := sdk.NewEvaluation(sid, &decisionv1.EvaluationPayload{ProposalId: "prop-1", Recommendation: "REVIEW", Confidence: 0.5})
			ok = send(ctx, cl, "p2", env)
		case stepCommit:
			env, _ := sdk.NewCommitment(sid, sdk.DecisionMode, &macpv1.CommitmentPayload{
				CommitmentId: "commit-1", Action: "decision.selected", AuthorityScope: "crashtest", Reason: "control",
				ModeVersion: "1.0.0", ConfigurationVersion: sdk.DefaultConfigurationVersion, OutcomePositive: true,
			})
			ok = send(ctx, cl, initiator, env)
		case stepSuspend, stepResume, stepCancel:
			ok = controlCall(ctx, cl, s, sid)
		}
		if !ok {
			return false
		}
	}
	return true
}

// sendOne sends env as sender and reports whether it was acked.
func sendOne(ctx context.Context, cl macpv1.MACPRuntimeServiceClient, sender string, env *macpv1.Envelope) bool {
	cctx, cancel := context.WithTimeout(asIdentity(ctx, sender), 5*time.Second)
	defer cancel()
	resp, err := cl.Send(cctx, &macpv1.SendRequest{Envelope: env})
	return err == nil && resp.GetAck().GetOk()
}

// controlCall makes a session control call as the initiator and reports
// whether it was acked.
func controlCall(ctx context.Context, cl macpv1.MACPRuntimeServiceClient, s step, sid string) bool {
	cctx, cancel := context.WithTimeout(asIdentity(ctx, initiator), 5*time.Second)
	defer cancel()
	var ack *macpv1.Ack
	var err error
	switch s {
	case stepSuspend:
		var r *macpv1.SuspendSessionResponse
		r, err = cl.SuspendSession(cctx, &macpv1.SuspendSessionRequest{SessionId: sid, Reason: "crashtest"})
		ack = r.GetAck()
	case stepResume:
		var r *macpv1.ResumeSessionResponse
		r, err = cl.ResumeSession(cctx, &macpv1.ResumeSessionRequest{SessionId: sid, Reason: "crashtest"})
		ack = r.GetAck()
	case stepCancel:
		var r *macpv1.CancelSessionResponse
		r, err = cl.CancelSession(cctx, &macpv1.CancelSessionRequest{SessionId: sid, Reason: "crashtest"})
		ack = r.GetAck()
	}
	return err == nil && ack.GetOk()
}
