package verify_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/replay/verify"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
	"github.com/macpd/macpd/internal/store/pebblestore"
	"github.com/macpd/macpd/internal/store/record"
)

var ctx = context.Background()

const (
	t0      = int64(1_760_000_000_000)
	decMode = "macp.mode.decision.v1"
	// Session ids (UUID v4).
	sidResolved  = "11111111-1111-4111-8111-111111111111"
	sidOpen      = "22222222-2222-4222-8222-222222222222"
	sidExpired   = "33333333-3333-4333-8333-333333333333"
	sidCancelled = "44444444-4444-4444-8444-444444444444"
)

func modes() *mode.Registry {
	return mode.NewRegistry(mode.Entry{Mode: decision.New(), Kind: mode.Standard, BuiltIn: true})
}

var lim = session.DefaultLimits()

// builder drives one decision session through the core and collects the
// records it produces, as the runtime would.
type builder struct {
	t    *testing.T
	s    *session.Session
	recs []session.Record
	now  int64
	n    int
}

func marshal(m proto.Message) []byte {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	return b
}

func start(t *testing.T, id string) *builder {
	t.Helper()
	b := &builder{t: t, now: t0}
	env := &macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion, Mode: decMode, MessageType: coord.TypeSessionStart, MessageId: "start-" + id,
		SessionId: id, Sender: "coord", TimestampUnixMs: t0,
		Payload: marshal(&macpv1.SessionStartPayload{
			Intent: "pick", Participants: []string{"alice", "bob"}, ModeVersion: decision.New().Descriptor().ModeVersion,
			ConfigurationVersion: "cfg", TtlMs: 60_000,
		}),
	}
	s, rec, err := session.Start(env, t0, session.Deps{Modes: modes(), Policies: policy.DefaultOnly{}, Limits: lim})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	b.s, b.recs = s, []session.Record{rec}
	return b
}

func (b *builder) send(sender, typ string, payload []byte) *builder {
	b.t.Helper()
	b.now += 10
	b.n++
	out := b.s.Step(&macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion, Mode: decMode, MessageType: typ, MessageId: fmt.Sprintf("m%d", b.n),
		SessionId: b.s.ID, Sender: sender, TimestampUnixMs: b.now, Payload: payload,
	}, b.now, lim)
	if !out.Accepted() {
		b.t.Fatalf("%s from %s: %v", typ, sender, out.Err)
	}
	b.recs = append(b.recs, out.Records...)
	return b
}

func (b *builder) propose() *builder {
	return b.send("coord", "Proposal", marshal(&decisionv1.ProposalPayload{ProposalId: "p1", Option: "postgres"}))
}

func (b *builder) vote(who string) *builder {
	return b.send(who, "Vote", marshal(&decisionv1.VotePayload{ProposalId: "p1", Vote: "APPROVE"}))
}

func (b *builder) commit() *builder {
	return b.send("coord", coord.TypeCommitment, marshal(&macpv1.CommitmentPayload{
		CommitmentId: "c1", Action: "decision.selected", AuthorityScope: "team", Reason: "approved",
		ModeVersion: b.s.Binding.ModeVersion, ConfigurationVersion: b.s.Binding.ConfigurationVersion, OutcomePositive: true,
	}))
}

func (b *builder) cancel() *builder {
	b.t.Helper()
	b.now += 10
	out := b.s.Cancel("coord", "no longer needed", "cancel-1", b.now)
	if out.Err != nil {
		b.t.Fatalf("cancel: %v", out.Err)
	}
	b.recs = append(b.recs, out.Records...)
	return b
}

func (b *builder) expire() *builder {
	b.t.Helper()
	rec, ok := b.s.ExpireIfDue(b.s.DeadlineMs + 1)
	if !ok {
		b.t.Fatal("not due")
	}
	b.recs = append(b.recs, rec)
	return b
}

