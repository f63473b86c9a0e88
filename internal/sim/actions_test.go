package sim

import (
	"fmt"
	"os"
	"time"

	"google.golang.org/protobuf/proto"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/mode/handoff"
	"github.com/macpd/macpd/internal/mode/proposal"
	"github.com/macpd/macpd/internal/mode/quorum"
	"github.com/macpd/macpd/internal/mode/task"
	"github.com/macpd/macpd/internal/session"
)

// The simulated identities. Initiators are not participants (Decision lets
// an initiator propose and commit anyway); the outsider may do nothing;
// the observer may follow any session.
var (
	initiators = []coord.Identity{{Sender: "agent://init1"}, {Sender: "agent://init2"}}
	agents     = []coord.Identity{{Sender: "agent://alice"}, {Sender: "agent://bob"}, {Sender: "agent://carol"}}
	outsider   = coord.Identity{Sender: "agent://outsider"}
	observer   = coord.Identity{Sender: "agent://observer", Caps: coord.Capabilities{IsObserver: true}}
	admin      = coord.Identity{Sender: "agent://admin", Caps: coord.Capabilities{CanManageModeRegistry: true}}
)

// The standard modes a session may be started in (Decision most often: it
// is the one the clients drive through to a Commitment with valid
// payloads; the others get valid starts and mostly rejected traffic).
var simModes = []string{decision.ModeID, decision.ModeID, decision.ModeID, proposal.ModeID, task.ModeID, handoff.ModeID, quorum.ModeID}

// otherTypes are message types sent to sessions of the other modes.
var otherTypes = []string{"Proposal", "Vote", "Accept", "Reject", "TaskRequest", "TaskAccept", "HandoffOffer", "HandoffAccept", "Approve", "Abstain"}

func marshal(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func (w *world) pick(n int) int { return w.rng.IntN(n) }

func (w *world) chance(pct int) bool { return w.rng.IntN(100) < pct }

func (w *world) nextMsg() string { w.msgN++; return fmt.Sprintf("m%d", w.msgN) }

// action is one step's client action; weights sum to anything.
type action struct {
	name   string
	weight int
	run    func(w *world)
}

var actions = []action{
	{"start", 10, (*world).actStart},
	{"message", 24, (*world).actMessage},
	{"commit", 6, (*world).actCommit},
	{"invalid", 6, (*world).actInvalid},
	{"duplicate", 8, (*world).actDuplicate},
	{"race", 6, (*world).actRace},
	{"cancel", 3, (*world).actCancel},
	{"suspend", 4, (*world).actSuspend},
	{"resume", 4, (*world).actResume},
	{"advance", 10, (*world).actAdvance},
	{"follow", 7, (*world).actFollow},
	{"policy", 3, (*world).actPolicy},
	{"crash", 2, (*world).actCrash},
	{"fault", 3, (*world).actFault},
	{"hold", 3, (*world).actHold},
	{"followrace", 4, (*world).actFollowRace},
	{"expiryrace", 3, (*world).actExpiryRace},
	{"attach", 12, (*world).actAttach},
	{"sse", 10, (*world).actSSE},
}

func (w *world) chooseAction() action {
	total := 0
	for _, a := range actions {
		total += a.weight
	}
	n := w.pick(total)
	for _, a := range actions {
		if n < a.weight {
			return a
		}
		n -= a.weight
	}
	panic("unreachable")
}

// anySession picks a session the clients know of (nil if none).
func (w *world) anySession() *simSession {
	if len(w.sessions) == 0 {
		return nil
	}
	// Prefer recent sessions: they are more likely OPEN.
	if w.chance(70) && len(w.sessions) > 3 {
		return w.sessions[len(w.sessions)-1-w.pick(3)]
	}
	return w.sessions[w.pick(len(w.sessions))]
}

// openSession picks a session last seen OPEN (nil if none).
func (w *world) openSession() *simSession {
	var open []*simSession
	for _, s := range w.sessions {
		if s.started && !s.terminal && s.status == session.Open {
			open = append(open, s)
		}
	}
	if len(open) == 0 {
		return nil
	}
	return open[w.pick(len(open))]
}

func (w *world) anySender(s *simSession) coord.Identity {
	switch n := w.pick(10); {
	case n < 3:
		return s.initiator
	case n < 9:
		return s.parts[w.pick(len(s.parts))]
	default:
		return outsider
	}
}

// startEnvelope builds a new session and its SessionStart (valid unless
// broken is set).
func (w *world) newSession() (*simSession, *macpv1.Envelope) {
	n := len(w.sessions) + 1
	s := &simSession{
		id: fmt.Sprintf("sim-session-%010d", n), n: n, mode: simModes[w.pick(len(simModes))],
		initiator: initiators[w.pick(len(initiators))],
		acked:     make(map[string]bool), unsure: make(map[string]bool), from: make(map[string]coord.Identity),
	}
	s.parts = agents[:2+w.pick(2)]
	if s.mode == handoff.ModeID { // the initiator is the first owner and must take part (RFC-MACP-0010 §3)
		s.parts = append([]coord.Identity{s.initiator}, s.parts...)
	}
	var parts []string
	for _, p := range s.parts {
		parts = append(parts, p.Sender)
	}
	ttls := []int64{2_000, 30_000, 5 * 60_000, 30 * 60_000, 2 * 60 * 60_000}
	suspends := []int64{0, 10_000, 2 * 60_000}
	pl := &macpv1.SessionStartPayload{
		Intent: "sim", Participants: parts, ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1",
		TtlMs: ttls[w.pick(len(ttls))], MaxSuspendMs: suspends[w.pick(len(suspends))],
	}
	if s.mode == decision.ModeID && len(w.policies) > 0 && w.chance(30) {
		ids := sortedKeys(w.policies)
		pl.PolicyVersion = ids[w.pick(len(ids))]
		s.policy = pl.PolicyVersion
	}
	env := &macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion, Mode: s.mode, MessageType: coord.TypeSessionStart,
		MessageId: w.nextMsg(), SessionId: s.id, TimestampUnixMs: w.clk.NowMs(), Payload: marshal(pl),
	}
	w.sessions = append(w.sessions, s)
	w.byID[s.id] = s
	return s, env
}

