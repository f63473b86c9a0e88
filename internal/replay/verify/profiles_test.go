package verify_test

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
	"github.com/macpd/macpd/internal/store/pebblestore"
)

// startAs starts a decision session bound to profile ("" = the default,
// April) with the SessionStart's max_suspend_ms.
func startAs(t *testing.T, id, profile string, maxSuspendMs int64) *builder {
	t.Helper()
	b := &builder{t: t, now: t0}
	env := &macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion, Mode: decMode, MessageType: coord.TypeSessionStart, MessageId: "start-" + id,
		SessionId: id, Sender: "coord", TimestampUnixMs: t0,
		Payload: marshal(&macpv1.SessionStartPayload{
			Intent: "pick", Participants: []string{"alice", "bob"}, ModeVersion: decision.New().Descriptor().ModeVersion,
			ConfigurationVersion: "cfg", TtlMs: 60_000, MaxSuspendMs: maxSuspendMs,
		}),
	}
	l := lim
	l.Profile = profile
	s, rec, err := session.Start(env, t0, session.Deps{Modes: modes(), Policies: policy.DefaultOnly{}, Limits: l})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	b.s, b.recs = s, []session.Record{rec}
	return b
}

func (b *builder) at(ms int64) *builder { b.now = ms; return b }

func (b *builder) proposeAs(who string) *builder {
	return b.send(who, "Proposal", marshal(&decisionv1.ProposalPayload{ProposalId: "p1", Option: "postgres"}))
}

func (b *builder) suspend() *builder {
	b.t.Helper()
	b.now += 10
	b.n++
	out := b.s.Suspend("coord", "waiting", "suspend-"+string(rune('a'+b.n)), b.now)
	if out.Err != nil {
		b.t.Fatalf("suspend: %v", out.Err)
	}
	b.recs = append(b.recs, out.Records...)
	return b
}

func (b *builder) resume() *builder {
	b.t.Helper()
	b.now += 10
	b.n++
	out := b.s.Resume("coord", "ready", "resume-"+string(rune('a'+b.n)), b.now)
	if out.Err != nil {
		b.t.Fatalf("resume: %v", out.Err)
	}
	b.recs = append(b.recs, out.Records...)
	return b
}

// expireCap expires a SUSPENDED session at the first instant past its cap.
func (b *builder) expireCap() *builder {
	b.t.Helper()
	due, ok := b.s.ExpiryMs()
	if !ok || b.s.Status != session.Suspended {
		b.t.Fatal("not suspended")
	}
	rec, ok := b.s.ExpireIfDue(due)
	if !ok {
		b.t.Fatal("not due at the cap")
	}
	b.recs = append(b.recs, rec)
	return b
}

// Session ids of the profile histories (UUID v4).
const (
	pLegacy      = "a0000000-0000-4000-8000-000000000001"
	pAprilCancel = "a0000000-0000-4000-8000-000000000002"
	pAprilSusp   = "a0000000-0000-4000-8000-000000000003"
	pAprilMoved  = "a0000000-0000-4000-8000-000000000004"
	pLatestCanc  = "a0000000-0000-4000-8000-000000000005"
	pLatestSusp  = "a0000000-0000-4000-8000-000000000006"
	pLatestCap   = "a0000000-0000-4000-8000-000000000007"
	pLatestRes   = "a0000000-0000-4000-8000-000000000008"
)

// profileHistories are sessions of both profiles produced by the core as
// the runtime would, in every state the suspension and cancellation rules
// give, with the status each must verify as.
func profileHistories(t *testing.T) (map[string][]session.Record, map[string]session.Status) {
	hs := map[string][]session.Record{
		pLegacy:      startAs(t, pLegacy, "", 0).proposeAs("alice").cancel().recs,
		pAprilCancel: startAs(t, pAprilCancel, coord.ProfileApril, 0).suspend().cancel().recs,
		pAprilSusp:   startAs(t, pAprilSusp, coord.ProfileApril, 1_000).proposeAs("alice").suspend().recs,
		pAprilMoved:  startAs(t, pAprilMoved, coord.ProfileApril, 0).suspend().at(t0 + 30_000).resume().proposeAs("alice").vote("bob").commit().recs,
		pLatestCanc:  startAs(t, pLatestCanc, coord.ProfileLatest, 0).proposeAs("alice").suspend().cancel().recs,
		pLatestSusp:  startAs(t, pLatestSusp, coord.ProfileLatest, 0).suspend().resume().suspend().recs,
		pLatestCap:   startAs(t, pLatestCap, coord.ProfileLatest, 500).suspend().expireCap().recs,
		pLatestRes:   startAs(t, pLatestRes, coord.ProfileLatest, 0).proposeAs("alice").suspend().at(t0 + 50_000).resume().recs,
	}
	// The legacy session: a record written before profiles existed.
	hs[pLegacy][0].Start.Profile = ""
	hs[pLegacy][0].Start.MaxSuspendMs = 0
	want := map[string]session.Status{
		pLegacy: session.Expired, pAprilCancel: session.Expired, pAprilSusp: session.Suspended, pAprilMoved: session.Resolved,
		pLatestCanc: session.Cancelled, pLatestSusp: session.Suspended, pLatestCap: session.Expired, pLatestRes: session.Open,
	}
	return hs, want
}

