package session_test

// FuzzStep drives one session with a random sequence of envelopes, clock
// moves, cancellations and expiry checks decoded from the fuzz input, and
// checks the core's invariants after every call (RFC-MACP-0003 §7 "fuzzing
// of message sequences"; checklist DET-7):
//
//   - no panic; Step never answers INTERNAL_ERROR and only registry codes;
//   - a rejected envelope changes nothing (Metadata, Status, Seq, SeenIDs,
//     ModeProjection, ...) except the one rejection that crosses the deadline,
//     which only expires the session and carries its Expire record
//     (RFC-MACP-0001 §8.3);
//   - a duplicate changes nothing (§8.2);
//   - every record has Seq = previous + 1 (§8.1, IDEM-5);
//   - status never leaves a terminal state (§7.2);
//   - the dedup set is exactly the message ids of the enveloped records, and
//     participant activity is exactly what the history implies;
//   - replaying the records (Restore + Apply) reproduces the final state
//     (RFC-MACP-0003 §1);
//   - under both profiles, with suspensions, resumptions and the suspension
//     cap (RFC-MACP-0001 §7.5): a SUSPENDED session accepts no message, the
//     cap expires it exactly when exceeded, cancellation ends it EXPIRED
//     (2026-04) or CANCELLED (latest).
//
// Run: go test -fuzz=FuzzStep -fuzztime=90s ./internal/session/