func (w *world) actStart() {
	s, env := w.newSession()
	switch w.pick(10) {
	case 0: // no TTL: invalid
		pl := &macpv1.SessionStartPayload{Intent: "sim", Participants: []string{agents[0].Sender}, ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1"}
		env.Payload = marshal(pl)
	case 1: // a start for a session id that exists (if any)
		if len(w.sessions) > 1 {
			other := w.sessions[w.pick(len(w.sessions)-1)]
			env.SessionId = other.id
			w.send(other, other.initiator, env, "start-again")
			w.sessions = w.sessions[:len(w.sessions)-1]
			delete(w.byID, s.id)
			return
		}
	}
	w.send(s, s.initiator, env, "start")
}

// sessionEnv is a session-scoped envelope for s from the clock's now.
func (w *world) sessionEnv(s *simSession, typ string, payload []byte) *macpv1.Envelope {
	return &macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion, Mode: s.mode, MessageType: typ,
		MessageId: w.nextMsg(), SessionId: s.id, TimestampUnixMs: w.clk.NowMs(), Payload: payload,
	}
}

// messageEnv draws a mode message for s (valid in shape for Decision).
func (w *world) messageEnv(s *simSession) *macpv1.Envelope {
	if s.mode != decision.ModeID {
		return w.sessionEnv(s, otherTypes[w.pick(len(otherTypes))], []byte{byte(w.pick(256)), byte(w.pick(256))})
	}
	if len(s.props) == 0 || w.chance(40) {
		id := w.nextMsg()
		env := w.sessionEnv(s, decision.TypeProposal, marshal(&decisionv1.ProposalPayload{ProposalId: "p-" + id, Option: "option " + id, Rationale: "r"}))
		s.props = append(s.props, "p-"+id)
		return env
	}
	pid := s.props[w.pick(len(s.props))]
	if w.chance(15) {
		return w.sessionEnv(s, decision.TypeEvaluation, marshal(&decisionv1.EvaluationPayload{ProposalId: pid, Recommendation: "APPROVE", Confidence: 0.5, Reason: "r"}))
	}
	vote := decision.VoteApprove
	if w.chance(30) {
		vote = decision.VoteReject
	}
	return w.sessionEnv(s, decision.TypeVote, marshal(&decisionv1.VotePayload{ProposalId: pid, Vote: vote, Reason: "r"}))
}

