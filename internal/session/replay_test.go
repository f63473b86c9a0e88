package session_test

// Replay equivalence and divergence detection (RFC-MACP-0003 §1-3;
// checklist DET-1, DET-3, DET-7, TTL-3, IDEM-5 "snapshots are caches, log
// is truth").

import (
	"math/rand/v2"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

// seedBytes returns n pseudo-random bytes for the fuzz driver.
func seedBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 0x6d616370))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}

// RFC-MACP-0003 §1 "Replaying identical accepted Envelope sequences under
// identical ... versions MUST reproduce identical session state transitions
// and acceptance/rejection behavior": every accepted Record of a random run
// replays (Restore + Apply) into the same Metadata, Status, Seq, SeenIDs,
// ModeProjection and Resolution (drive checks the comparison).
func TestReplayRandomRuns(t *testing.T) {
	var resolved, expired, cancelled, open, records, accepted, rejected, dups int
	for seed := uint64(0); seed < 500; seed++ {
		st := drive(t, seedBytes(seed, 64+int(seed%512)))
		records += len(st.history)
		accepted += st.accepted
		rejected += st.rejected
		dups += st.dups
		switch {
		case st.s.Status == session.Resolved:
			resolved++
		case st.s.Cancellation != nil:
			cancelled++
		case st.s.Status == session.Expired:
			expired++
		default:
			open++
		}
	}
	t.Logf("500 runs: %d records, %d accepted, %d rejected, %d duplicates; final resolved %d, expired %d, cancelled %d, open %d",
		records, accepted, rejected, dups, resolved, expired, cancelled, open)
	// The generator must reach every outcome, or the test proves little.
	if resolved == 0 || expired == 0 || cancelled == 0 || open == 0 || dups == 0 || accepted < 500 {
		t.Fatalf("random runs do not cover the lifecycle: resolved %d expired %d cancelled %d open %d dups %d accepted %d",
			resolved, expired, cancelled, open, dups, accepted)
	}
}

// fixedHistory builds a history with every record kind's neighbours: start,
// notes, a rejected and a duplicate message (not recorded) and a terminal
// record of the given kind.
func fixedHistory(t *testing.T, terminal session.Kind) (*session.Session, []session.Record) {
	t.Helper()
	p := startPayload()
	p.ContextId = "ctx"
	p.Extensions = map[string][]byte{"x-b": {1}, "x-a": {2}}
	p.Roots = []*macpv1.Root{{Uri: "file:///r"}}
	s, start := mustStartWith(t, p)
	h := []session.Record{start}
	h = append(h, mustAccept(t, s, note("n1", alice), t0+1))
	s.Step(msg(typeBlock, "b1", bob, nil), t0+2, session.DefaultLimits())
	s.Step(note("n1", alice), t0+3, session.DefaultLimits())
	h = append(h, mustAccept(t, s, note("n2", bob), t0+4))
	switch terminal {
	case session.KindMessage:
		h = append(h, mustAccept(t, s, commit(t, "c1", initiator, commitPayload()), t0+5))
	case session.KindCancel:
		out := s.Cancel(initiator, "bye", "cancel-1", t0+5)
		h = append(h, out.Records...)
	case session.KindExpire:
		out := s.Step(note("late", alice), s.DeadlineMs+3, session.DefaultLimits())
		h = append(h, out.Records...)
	}
	return s, h
}