// verify over sessions of both profiles: every one verifies with its
// status (CANCELLED only under latest, SUSPENDED kept, a capped
// suspension EXPIRED), on memstore and Pebble, appended at once or record
// by record.
func TestVerifyBothProfiles(t *testing.T) {
	for name, open := range map[string]func() store.Store{
		"memstore":    func() store.Store { return memstore.New() },
		"pebblestore": func() store.Store { s, _ := pebblestore.Open("db", pebblestore.Options{FS: vfs.NewMem()}); return s },
	} {
		for fname, filler := range map[string]func(*testing.T, store.Store, map[string][]session.Record){
			"one append per session": fill,
			"one append per record":  fillEach,
		} {
			t.Run(name+"/"+fname, func(t *testing.T) {
				st := open()
				defer st.Close()
				hs, want := profileHistories(t)
				filler(t, st, hs)
				ok, failed, res := run(t, st, modes())
				if ok != len(hs) || failed != 0 {
					t.Fatalf("%d verified, %d failed: %+v", ok, failed, res)
				}
				for id, w := range want {
					if r := res[id]; r.Status != w || r.Records != uint64(len(hs[id])) {
						t.Fatalf("%s: %+v, want %s with %d records", id, r, w, len(hs[id]))
					}
				}
			})
		}
	}
}

// Histories of both profiles whose chain is intact but whose content the
// core would not produce fail verification, that session only.
func TestVerifyFindsForgedProfileHistories(t *testing.T) {
	for _, tc := range []struct {
		name, id, want string
		forge          func(recs []session.Record) []session.Record
	}{
		{"latest cancellation stored as EXPIRED", pLatestCanc, "became EXPIRED, replay says CANCELLED", func(recs []session.Record) []session.Record {
			last := &recs[len(recs)-1]
			last.Status = session.Expired
			md := proto.Clone(last.Final).(*macpv1.SessionMetadata)
			md.State = macpv1.SessionState_SESSION_STATE_EXPIRED
			last.Final = md
			return recs
		}},
		{"April cancellation stored as CANCELLED", pAprilCancel, "became CANCELLED, replay says EXPIRED", func(recs []session.Record) []session.Record {
			last := &recs[len(recs)-1]
			last.Status = session.Cancelled
			md := proto.Clone(last.Final).(*macpv1.SessionMetadata)
			md.State = macpv1.SessionState_SESSION_STATE_CANCELLED
			last.Final = md
			return recs
		}},
		{"profile rewritten from latest to April", pLatestCanc, "became CANCELLED, replay says EXPIRED", func(recs []session.Record) []session.Record {
			si := *recs[0].Start
			si.Profile = coord.ProfileApril
			recs[0].Start = &si
			return recs
		}},
		{"unknown profile", pLatestRes, `profile "2027-01"`, func(recs []session.Record) []session.Record {
			si := *recs[0].Start
			si.Profile = "2027-01"
			recs[0].Start = &si
			return recs
		}},
		{"resume with another banked TTL", pLatestRes, "banked_ms", func(recs []session.Record) []session.Record {
			r := &recs[len(recs)-1]
			env := proto.Clone(r.Envelope).(*macpv1.Envelope)
			var p macpv1.SessionResumePayload
			_ = proto.Unmarshal(env.Payload, &p)
			p.BankedMs += 1_000
			env.Payload = marshal(&p)
			r.Envelope = env
			return recs
		}},
		{"suspension by a participant", pLatestSusp, "only the initiator may suspend", func(recs []session.Record) []session.Record {
			r := &recs[1]
			env := proto.Clone(r.Envelope).(*macpv1.Envelope)
			env.Payload = marshal(&macpv1.SessionSuspendPayload{Reason: "waiting", SuspendedBy: "alice"})
			r.Envelope = env
			return recs
		}},
		{"suspend record that leaves the session OPEN", pAprilSusp, "became OPEN, replay says SUSPENDED", func(recs []session.Record) []session.Record {
			recs[len(recs)-1].Status = session.Open
			return recs
		}},
		{"cap expiry one millisecond early", pLatestCap, "expire record 3", func(recs []session.Record) []session.Record {
			recs[len(recs)-1].AcceptedAtMs--
			return recs
		}},
		{"a larger suspension cap", pLatestCap, "expire record 3", func(recs []session.Record) []session.Record {
			si := *recs[0].Start
			si.MaxSuspendMs++
			recs[0].Start = &si
			return recs
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := memstore.New()
			hs, _ := profileHistories(t)
			hs[tc.id] = tc.forge(hs[tc.id])
			fill(t, st, hs)
			ok, failed, res := run(t, st, modes())
			r := res[tc.id]
			if ok != len(hs)-1 || failed != 1 || r.OK() || !strings.Contains(r.Err.Error(), tc.want) {
				t.Fatalf("%d verified, %d failed; %s: %v (want %q)", ok, failed, tc.id, r.Err, tc.want)
			}
			t.Logf("%v", r.Err)
		})
	}
}