func (w *world) commitEnv(s *simSession) *macpv1.Envelope {
	return w.sessionEnv(s, coord.TypeCommitment, marshal(&macpv1.CommitmentPayload{
		CommitmentId: "c-" + fmt.Sprint(w.msgN+1), Action: "decision.rejected", AuthorityScope: "sim", Reason: "done",
		ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", OutcomePositive: false, PolicyVersion: s.policy,
	}))
}

func (w *world) actMessage() {
	s := w.anySession()
	if s == nil {
		w.actStart()
		return
	}
	w.send(s, w.anySender(s), w.messageEnv(s), "message")
}

func (w *world) actCommit() {
	s := w.anySession()
	if s == nil {
		return
	}
	who := s.initiator
	if w.chance(25) {
		who = w.anySender(s)
	}
	w.send(s, who, w.commitEnv(s), "commit")
}

func (w *world) actInvalid() {
	s := w.anySession()
	if s == nil {
		return
	}
	env := w.messageEnv(s)
	switch w.pick(5) {
	case 0:
		env.Mode = "macp.mode.nope.v1"
	case 1:
		env.MessageId = ""
	case 2:
		env.Payload = []byte{0xff, 0xff, 0xff}
	case 3:
		env.SessionId = "sim-session-unknown000"
	case 4:
		env.MacpVersion = "0.0"
	}
	w.send(s, w.anySender(s), env, "invalid")
}

func (w *world) actDuplicate() {
	s := w.anySession()
	if s == nil || len(s.sent) == 0 {
		return
	}
	orig := s.sent[w.pick(len(s.sent))]
	env := proto.Clone(orig).(*macpv1.Envelope)
	w.send(s, s.from[env.MessageId], env, "duplicate")
}

// send sends one envelope and records the answer in the model and the
// trace. An envelope acknowledged before must come back a duplicate.
func (w *world) send(s *simSession, who coord.Identity, env *macpv1.Envelope, what string) *macpv1.Ack {
	wasAcked := s.acked[env.MessageId] && env.SessionId == s.id
	ack := w.rt.Send(w.ctx, who, env)
	w.record(s, who, env, ack, what, wasAcked)
	return ack
}

func (w *world) record(s *simSession, who coord.Identity, env *macpv1.Envelope, ack *macpv1.Ack, what string, wasAcked bool) {
	if env.SessionId == s.id && env.MessageId != "" {
		if _, ok := s.from[env.MessageId]; !ok {
			s.sent = append(s.sent, env)
			s.from[env.MessageId] = who
		}
	}
	code := "ok"
	if ack.Error != nil {
		code = ack.Error.Code
	}
	if ack.Duplicate {
		code += " duplicate"
	}
	w.logf("%s %s %s %s by %s -> %s %s", what, env.SessionId, env.MessageId, env.MessageType, who.Sender, code, ack.SessionState)
	if debugReasons && ack.Error != nil {
		w.logf("  reason: %s", ack.Error.Message)
	}
	if wasAcked && !(ack.Ok && ack.Duplicate) {
		w.fail("%s %s was acknowledged before; resent it was answered %s, not a duplicate", env.SessionId, env.MessageId, code)
	}
	if env.SessionId != s.id || env.MessageId == "" {
		return
	}
	if ack.Ok && !ack.Duplicate && env.MessageType == coord.TypeCommitment {
		// At most one terminal outcome: a second Commitment accepted for
		// one session would be a second outcome.
		if s.resolvedBy != "" && s.resolvedBy != env.MessageId {
			w.fail("%s: Commitment %s accepted after Commitment %s resolved the session", s.id, env.MessageId, s.resolvedBy)
		}
		s.resolvedBy = env.MessageId
	}
	switch {
	case ack.Ok:
		s.acked[env.MessageId] = true
		delete(s.unsure, env.MessageId)
		if env.MessageType == coord.TypeSessionStart {
			s.started = true
		}
	case ack.Error != nil && ack.Error.Code == string(coord.CodeInternalError) && !s.acked[env.MessageId]:
		s.unsure[env.MessageId] = true
	}
}