import (
	"fmt"
	"math/rand/v2"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

// byteReader turns fuzz bytes into choices; when the bytes run out every
// choice is 0.
type byteReader struct {
	data []byte
	pos  int
}

func (r *byteReader) more() bool { return r.pos < len(r.data) }

func (r *byteReader) byte() byte {
	if r.pos >= len(r.data) {
		return 0
	}
	b := r.data[r.pos]
	r.pos++
	return b
}

func (r *byteReader) intn(n int) int {
	if n <= 1 {
		return 0
	}
	if n <= 256 {
		return int(r.byte()) % n
	}
	return int((uint32(r.byte())<<8 | uint32(r.byte())) % uint32(n))
}

func (r *byteReader) bytes(max int) []byte {
	n := r.intn(max + 1)
	if n == 0 {
		return nil
	}
	out := make([]byte, n)
	for i := range out {
		out[i] = r.byte()
	}
	return out
}

var (
	fuzzSenders  = []string{initiator, alice, bob, mallory, "carol"}
	fuzzIDs      = []string{"m-start", "m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"}
	fuzzPolicies = []string{"", coord.DefaultPolicyID, policyAny, policyStrict, policyDesig}
	fuzzActions  = []string{"testing.accepted", "testing.rejected", "testing.done", "x.selected", "x.failed"}
	fuzzTypes    = []string{coord.TypeSessionCancel, coord.TypeSignal, coord.TypeProgress, "Unknown", "", "note"}
	registry     = map[coord.Code]bool{
		coord.CodeUnauthenticated: true, coord.CodeForbidden: true, coord.CodeSessionNotFound: true,
		coord.CodeSessionNotOpen: true, coord.CodeDuplicateMessage: true, coord.CodeSessionAlreadyExists: true,
		coord.CodeInvalidEnvelope: true, coord.CodeUnsupportedProtocolVersion: true, coord.CodeModeNotSupported: true,
		coord.CodePayloadTooLarge: true, coord.CodeRateLimited: true, coord.CodeInvalidSessionID: true,
		coord.CodeUnknownPolicyVersion: true, coord.CodePolicyDenied: true, coord.CodeInvalidPolicyDefinition: true,
	}
)

// fuzzLimits keeps the payload limit small so PAYLOAD_TOO_LARGE is
// reachable with short inputs.
func fuzzLimits() session.Limits {
	l := session.DefaultLimits()
	l.MaxPayloadBytes = 160
	return l
}

// runStats summarizes one driven run.
type runStats struct {
	s        *session.Session
	history  []session.Record
	accepted int
	rejected int
	dups     int
}

// drive runs the byte-encoded scenario and checks every invariant; it
// reports failures on t.
func drive(t testing.TB, data []byte) runStats {
	t.Helper()
	r := &byteReader{data: data}
	lim := fuzzLimits()

	p := startPayload()
	p.PolicyVersion = fuzzPolicies[r.intn(len(fuzzPolicies))]
	p.TtlMs = 500 + int64(r.intn(4000))
	p.MaxSuspendMs = int64(r.intn(3000))
	lim.Profile = coord.Profiles[r.intn(len(coord.Profiles))]
	if r.intn(3) == 0 {
		p.Participants = []string{alice, bob, "carol"}
	}
	env := startEnv(t, p)
	now := t0
	env.TimestampUnixMs = []int64{0, t0, t0 - 1000, t0 + 1000}[r.intn(4)]
	s, rec, err := session.Start(env, now, session.Deps{Modes: modes(), Policies: policies(), Limits: lim})
	if err != nil {
		t.Fatalf("fixture Start: %v", err)
	}
	st := runStats{s: s, history: []session.Record{rec}}

	appendRecs := func(what string, before state, recs []session.Record) {
		for _, rc := range recs {
			last := st.history[len(st.history)-1].Seq
			if rc.Seq != last+1 || rc.SessionID != sid {
				t.Fatalf("%s: record %d (session %q) after %d", what, rc.Seq, rc.SessionID, last)
			}
			if before.status.Terminal() {
				t.Fatalf("%s: record %s after the session was %s", what, rc.Kind, before.status)
			}
			st.history = append(st.history, rc)
		}
		if s.Seq != st.history[len(st.history)-1].Seq {
			t.Fatalf("%s: session Seq %d, last record %d", what, s.Seq, st.history[len(st.history)-1].Seq)
		}
	}

	for ops := 0; r.more() && ops < 256; ops++ {
		before := snap(s)
		op := r.intn(21)
		expiryAt, live := s.ExpiryMs()
		switch op {
		case 18, 19: // SuspendSession, ResumeSession
			caller := initiator
			if r.intn(5) == 0 {
				caller = fuzzSenders[r.intn(len(fuzzSenders))]
			}
			id := fmt.Sprintf("ctl-%d", r.intn(4))
			var out session.Outcome
			if op == 18 {
				out = s.Suspend(caller, "r", id, now)
			} else {
				out = s.Resume(caller, "r", id, now)
			}
			checkControl(t, op == 18, before, s, out, caller, id, now, live && now >= expiryAt)
			appendRecs("control", before, out.Records)
			continue
		case 20: // jump to the suspension cap, or just past it
			if s.Status == session.Suspended {
				now = expiryAt - 1 + int64(r.intn(3))
			}
			continue
		case 12: // small clock move, sometimes backwards
			now += int64(r.intn(600)) - 50
			continue
		case 13: // jump past the deadline, or to it exactly
			if r.intn(2) == 0 {
				now = s.DeadlineMs
			} else {
				now = s.DeadlineMs + int64(r.intn(1000))
			}
			continue
		case 14, 15: // CancelSession
			caller := fuzzSenders[r.intn(len(fuzzSenders))]
			if r.intn(4) == 0 {
				caller = initiator
			}
			id := fmt.Sprintf("cancel-%d", r.intn(3))
			if r.intn(6) == 0 {
				id = fuzzIDs[r.intn(len(fuzzIDs))]
			}
			out := s.Cancel(caller, "reason", id, now)
			checkCancel(t, before, s, out, caller, id, now, live && now >= expiryAt)
			appendRecs("Cancel", before, out.Records)
			continue
		case 16: // timer
			rc, ok := s.ExpireIfDue(now)
			if ok != (live && now >= expiryAt) || (before.status == session.Open && ok != (now >= before.deadline)) {
				t.Fatalf("ExpireIfDue(%d) = %v with status %s deadline %d expiry %d", now, ok, before.status, before.deadline, expiryAt)
			}
			if ok {
				if rc.Kind != session.KindExpire || s.Status != session.Expired || s.ClosedAtMs != now {
					t.Fatalf("ExpireIfDue record %+v status %s", rc, s.Status)
				}
				appendRecs("ExpireIfDue", before, []session.Record{rc})
			} else if d := before.diff(snap(s)); d != "" {
				t.Fatalf("ExpireIfDue without expiry changed: %s", d)
			}
			continue
		}
		e := fuzzEnvelope(t, r, op)
		wasSeen := e != nil && s.Seen(e.GetMessageId())
		out := s.Step(e, now, lim)
		after := snap(s)
		what := fmt.Sprintf("op %d Step(%s %q from %q at %d)", ops, e.GetMessageType(), e.GetMessageId(), e.GetSender(), now)
		switch {
		case out.Duplicate:
			st.dups++
			if out.Err != nil || len(out.Records) != 0 || out.Resolved || !wasSeen {
				t.Fatalf("%s: bad duplicate outcome %+v (seen before: %v)", what, out, wasSeen)
			}
			if d := before.diff(after); d != "" {
				t.Fatalf("%s: duplicate changed the session: %s", what, d)
			}
		case out.Err != nil:
			st.rejected++
			if !registry[out.Err.Code] {
				t.Fatalf("%s: code %q (%v) is not a client-facing registry code", what, out.Err.Code, out.Err)
			}
			if out.Resolved {
				t.Fatalf("%s: rejected but resolved", what)
			}
			if len(out.Records) == 0 {
				if d := before.diff(after); d != "" {
					t.Fatalf("%s: rejection %v changed the session: %s", what, out.Err, d)
				}
				break
			}
			// The only rejection with records: the deadline passed.
			if len(out.Records) != 1 || out.Records[0].Kind != session.KindExpire || out.Err.Code != coord.CodeSessionNotOpen ||
				before.status.Terminal() || after.status != session.Expired || !live || now < expiryAt || after.closedAt != now {
				t.Fatalf("%s: rejection %v with records %+v (status %s -> %s)", what, out.Err, out.Records, before.status, after.status)
			}
			if before.diff(withLifecycle(after, before)) != "" {
				t.Fatalf("%s: expiry changed more than the lifecycle: %s", what, before.diff(withLifecycle(after, before)))
			}
		default:
			st.accepted++
			if len(out.Records) != 1 || out.Records[0].Kind != session.KindMessage || wasSeen {
				t.Fatalf("%s: accepted with records %+v (seen before: %v)", what, out.Records, wasSeen)
			}
			if before.status != session.Open || now >= before.deadline {
				t.Fatalf("%s: accepted while %s at/after deadline %d", what, before.status, before.deadline)
			}
			rc := out.Records[0]
			if !proto.Equal(rc.Envelope, e) || rc.AcceptedAtMs != now || !s.Seen(e.MessageId) {
				t.Fatalf("%s: record %+v does not hold the envelope", what, rc)
			}
			if out.Resolved != (e.MessageType == coord.TypeCommitment) || out.Resolved != (after.status == session.Resolved) {
				t.Fatalf("%s: resolved=%v status %s", what, out.Resolved, after.status)
			}
			if out.Resolved && (after.closedAt != now || after.resolution == nil) {
				t.Fatalf("%s: resolved without close time/resolution", what)
			}
		}
		if before.status.Terminal() && after.status != before.status {
			t.Fatalf("%s: status %s -> %s", what, before.status, after.status)
		}
		appendRecs(what, before, out.Records)
	}

	checkHistoryImplies(t, s, st.history)

	// Replay equivalence (RFC-MACP-0003 §1).
	rs, err := replay(t, st.history)
	if err != nil {
		t.Fatalf("replay of the accepted history failed: %v", err)
	}
	if d := snap(s).diff(snap(rs)); d != "" {
		t.Fatalf("replay diverged: %s", d)
	}
	if !proto.Equal(s.Resolution, rs.Resolution) || s.Status != rs.Status {
		t.Fatalf("replay terminal state differs")
	}
	return st
}

// withLifecycle returns after with before's lifecycle fields, so the rest
// can be compared.
func withLifecycle(after, before state) state {
	after.status, after.seq, after.closedAt = before.status, before.seq, before.closedAt
	md := proto.Clone(after.md).(*macpv1.SessionMetadata)
	md.State = before.md.State
	after.md = md
	return after
}

// fuzzEnvelope builds a session-scoped envelope for op 0..11 and 17.
func fuzzEnvelope(t testing.TB, r *byteReader, op int) *macpv1.Envelope {
	sender := fuzzSenders[r.intn(len(fuzzSenders))]
	id := fuzzIDs[r.intn(len(fuzzIDs))]
	var e *macpv1.Envelope
	switch op {
	case 0, 1, 2, 3, 4:
		e = msg(typeNote, id, sender, r.bytes(8))
	case 5:
		e = msg(typeBlock, id, sender, r.bytes(4))
	case 6, 7:
		if r.intn(2) == 0 {
			sender = initiator
		}
		c := commitPayload()
		c.Action = fuzzActions[r.intn(len(fuzzActions))]
		c.OutcomePositive = r.intn(2) == 0
		flags := r.byte()
		if flags&1 != 0 {
			c.CommitmentId = ""
		}
		if flags&2 != 0 {
			c.ModeVersion = "9.9.9"
		}
		if flags&4 != 0 {
			c.PolicyVersion = fuzzPolicies[r.intn(len(fuzzPolicies))]
		}
		if flags&8 != 0 {
			c.ConfigurationVersion = ""
		}
		if flags&16 != 0 {
			c.Reason = ""
		}
		e = commit(t, id, sender, c)
	case 8:
		e = msg(coord.TypeCommitment, id, sender, r.bytes(12))
	case 9:
		p := startPayload()
		p.TtlMs = int64(r.intn(100))
		e = startEnv(t, p)
		e.MessageId, e.Sender = id, sender
	case 10:
		e = msg(fuzzTypes[r.intn(len(fuzzTypes))], id, sender, r.bytes(8))
		if e.MessageType == coord.TypeSignal && r.intn(2) == 0 {
			e.SessionId, e.Mode = "", ""
		}
	case 11, 17: // a valid Note with one structural or binding defect
		e = note(id, sender)
		switch r.intn(9) {
		case 0:
			e.Mode = "macp.mode.decision.v1"
		case 1:
			e.SessionId = sid2
		case 2:
			e.MacpVersion = "2.0"
		case 3:
			e.Sender = ""
		case 4:
			e.Payload = make([]byte, 161) // over fuzzLimits
		case 5:
			e.MessageId = ""
		case 6:
			e.Mode, e.SessionId = "", ""
		case 7:
			e.MessageType = ""
		case 8:
			return nil
		}
	default:
		panic(op)
	}
	return e
}

func checkCancel(t testing.TB, before state, s *session.Session, out session.Outcome, caller, id string, now int64, due bool) {
	t.Helper()
	after := snap(s)
	what := fmt.Sprintf("Cancel(%q, %q) at %d", caller, id, now)
	switch {
	case out.Err != nil:
		if len(out.Records) != 0 || before.diff(after) != "" {
			t.Fatalf("%s: rejected %v but changed things: %s", what, out.Err, before.diff(after))
		}
		switch out.Err.Code {
		case coord.CodeForbidden:
			if caller == initiator {
				t.Fatalf("%s: initiator forbidden", what)
			}
		case coord.CodeInternalError:
			if caller != initiator || before.status.Terminal() || (id != "" && !s.Seen(id)) {
				t.Fatalf("%s: unexpected internal error %v", what, out.Err)
			}
		default:
			t.Fatalf("%s: code %v", what, out.Err)
		}
	case len(out.Records) == 0:
		if !before.status.Terminal() || before.diff(after) != "" {
			t.Fatalf("%s: no records but status %s / changed %s", what, before.status, before.diff(after))
		}
	default:
		k := out.Records[0].Kind
		want := session.Expired
		if k == session.KindCancel && s.Latest() {
			want = session.Cancelled
		}
		if caller != initiator || before.status.Terminal() || after.status != want || len(out.Records) != 1 || after.closedAt != now {
			t.Fatalf("%s: %+v with status %s -> %s", what, out, before.status, after.status)
		}
		if (k == session.KindExpire) != due || (k != session.KindExpire && k != session.KindCancel) {
			t.Fatalf("%s: record kind %s with deadline %d", what, k, before.deadline)
		}
		if k == session.KindCancel && (after.cancellation.GetCancelledBy() != caller || out.Records[0].Envelope.Sender != coord.RuntimeSender) {
			t.Fatalf("%s: cancellation %v", what, after.cancellation)
		}
	}
}

// checkControl checks a Suspend (suspend set) or Resume outcome: refused
// calls change nothing; a call past the session's expiry expires it; an
// accepted call moves OPEN <-> SUSPENDED with one runtime-emitted record.
func checkControl(t testing.TB, suspend bool, before state, s *session.Session, out session.Outcome, caller, id string, now int64, due bool) {
	t.Helper()
	after := snap(s)
	what := fmt.Sprintf("Suspend=%v(%q, %q) at %d from %s", suspend, caller, id, now, before.status)
	from, to, kind := session.Open, session.Suspended, session.KindSuspend
	if !suspend {
		from, to, kind = session.Suspended, session.Open, session.KindResume
	}
	switch {
	case caller != initiator:
		if coord.CodeOf(out.Err) != coord.CodeForbidden || len(out.Records) != 0 || before.diff(after) != "" {
			t.Fatalf("%s: %+v changed %s", what, out, before.diff(after))
		}
	case due:
		if coord.CodeOf(out.Err) != coord.CodeSessionNotOpen || len(out.Records) != 1 || out.Records[0].Kind != session.KindExpire || after.status != session.Expired {
			t.Fatalf("%s: past expiry: %+v status %s", what, out, after.status)
		}
	case before.status != from:
		if coord.CodeOf(out.Err) != coord.CodeSessionNotOpen || len(out.Records) != 0 || before.diff(after) != "" {
			t.Fatalf("%s: %+v changed %s", what, out, before.diff(after))
		}
	case before.seenID(id):
		if coord.CodeOf(out.Err) != coord.CodeInternalError || len(out.Records) != 0 || before.diff(after) != "" {
			t.Fatalf("%s: reused id: %+v", what, out)
		}
	default:
		if out.Err != nil || len(out.Records) != 1 || out.Records[0].Kind != kind || after.status != to ||
			out.Records[0].Status != to || out.Records[0].Envelope.GetSender() != coord.RuntimeSender {
			t.Fatalf("%s: %+v status %s", what, out, after.status)
		}
		if !suspend && s.DeadlineMs < now {
			t.Fatalf("%s: resumed with deadline %d before now", what, s.DeadlineMs)
		}
	}
}

// checkHistoryImplies checks the dedup set and participant activity
// against the records (RFC-MACP-0001 §8.3: only accepted envelopes consume
// dedup slots; checklist ADM-24 participant activity count and last time).
func checkHistoryImplies(t testing.TB, s *session.Session, history []session.Record) {
	t.Helper()
	ids := map[string]bool{}
	act := map[string]session.Activity{}
	terminalAt := -1
	for i, rc := range history {
		if terminalAt >= 0 {
			t.Fatalf("record %d after terminal record %d", rc.Seq, history[terminalAt].Seq)
		}
		if rc.Seq != uint64(i+1) {
			t.Fatalf("record %d at index %d", rc.Seq, i)
		}
		switch rc.Kind {
		case session.KindExpire:
			terminalAt = i
			if rc.Envelope != nil {
				t.Fatalf("expire record with envelope")
			}
			continue
		case session.KindCancel:
			terminalAt = i
		case session.KindMessage:
			if rc.Envelope.MessageType == coord.TypeCommitment {
				terminalAt = i
			}
		}
		if ids[rc.Envelope.MessageId] {
			t.Fatalf("message id %q accepted twice", rc.Envelope.MessageId)
		}
		ids[rc.Envelope.MessageId] = true
		if rc.Kind == session.KindCancel || rc.Kind == session.KindSuspend || rc.Kind == session.KindResume {
			continue // the runtime's own envelopes are not participant activity
		}
		a := act[rc.Envelope.Sender]
		a.ParticipantID = rc.Envelope.Sender
		a.MessageCount++
		a.LastMessageMs = rc.AcceptedAtMs
		act[rc.Envelope.Sender] = a
	}
	seen := s.SeenIDs()
	if len(seen) != len(ids) {
		t.Fatalf("dedup set %v, history ids %v", seen, ids)
	}
	for _, id := range seen {
		if !ids[id] {
			t.Fatalf("dedup set has %q, which no record holds", id)
		}
	}
	got := s.Activity()
	if len(got) != len(act) {
		t.Fatalf("activity %v, history implies %v", got, act)
	}
	for _, a := range got {
		if act[a.ParticipantID] != a {
			t.Fatalf("activity %+v, history implies %+v", a, act[a.ParticipantID])
		}
	}
	if (terminalAt >= 0) != s.Status.Terminal() {
		t.Fatalf("status %s but terminal record index %d", s.Status, terminalAt)
	}
}

func FuzzStep(f *testing.F) {
	// Seeds: a happy path, a race of commitments, expiry, cancellation and
	// a few random runs.
	f.Add([]byte{0, 0, 0, 0, 1, 1, 3, 0, 2, 2, 1, 0, 6, 0, 0, 0, 0, 0})
	f.Add([]byte{2, 9, 0, 0, 1, 2, 0, 2, 3, 6, 0, 4, 0, 0, 0, 7, 0, 5, 0, 0, 0})
	f.Add([]byte{1, 1, 1, 0, 1, 1, 1, 13, 1, 0, 2, 3, 1, 16, 0, 1, 1, 1})
	f.Add([]byte{0, 0, 0, 0, 2, 1, 14, 0, 0, 14, 0, 1, 0, 2, 2, 9, 0, 0, 3})
	f.Add([]byte{3, 0, 2, 5, 1, 1, 1, 11, 2, 3, 4, 17, 1, 1, 1, 10, 0, 1, 3, 2, 1, 2, 8, 0, 0, 6, 1, 2, 3})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 8; i++ {
		b := make([]byte, 64+rng.IntN(256))
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		drive(t, data)
	})
}