func TestReplayEachTerminal(t *testing.T) {
	for _, k := range []session.Kind{0, session.KindMessage, session.KindCancel, session.KindExpire} {
		t.Run(k.String(), func(t *testing.T) {
			live, h := fixedHistory(t, k)
			rs, err := replay(t, h)
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			if d := snap(live).diff(snap(rs)); d != "" {
				t.Fatalf("replay differs: %s", d)
			}
			// Everything Metadata does not show.
			if rs.Intent != live.Intent || rs.ContextID != live.ContextID || !equalStrings(rs.ExtensionKeys, live.ExtensionKeys) ||
				len(rs.Roots) != 1 || rs.StartedAtMs != live.StartedAtMs || rs.Binding.PolicyVersion != live.Binding.PolicyVersion {
				t.Fatalf("binding differs after replay")
			}
			// TTL-3: replay uses the recorded deadline and times; the
			// replayed session decides later input like the live one.
			for _, at := range []int64{t0 + 6, live.DeadlineMs + 10} {
				e := note("after", alice)
				a, b := live.Step(proto.Clone(e).(*macpv1.Envelope), at, session.DefaultLimits()),
					rs.Step(proto.Clone(e).(*macpv1.Envelope), at, session.DefaultLimits())
				if a.Accepted() != b.Accepted() || (a.Err == nil) != (b.Err == nil) || len(a.Records) != len(b.Records) {
					t.Fatalf("live %+v / replayed %+v", a, b)
				}
			}
		})
	}
}

// Replay does not depend on the deployment's payload limit (replayLimits):
// history accepted under a larger limit stays valid.
func TestReplayIgnoresPayloadLimit(t *testing.T) {
	s, start := mustStart(t)
	big := msg(typeNote, "big", alice, make([]byte, 4096))
	rec := mustAccept(t, s, big, t0+1)
	rs, err := session.Restore(start, modes())
	if err != nil {
		t.Fatal(err)
	}
	lim := session.DefaultLimits()
	lim.MaxPayloadBytes = 16
	if err := rs.Apply(rec, lim); err != nil {
		t.Fatalf("Apply under a smaller payload limit: %v", err)
	}
}

// Replay never consults live registries (RFC-MACP-0003 §3; StartInfo doc):
// a session bound to a policy that is no longer registered still replays
// with the recorded descriptor.
func TestReplayUsesRecordedPolicy(t *testing.T) {
	p := startPayload()
	p.PolicyVersion = policyStrict
	s, start := mustStartWith(t, p)
	h := []session.Record{start,
		mustAccept(t, s, note("n1", alice), t0+1),
		mustAccept(t, s, note("n2", alice), t0+2),
		mustAccept(t, s, commit(t, "c1", initiator, commitPayload()), t0+3)}
	rs, err := replay(t, h) // replay uses modes() only; no policy lookup exists
	if err != nil {
		t.Fatal(err)
	}
	if rs.Binding.PolicyVersion != policyStrict || rs.Binding.Policy.Descriptor != policies()[policyStrict] || rs.Status != session.Resolved {
		t.Fatalf("replayed binding %+v", rs.Binding)
	}
}