// actRace hands 2-4 envelopes to SendPipelined in a drawn order (each is
// decided when handed over) and only then waits for their acks: they are
// committed together, racing in the committer, possibly on one session
// (two Commitments: the first decided wins).
func (w *world) actRace() {
	type inflight struct {
		s        *simSession
		who      coord.Identity
		env      *macpv1.Envelope
		wasAcked bool
		wait     func() *macpv1.Ack
	}
	var fl []inflight
	for k := 2 + w.pick(3); k > 0; k-- {
		s := w.anySession()
		if s == nil {
			return
		}
		var env *macpv1.Envelope
		who := w.anySender(s)
		switch w.pick(4) {
		case 0:
			env, who = w.commitEnv(s), s.initiator
		case 1:
			if len(s.sent) > 0 {
				env = proto.Clone(s.sent[w.pick(len(s.sent))]).(*macpv1.Envelope)
				who = s.from[env.MessageId]
				break
			}
			fallthrough
		default:
			env = w.messageEnv(s)
		}
		f := inflight{s: s, who: who, env: env, wasAcked: s.acked[env.MessageId]}
		f.wait = w.rt.SendPipelined(w.ctx, who, env)
		fl = append(fl, f)
	}
	for _, f := range fl {
		w.record(f.s, f.who, f.env, f.wait(), "race", f.wasAcked)
	}
}

func (w *world) control(what string, op func(s *simSession, who coord.Identity) (*macpv1.Ack, *coord.Error)) {
	s := w.anySession()
	if s == nil {
		return
	}
	who := s.initiator
	if w.chance(15) {
		who = w.anySender(s)
	}
	ack, cerr := op(s, who)
	code := "ok"
	switch {
	case cerr != nil:
		code = string(cerr.Code)
	case ack != nil && !ack.Ok && ack.Error != nil:
		code = ack.Error.Code
	}
	state := ""
	if ack != nil {
		state = ack.SessionState.String()
	}
	w.logf("%s %s by %s -> %s %s", what, s.id, who.Sender, code, state)
}

func (w *world) actCancel() {
	w.control("cancel", func(s *simSession, who coord.Identity) (*macpv1.Ack, *coord.Error) {
		return w.rt.Cancel(w.ctx, who, s.id, "sim")
	})
}

func (w *world) actSuspend() {
	w.control("suspend", func(s *simSession, who coord.Identity) (*macpv1.Ack, *coord.Error) {
		return w.rt.Suspend(w.ctx, who, s.id, "sim")
	})
}

func (w *world) actResume() {
	w.control("resume", func(s *simSession, who coord.Identity) (*macpv1.Ack, *coord.Error) {
		return w.rt.Resume(w.ctx, who, s.id, "sim")
	})
}

var advances = []time.Duration{50 * time.Millisecond, time.Second, time.Second, 10 * time.Second, 10 * time.Second, time.Minute, time.Minute, 5 * time.Minute, 20 * time.Minute}

func (w *world) actAdvance() {
	d := advances[w.pick(len(advances))]
	w.clk.Advance(d)
	w.logf("advance %s", d)
}

// actFollow subscribes to a session from a drawn cursor: the start, the
// middle, the end, or beyond it.
func (w *world) actFollow() {
	s := w.anySession()
	if s == nil {
		return
	}
	n := uint64(len(w.history(s.id)))
	var after uint64
	switch w.pick(4) {
	case 0:
	case 1:
		after = uint64(w.pick(int(n) + 1))
	case 2:
		after = n
	case 3:
		after = n + 1 + uint64(w.pick(3))
	}
	who := observer
	switch w.pick(6) {
	case 0:
		who = s.initiator
	case 1, 2:
		who = s.parts[w.pick(len(s.parts))]
	case 3:
		who = outsider
	}
	w.follow(s, who, after, false)
}