// histories are four sessions: resolved, open, expired, cancelled.
func histories(t *testing.T) map[string][]session.Record {
	return map[string][]session.Record{
		sidResolved:  start(t, sidResolved).propose().vote("alice").commit().recs,
		sidOpen:      start(t, sidOpen).propose().vote("bob").recs,
		sidExpired:   start(t, sidExpired).propose().expire().recs,
		sidCancelled: start(t, sidCancelled).cancel().recs,
	}
}

func fill(t *testing.T, st store.Store, hs map[string][]session.Record) {
	t.Helper()
	for _, recs := range hs {
		if err := st.Append(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
}

func run(t *testing.T, st store.Store, m session.Modes) (ok, failed int, results map[string]verify.SessionResult) {
	t.Helper()
	results = map[string]verify.SessionResult{}
	var order []string
	ok, failed, err := verify.Verify(ctx, st, m, lim, func(r verify.SessionResult) {
		results[r.SessionID] = r
		order = append(order, r.SessionID)
	})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	for i := 1; i < len(order); i++ {
		if order[i-1] >= order[i] {
			t.Fatalf("reported out of id order: %v", order)
		}
	}
	return ok, failed, results
}

// fillEach appends every record on its own, as the runtime does for a
// session receiving one message at a time (pebblestore then writes an
// OPEN session's index entry with its first record only: the index lags
// the history, and readers take the tip from the last record).
func fillEach(t *testing.T, st store.Store, hs map[string][]session.Record) {
	t.Helper()
	for _, recs := range hs {
		for _, r := range recs {
			if err := st.Append(ctx, []session.Record{r}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestVerifyGoodStores(t *testing.T) {
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
				hs := histories(t)
				filler(t, st, hs)
				ok, failed, res := run(t, st, modes())
				if ok != 4 || failed != 0 {
					t.Fatalf("%d verified, %d failed: %+v", ok, failed, res)
				}
				want := map[string]session.Status{sidResolved: session.Resolved, sidOpen: session.Open, sidExpired: session.Expired, sidCancelled: session.Expired}
				for id, st := range want {
					r := res[id]
					if r.Status != st || r.Records != uint64(len(hs[id])) || len(r.FinalHash) != 32 {
						t.Fatalf("%s: %+v", id, r)
					}
				}
				// The final hash is the last record's hash, and reads as sha256:<hex>.
				for _, id := range []string{sidResolved, sidOpen} {
					var last session.Record
					_ = st.Read(ctx, id, 1, func(r session.Record) error { last = r; return nil })
					if got := verify.HashString(res[id].FinalHash); got != verify.HashString(last.Hash) || !strings.HasPrefix(got, "sha256:") || len(got) != 7+64 {
						t.Fatalf("%s: final hash %s", id, got)
					}
				}
			})
		}
	}
}

// A byte flipped in one stored record value (written straight into
// Pebble, bypassing the store's codec) fails that session only, named.
func TestVerifyFindsFlippedByte(t *testing.T) {
	fs := vfs.NewMem()
	st, err := pebblestore.Open("db", pebblestore.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, st, histories(t))
	_ = st.Close()
	db, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	k := pebblestore.RecordKey(sidExpired, 2)
	v, closer, err := db.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	v = append([]byte(nil), v...)
	closer.Close()
	v[10] ^= 0x04
	if err := db.Set(k, v, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	st, err = pebblestore.Open("db", pebblestore.Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ok, failed, res := run(t, st, modes())
	if ok != 3 || failed != 1 {
		t.Fatalf("%d verified, %d failed", ok, failed)
	}
	r := res[sidExpired]
	if !errors.Is(r.Err, store.ErrCorrupt) || !strings.Contains(r.Err.Error(), sidExpired) || !strings.Contains(r.Err.Error(), "record 2") {
		t.Fatalf("failed session: %+v", r)
	}
}

// A history whose chain is intact (re-written through a store, so every
// hash is right) but whose content the core would not accept fails replay.
func TestVerifyFindsForgedHistories(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		forge      func(recs []session.Record) []session.Record
	}{
		{"vote from a non-participant", "replay", func(recs []session.Record) []session.Record {
			r := recs[2]
			env := proto.Clone(r.Envelope).(*macpv1.Envelope)
			env.Sender = "mallory"
			r.Envelope = env
			recs[2] = r
			return recs
		}},
		{"final metadata differs", "final metadata", func(recs []session.Record) []session.Record {
			r := recs[len(recs)-1]
			md := proto.Clone(r.Final).(*macpv1.SessionMetadata)
			md.ParticipantActivity[0].MessageCount++
			r.Final = md
			recs[len(recs)-1] = r
			return recs
		}},
		{"status says resolved too early", "replay", func(recs []session.Record) []session.Record {
			recs[1].Status = session.Resolved
			return recs
		}},
		{"final metadata on an open record", "final metadata", func(recs []session.Record) []session.Record {
			recs[1].Final = proto.Clone(recs[len(recs)-1].Final).(*macpv1.SessionMetadata)
			return recs
		}},
		{"terminal record without final metadata", "without final metadata", func(recs []session.Record) []session.Record {
			recs[len(recs)-1].Final = nil
			return recs
		}},
		{"record after the end", "replay", func(recs []session.Record) []session.Record {
			extra := recs[2]
			extra.Seq = uint64(len(recs) + 1)
			return append(recs, extra)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := memstore.New()
			hs := histories(t)
			hs[sidResolved] = tc.forge(hs[sidResolved])
			fill(t, st, hs)
			ok, failed, res := run(t, st, modes())
			r := res[sidResolved]
			if ok != 3 || failed != 1 || r.OK() || !strings.Contains(r.Err.Error(), tc.want) {
				t.Fatalf("%d verified, %d failed; %s: %v (want %q)", ok, failed, sidResolved, r.Err, tc.want)
			}
			t.Logf("%v", r.Err)
		})
	}
}

// A session whose mode this build does not know fails (the replay must
// run under the bound mode); StoredModes adds durable extension modes.
func TestVerifyUnknownModeAndStoredModes(t *testing.T) {
	st := memstore.New()
	fill(t, st, histories(t))
	empty := mode.NewRegistry()
	ok, failed, _ := run(t, st, empty)
	if ok != 0 || failed != 4 {
		t.Fatalf("without modes: %d verified, %d failed", ok, failed)
	}
	// A stored registration (the runtime's format) of a mode this build
	// lacks makes it available for replay.
	ext := &macpv1.ModeDescriptor{Mode: "ext.test.v1", ModeVersion: "1.0.0", Title: "ext", MessageTypes: []string{"SessionStart", "Note", "Commitment"}, TerminalMessageTypes: []string{"Commitment"}}
	if err := st.PutMeta(ctx, "mode/ext.test.v1", append([]byte{'E'}, marshal(ext)...)); err != nil {
		t.Fatal(err)
	}
	reg, err := verify.StoredModes(ctx, st, modes())
	if err != nil {
		t.Fatalf("StoredModes: %v", err)
	}
	if _, ok := reg.Lookup("ext.test.v1"); !ok {
		t.Fatal("stored extension mode not loaded")
	}
	if _, ok := reg.Lookup(decMode); !ok {
		t.Fatal("built-in mode lost")
	}
}

// The runtime-independent checks on a quarantined summary: it fails.
func TestVerifyQuarantined(t *testing.T) {
	st := quarantining{Store: memstore.New(), id: sidOpen}
	fill(t, st, histories(t))
	ok, failed, res := run(t, st, modes())
	if ok != 3 || failed != 1 || !errors.Is(res[sidOpen].Err, store.ErrCorrupt) {
		t.Fatalf("%d verified, %d failed: %v", ok, failed, res[sidOpen].Err)
	}
}

type quarantining struct {
	store.Store
	id string
}

func (q quarantining) List(ctx context.Context, fn func(store.SessionInfo) error) error {
	return q.Store.List(ctx, func(info store.SessionInfo) error {
		if info.SessionID == q.id {
			info.Quarantined = record.Corruptf(q.id, 2, "test").Error()
		}
		return fn(info)
	})
}

type quiet struct{}

func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (quiet) Fatalf(f string, a ...any) {
	panic(fmt.Sprintf(f, a...))
}