// A history that the core would not have produced must be reported, not
// silently folded in (package doc: "a record that would now be rejected is
// reported as divergence"; RFC-MACP-0003 §4).
func TestReplayDetectsTampering(t *testing.T) {
	// Base history: start (1), n1 (2), n2 (3), open.
	base := func(t *testing.T) []session.Record {
		_, h := fixedHistory(t, 0)
		return h
	}
	next := func(h []session.Record) uint64 { return h[len(h)-1].Seq + 1 }
	rec := func(h []session.Record, e *macpv1.Envelope, at int64) session.Record {
		return session.Record{SessionID: sid, Seq: next(h), Kind: session.KindMessage, AcceptedAtMs: at, Envelope: e}
	}
	cases := map[string]func(t *testing.T) []session.Record{
		"gap in seq": func(t *testing.T) []session.Record {
			h := base(t)
			r := rec(h, note("n3", alice), t0+10)
			r.Seq++
			return append(h, r)
		},
		"repeated seq": func(t *testing.T) []session.Record {
			h := base(t)
			return append(h, h[len(h)-1])
		},
		"seq goes back": func(t *testing.T) []session.Record {
			h := base(t)
			r := rec(h, note("n3", alice), t0+10)
			r.Seq = 2
			return append(h, r)
		},
		"message id accepted twice": func(t *testing.T) []session.Record {
			h := base(t)
			return append(h, rec(h, note("n1", alice), t0+10))
		},
		"mode-rejected message": func(t *testing.T) []session.Record {
			h := base(t)
			return append(h, rec(h, msg(typeBlock, "b9", alice, nil), t0+10))
		},
		"forbidden sender": func(t *testing.T) []session.Record {
			h := base(t)
			return append(h, rec(h, note("n9", mallory), t0+10))
		},
		"commitment by non-initiator": func(t *testing.T) []session.Record {
			h := base(t)
			return append(h, rec(h, commit(t, "c9", alice, commitPayload()), t0+10))
		},
		"message at the deadline": func(t *testing.T) []session.Record {
			h := base(t)
			return append(h, rec(h, note("n9", alice), t0+defaultTTL))
		},
		"message after resolution": func(t *testing.T) []session.Record {
			_, h := fixedHistory(t, session.KindMessage)
			return append(h, rec(h, note("n9", alice), t0+10))
		},
		"message after expiry": func(t *testing.T) []session.Record {
			_, h := fixedHistory(t, session.KindExpire)
			return append(h, rec(h, note("n9", alice), t0+10))
		},
		"second SessionStart": func(t *testing.T) []session.Record {
			h := base(t)
			e := startEnv(t, startPayload())
			e.MessageId = "again"
			return append(h, rec(h, e, t0+10))
		},
		"nil envelope": func(t *testing.T) []session.Record {
			h := base(t)
			return append(h, rec(h, nil, t0+10))
		},
		"record of another session": func(t *testing.T) []session.Record {
			h := base(t)
			r := rec(h, note("n9", alice), t0+10)
			r.SessionID = sid2
			return append(h, r)
		},
		"start kind in the middle": func(t *testing.T) []session.Record {
			h := base(t)
			r := rec(h, note("n9", alice), t0+10)
			r.Kind = session.KindStart
			return append(h, r)
		},
		"unknown kind": func(t *testing.T) []session.Record {
			h := base(t)
			r := rec(h, note("n9", alice), t0+10)
			r.Kind = 99
			return append(h, r)
		},
		"expire before the deadline": func(t *testing.T) []session.Record {
			h := base(t)
			return append(h, session.Record{SessionID: sid, Seq: next(h), Kind: session.KindExpire, AcceptedAtMs: t0 + defaultTTL - 1})
		},
		"expire of another session": func(t *testing.T) []session.Record {
			h := base(t)
			return append(h, session.Record{SessionID: sid2, Seq: next(h), Kind: session.KindExpire, AcceptedAtMs: t0 + defaultTTL})
		},
		"expire after resolution": func(t *testing.T) []session.Record {
			_, h := fixedHistory(t, session.KindMessage)
			return append(h, session.Record{SessionID: sid, Seq: next(h), Kind: session.KindExpire, AcceptedAtMs: t0 + defaultTTL})
		},
		"expire carrying an envelope": func(t *testing.T) []session.Record {
			h := base(t)
			return append(h, session.Record{SessionID: sid, Seq: next(h), Kind: session.KindExpire, AcceptedAtMs: t0 + defaultTTL,
				Envelope: note("n9", alice)})
		},
	}
	// Cancel records that Cancel would never have produced.
	cancelRec := func(t *testing.T, mod func(s *session.Session, e *macpv1.Envelope) int64) []session.Record {
		s, h := fixedHistory(t, 0)
		at := t0 + 10
		e := s.CancelEnvelope("cancel-9", initiator, "r", at)
		if mod != nil {
			at = mod(s, e)
		}
		return append(h, session.Record{SessionID: sid, Seq: next(h), Kind: session.KindCancel, AcceptedAtMs: at, Envelope: e})
	}
	cancelCases := map[string]func(s *session.Session, e *macpv1.Envelope) int64{
		"cancel by non-initiator": func(s *session.Session, e *macpv1.Envelope) int64 {
			e.Payload = marshal(t, &macpv1.SessionCancelPayload{Reason: "r", CancelledBy: alice})
			return t0 + 10
		},
		"cancel from a client sender": func(s *session.Session, e *macpv1.Envelope) int64 {
			e.Sender = initiator
			return t0 + 10
		},
		"cancel at the deadline": func(s *session.Session, e *macpv1.Envelope) int64 {
			return s.DeadlineMs
		},
		"cancel reusing a message id": func(s *session.Session, e *macpv1.Envelope) int64 {
			e.MessageId = "n1"
			return t0 + 10
		},
		"cancel with empty message id": func(s *session.Session, e *macpv1.Envelope) int64 {
			e.MessageId = ""
			return t0 + 10
		},
		"cancel of another mode": func(s *session.Session, e *macpv1.Envelope) int64 {
			e.Mode = "macp.mode.decision.v1"
			return t0 + 10
		},
		"cancel of another session": func(s *session.Session, e *macpv1.Envelope) int64 {
			e.SessionId = sid2
			return t0 + 10
		},
		"cancel with undecodable payload": func(s *session.Session, e *macpv1.Envelope) int64 {
			e.Payload = []byte{0xff, 0xff}
			return t0 + 10
		},
		"cancel of wrong type": func(s *session.Session, e *macpv1.Envelope) int64 {
			e.MessageType = typeNote
			return t0 + 10
		},
	}
	for name, mod := range cancelCases {
		cases[name] = func(t *testing.T) []session.Record { return cancelRec(t, mod) }
	}
	cases["cancel after resolution"] = func(t *testing.T) []session.Record {
		s, h := fixedHistory(t, session.KindMessage)
		e := s.CancelEnvelope("cancel-9", initiator, "r", t0+10)
		return append(h, session.Record{SessionID: sid, Seq: next(h), Kind: session.KindCancel, AcceptedAtMs: t0 + 10, Envelope: e})
	}
	cases["cancel without envelope"] = func(t *testing.T) []session.Record {
		h := base(t)
		return append(h, session.Record{SessionID: sid, Seq: next(h), Kind: session.KindCancel, AcceptedAtMs: t0 + 10})
	}
	// Sanity: the untampered cancel replays.
	if _, err := replay(t, cancelRec(t, nil)); err != nil {
		t.Fatalf("untampered cancel history: %v", err)
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			h := build(t)
			if _, err := replay(t, h[:len(h)-1]); err != nil {
				t.Fatalf("prefix must replay: %v", err)
			}
			_, err := replay(t, h)
			if err == nil {
				t.Fatalf("tampered history replayed without error")
			}
			if c := coord.CodeOf(err); c != coord.CodeInternalError {
				t.Fatalf("divergence reported as %v, want INTERNAL_ERROR", err)
			}
		})
	}
}