func (w *world) actPolicy() {
	w.polN++
	id := fmt.Sprintf("policy.sim.%d", w.polN)
	rules := `{"voting":{"algorithm":"majority"}}`
	if w.chance(25) {
		rules = `{"voting":`
	}
	cerr := w.reg.RegisterPolicy(admin, &macpv1.PolicyDescriptor{PolicyId: id, Mode: decision.ModeID, Rules: rules, SchemaVersion: 1})
	w.logf("register policy %s -> %s", id, codeOf(cerr))
	if cerr == nil {
		w.policies[id] = true
	}
}

func (w *world) actCrash() {
	w.crash(w.chance(50), "random point")
}

// actFault arms a disk fault on the WAL (a failed fsync or ENOSPC on
// write) for one send, then crashes: the store fails closed, so the
// process must restart.
func (w *world) actFault() {
	kind := "fsync"
	if w.chance(40) {
		kind = "enospc"
	}
	w.faults++
	w.logf("disk fault armed: %s", kind)
	w.inj.arm(kind)
	if w.chance(30) {
		w.actStart()
	} else {
		w.actMessage()
	}
	hits := w.inj.disarm()
	w.logf("  disk fault hit %d WAL ops", hits)
	w.crash(w.chance(50), "after disk fault")
}

// actHold holds the next WAL sync (a slow disk): the send's append stays
// in flight while the clock moves (deadlines pass, expiries queue behind
// it), or the process crashes with the append unsynced.
func (w *world) actHold() {
	s := w.openSession()
	if s == nil {
		return
	}
	w.inj.arm("hold")
	entered := w.inj.entered
	env := w.messageEnv(s)
	who := s.parts[w.pick(len(s.parts))] // a participant: likely accepted, so there is a sync to hold
	wasAcked := s.acked[env.MessageId]
	acks := make(chan *macpv1.Ack, 1)
	rt := w.rt
	go func() { acks <- rt.Send(w.ctx, who, env) }()
	select {
	case ack := <-acks: // nothing to write: no sync to hold
		w.inj.releaseAll()
		w.record(s, who, env, ack, "hold(no write)", wasAcked)
		return
	case <-entered:
	case <-waitCh():
		w.fail("held send neither wrote nor answered")
	}
	w.heldSyncs++
	var midSync *follower
	if w.chance(40) {
		// A subscriber arrives while the record is visible in the store
		// but not durable: it must not get it before the sync completes
		// (nor at all if the process dies first).
		after := uint64(0)
		if n, ok := w.rt.LastSeq(s.id); ok && n > 0 {
			after = uint64(w.pick(int(n)))
		}
		midSync = w.follow(s, observer, after, true)
	}
	if w.chance(50) {
		d := advances[w.pick(len(advances))]
		w.logf("sync held for %s %s %s by %s; advance %s", s.id, env.MessageId, env.MessageType, who.Sender, d)
		w.clk.Advance(d)
		w.inj.releaseAll()
		w.record(s, who, env, <-acks, "held", wasAcked)
		if midSync != nil && !w.awaitStart(midSync) {
			w.fail("follower f%d of %s, subscribed during a held sync, was refused", midSync.n, s.id)
		}
		return
	}
	w.logf("sync held for %s %s %s by %s; crash", s.id, env.MessageId, env.MessageType, who.Sender)
	s.sent = append(s.sent, env)
	s.from[env.MessageId] = who
	if !s.acked[env.MessageId] {
		s.unsure[env.MessageId] = true
	}
	w.crash(w.chance(50), "during a held sync")
	<-acks // the dead process's answer: not an acknowledgement
}

func waitCh() <-chan time.Time { return time.After(settleBound) }

// codeOf names a *coord.Error's code ("ok" for nil).
func codeOf(cerr *coord.Error) string {
	if cerr == nil {
		return "ok"
	}
	return string(cerr.Code)
}

// debugReasons adds every rejection's message to the trace (they are
// deterministic too, but long).
var debugReasons = os.Getenv("SIM_REASONS") != ""