// Restore accepts only a well-formed start record that Start could have
// produced, under the same mode version (RFC-MACP-0003 §3 "Replay MUST use
// the same bound versions. Replaying under a newer policy or Mode version
// is not historical reconstruction").
func TestRestoreRejects(t *testing.T) {
	_, good := mustStart(t)
	if _, err := session.Restore(good, modes()); err != nil {
		t.Fatalf("Restore(good) = %v", err)
	}
	cp := func() session.Record {
		r := good
		r.Envelope = proto.Clone(good.Envelope).(*macpv1.Envelope)
		st := *good.Start
		r.Start = &st
		return r
	}
	withPayload := func(mod func(p *macpv1.SessionStartPayload)) session.Record {
		r := cp()
		var p macpv1.SessionStartPayload
		if err := proto.Unmarshal(r.Envelope.Payload, &p); err != nil {
			t.Fatal(err)
		}
		mod(&p)
		r.Envelope.Payload = marshal(t, &p)
		return r
	}
	cases := []struct {
		name  string
		rec   func() session.Record
		modes session.Modes
		want  coord.Code
	}{
		{"not a start kind", func() session.Record { r := cp(); r.Kind = session.KindMessage; return r }, nil, coord.CodeInternalError},
		{"seq 2", func() session.Record { r := cp(); r.Seq = 2; return r }, nil, coord.CodeInternalError},
		{"no envelope", func() session.Record { r := cp(); r.Envelope = nil; return r }, nil, coord.CodeInternalError},
		{"no start info", func() session.Record { r := cp(); r.Start = nil; return r }, nil, coord.CodeInternalError},
		{"undecodable payload", func() session.Record { r := cp(); r.Envelope.Payload = []byte{0xff}; return r }, nil, coord.CodeInternalError},
		{"mode not registered", cp, mode.NewRegistry(), coord.CodeModeNotSupported},
		{"mode version changed", cp, mode.NewRegistry(mode.Entry{Mode: testMode{version: "2.0.0"}}), coord.CodeModeNotSupported},
		{"record of another session", func() session.Record { r := cp(); r.SessionID = sid2; return r }, nil, coord.CodeInternalError},
		{"not a SessionStart envelope", func() session.Record { r := cp(); r.Envelope.MessageType = typeNote; return r }, nil, coord.CodeInternalError},
		{"empty sender", func() session.Record { r := cp(); r.Envelope.Sender = ""; return r }, nil, coord.CodeInternalError},
		{"deadline does not match timestamp + ttl", func() session.Record { r := cp(); r.Start.DeadlineMs += 1000; return r }, nil, coord.CodeInternalError},
		{"ttl 0", func() session.Record {
			return withPayload(func(p *macpv1.SessionStartPayload) { p.TtlMs = 0 })
		}, nil, coord.CodeInternalError},
		{"duplicate participants", func() session.Record {
			return withPayload(func(p *macpv1.SessionStartPayload) { p.Participants = []string{alice, alice} })
		}, nil, coord.CodeInternalError},
		{"no participants (mode start)", func() session.Record {
			return withPayload(func(p *macpv1.SessionStartPayload) { p.Participants = nil })
		}, nil, coord.CodeInternalError},
		{"empty configuration_version", func() session.Record {
			return withPayload(func(p *macpv1.SessionStartPayload) { p.ConfigurationVersion = "" })
		}, nil, coord.CodeInternalError},
		{"policy descriptor for another id", func() session.Record { r := cp(); r.Start.Policy = policies()[policyAny]; return r }, nil, coord.CodeInternalError},
		{"policy descriptor for another mode", func() session.Record {
			r := withPayload(func(p *macpv1.SessionStartPayload) { p.PolicyVersion = policyOther })
			r.Start.Policy = policies()[policyOther]
			return r
		}, nil, coord.CodeInternalError},
		{"invalid policy descriptor", func() session.Record {
			r := cp()
			r.Start.Policy = policy.Descriptor{ID: coord.DefaultPolicyID, Mode: "*", Rules: "{}", SchemaVersion: 7}
			return r
		}, nil, coord.CodeInternalError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.modes
			if m == nil {
				m = modes()
			}
			s, err := session.Restore(tc.rec(), m)
			if err == nil {
				t.Fatalf("Restore accepted it: %+v", s.Metadata())
			}
			wantCode(t, err, tc.want)
		})
	}
}

// Restore does not re-apply deployment limits or clock checks decided when
// the record was accepted: skew, the ttl cap, the participant cap, payload
// size (Restore doc; replayLimits).
func TestRestoreIgnoresDeploymentLimits(t *testing.T) {
	d := deps()
	d.Limits = session.Limits{} // nothing capped when it was accepted
	p := startPayload()
	p.TtlMs = 10 * session.DefaultLimits().MaxTTLMs
	p.Participants = make([]string, 1500)
	for i := range p.Participants {
		p.Participants[i] = "agent-" + string(rune('A'+i%26)) + "-" + itoa(i)
	}
	e := startEnv(t, p)
	e.TimestampUnixMs = t0 - 3600_000 // an hour of skew
	_, rec, err := session.Start(e, t0, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := session.Restore(rec, modes()); err != nil {
		t.Fatalf("Restore re-applied deployment limits: %v", err)
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
