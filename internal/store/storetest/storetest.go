// Package storetest is the one shared suite every store.Store passes
// (memstore, and pebblestore on an in-memory filesystem and on disk).
//
// A store's test calls
//
//	storetest.Run(t, func(t *testing.T) store.Store { return memstore.New() })
//
// and a durable store adds a Reopen option, so the suite can close the
// store mid-test, open the same storage again and check that every record
// survived:
//
//	storetest.Run(t, open, storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
//		dir := s.(*pebblestore.Store).Dir()
//		if err := s.Close(); err != nil { t.Fatal(err) }
//		s2, err := pebblestore.Open(dir, pebblestore.Options{})
//		if err != nil { t.Fatal(err) }
//		return s2
//	}))
//
// open is called once per subtest and must return an empty store; the suite
// closes what it opens (Close errors other than ErrClosed fail the test).
//
// What the suite checks (store package doc, Store interface):
//   - Append/Read round trip preserving every field of session.Record,
//     including StartInfo and envelope payload bytes, for every Kind;
//   - Seq continuity: a session's first record is 1, then no gaps or
//     repeats; a violation is ErrConflict and nothing of the batch is
//     written (atomicity), also when the bad record belongs to another
//     session of the same batch;
//   - batches mixing sessions; Read from the middle and past the end;
//     session ids that are prefixes of each other;
//   - ErrNotFound for unknown sessions (Read, LastSeq); LastSeq;
//   - Sessions in id order; fn errors propagate from Read and Sessions and
//     stop the iteration;
//   - concurrent appends to many sessions, concurrent readers, and
//     competing appends to one session (exactly one wins each sequence
//     number) — run with -race;
//   - the integrity chain on every history the suite reads back: record 1's
//     PrevHash is 32 zero bytes, each PrevHash is the Hash before it, each
//     Hash is record.HashOf(PrevHash, the appended record); hashes do not
//     depend on batching, Read from the middle or caller-supplied hashes;
//   - Info (LastSeq, Status, LastAcceptedMs, LastHash, Final) after every
//     append, List in id order with the same summaries, ListOpen (the
//     OPEN and SUSPENDED sessions of List, in id order, with List's summaries; a session
//     leaves it when it ends, a purged one is gone, a new one joins it,
//     also in batches that mix sessions and across a reopen), Purge of terminal
//     sessions only (whole session, prefix-sharing ids untouched), the meta
//     key-value space (prefix listing, overwrite, delete, copies), invalid
//     session ids (ErrInvalid);
//   - sessions of both profiles (profiles.go): start records with Profile
//     "" (written before profiles), "2026-04" and "2026-09" and
//     MaxSuspendMs, SessionSuspend/SessionResume records, cancellations
//     ending EXPIRED (April) or CANCELLED (latest), a suspension ended by
//     its cap, round-trip exactly; Info follows SUSPENDED/OPEN; ListOpen
//     lists SUSPENDED sessions and not CANCELLED ones; Purge refuses a
//     SUSPENDED session and takes a CANCELLED one; with WithReopen, across
//     a reopen;
//   - Close: later calls return ErrClosed;
//   - with WithReopen: records, LastSeq, Sessions, Info, List, hashes, meta,
//     purges and the continuity rule survive a close and reopen, and the
//     chain continues across it.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/record"
	"google.golang.org/protobuf/proto"
)

// Reopener closes s and returns a store over the same underlying storage.
type Reopener func(t *testing.T, s store.Store) store.Store

// Option configures Run.
type Option func(*config)

type config struct {
	reopen Reopener
}

// WithReopen enables the reopen checks for a durable store.
func WithReopen(r Reopener) Option { return func(c *config) { c.reopen = r } }

// Run runs the shared suite against the stores open returns.
func Run(t *testing.T, open func(t *testing.T) store.Store, opts ...Option) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	h := &harness{open: open, cfg: cfg}
	t.Run("RoundTripEveryField", h.roundTrip)
	t.Run("EmptyAppend", h.emptyAppend)
	t.Run("FirstRecordMustBeOne", h.firstRecordMustBeOne)
	t.Run("ContinuityConflicts", h.continuity)
	t.Run("BatchAtomicity", h.batchAtomicity)
	t.Run("MixedSessionBatch", h.mixedBatch)
	t.Run("ReadFrom", h.readFrom)
	t.Run("PrefixSessionIDs", h.prefixIDs)
	t.Run("NotFound", h.notFound)
	t.Run("SessionsInOrder", h.sessionsInOrder)
	t.Run("CallbackErrors", h.callbackErrors)
	t.Run("LargeRecords", h.largeRecords)
	t.Run("ConcurrentAppends", h.concurrentAppends)
	t.Run("CompetingAppends", h.competingAppends)
	t.Run("HashChain", h.hashChain)
	t.Run("InfoTracking", h.infoTracking)
	t.Run("List", h.list)
	t.Run("ListOpen", h.listOpen)
	t.Run("Purge", h.purge)
	t.Run("ProfilesRoundTrip", h.profilesRoundTrip)
	t.Run("ProfilesOpenSet", h.profilesOpenSet)
	t.Run("Meta", h.meta)
	t.Run("InvalidSessionID", h.invalidSessionID)
	t.Run("Close", h.close)
	if cfg.reopen != nil {
		t.Run("Reopen", h.reopenSurvives)
		t.Run("ReopenContinuity", h.reopenContinuity)
		t.Run("ReopenInfoChainMeta", h.reopenInfoChainMeta)
	}
}

type harness struct {
	open func(t *testing.T) store.Store
	cfg  config
}

var ctx = context.Background()

// fresh opens a store that is closed when the test ends.
func (h *harness) fresh(t *testing.T) *handle {
	t.Helper()
	s := h.open(t)
	if s == nil {
		t.Fatal("open returned nil")
	}
	hd := &handle{s: s}
	t.Cleanup(func() {
		if err := hd.s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return hd
}

// handle lets reopen swap the store under a test's cleanup.
type handle struct{ s store.Store }

func (h *harness) reopen(t *testing.T, hd *handle) {
	t.Helper()
	hd.s = h.cfg.reopen(t, hd.s)
	if hd.s == nil {
		t.Fatal("reopen returned nil")
	}
}

// ---- record builders ----------------------------------------------------------

// Session ids used by the suite. idA is a prefix of idAB (key-encoding
// trap for ordered key-value stores); order: idA < idAB < idB < idC.
const (
	idA  = "3f2b8c1e-9a4d-4f6b-8c2e-1d5a7b9c0e3f"
	idAB = "3f2b8c1e-9a4d-4f6b-8c2e-1d5a7b9c0e3f0"
	idB  = "7a1b2c3d-0000-4000-8000-000000000001"
	idC  = "zzzzzzzzzzzzzzzzzzzzzz"
)

// startRec is a fully populated KindStart record.
func startRec(id string, at int64) session.Record {
	payload, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&macpv1.SessionStartPayload{
		Intent: "intent ✓", Participants: []string{"alice", "bob"}, ModeVersion: "1.0.0",
		ConfigurationVersion: "cfg", PolicyVersion: "policy.custom", TtlMs: 60_000,
		Roots: []*macpv1.Root{{Uri: "file:///r", Name: "r"}}, ContextId: "ctx",
		Extensions: map[string][]byte{"x-a": {0, 1, 2}},
	})
	return session.Record{
		SessionID:    id,
		Seq:          1,
		Kind:         session.KindStart,
		AcceptedAtMs: at,
		Envelope: &macpv1.Envelope{
			MacpVersion: "1.0", Mode: "macp.mode.decision.v1", MessageType: "SessionStart", MessageId: "m-start-" + id,
			SessionId: id, Sender: "initiator", TimestampUnixMs: at - 3, Payload: payload,
		},
		Status: session.Open,
		Start: &session.StartInfo{
			Policy: policy.Descriptor{
				ID: "policy.custom", Mode: "macp.mode.decision.v1", Description: "a description\nwith lines",
				Rules: `{"commitment":{"authority":"any_participant"},"voting":{"algorithm":"majority"}}`, SchemaVersion: 1,
			},
			DeadlineMs: at - 3 + 60_000,
		},
	}
}

// msgRec is a KindMessage record whose payload bytes include every byte
// value at least once for seq > 0.
func msgRec(id string, seq uint64, at int64) session.Record {
	p := make([]byte, 0, 300)
	for i := 0; i < 256; i++ {
		p = append(p, byte(i+int(seq)))
	}
	return session.Record{
		SessionID: id, Seq: seq, Kind: session.KindMessage, AcceptedAtMs: at, Status: session.Open,
		Envelope: &macpv1.Envelope{
			MacpVersion: "1.0", Mode: "macp.mode.decision.v1", MessageType: "Proposal",
			MessageId: fmt.Sprintf("m-%d", seq), SessionId: id, Sender: "alice", TimestampUnixMs: -1, Payload: p,
		},
	}
}

func cancelRec(id string, seq uint64, at int64) session.Record {
	payload, _ := proto.Marshal(&macpv1.SessionCancelPayload{Reason: "r", CancelledBy: "initiator"})
	return session.Record{
		SessionID: id, Seq: seq, Kind: session.KindCancel, AcceptedAtMs: at,
		Status: session.Expired, Final: finalMD(id, session.Expired, at),
		Envelope: &macpv1.Envelope{
			MacpVersion: "1.0", Mode: "macp.mode.decision.v1", MessageType: "SessionCancel",
			MessageId: fmt.Sprintf("cancel-%d", seq), SessionId: id, Sender: "_runtime", TimestampUnixMs: at, Payload: payload,
		},
	}
}

func expireRec(id string, seq uint64, at int64) session.Record {
	return session.Record{
		SessionID: id, Seq: seq, Kind: session.KindExpire, AcceptedAtMs: at,
		Status: session.Expired, Final: finalMD(id, session.Expired, at),
	}
}

// resolveRec is a KindMessage record that resolved the session.
func resolveRec(id string, seq uint64, at int64) session.Record {
	r := msgRec(id, seq, at)
	r.Envelope.MessageType = "Commitment"
	r.Status = session.Resolved
	r.Final = finalMD(id, session.Resolved, at)
	return r
}

// finalMD is a fully populated terminal SessionMetadata.
func finalMD(id string, st session.Status, at int64) *macpv1.SessionMetadata {
	return &macpv1.SessionMetadata{
		SessionId: id, Mode: "macp.mode.decision.v1", State: st.Proto(), StartedAtUnixMs: at - 100,
		ExpiresAtUnixMs: at + 60_000, ModeVersion: "1.0.0", ConfigurationVersion: "cfg", PolicyVersion: "policy.custom",
		Participants: []string{"alice", "bob"}, Initiator: "initiator", ContextId: "ctx", ExtensionKeys: []string{"x-a"},
		ParticipantActivity: []*macpv1.ParticipantActivity{
			{ParticipantId: "alice", LastMessageAtUnixMs: at - 1, MessageCount: 3},
			{ParticipantId: "bob", LastMessageAtUnixMs: at - 2, MessageCount: 1},
		},
	}
}

// history returns records 1..n of a session: a start, messages and, when
// terminal is non-zero, a terminal record of that kind as record n
// (KindMessage: a resolving Commitment).
func history(id string, n int, terminal session.Kind) []session.Record {
	at := int64(1_760_000_000_000)
	out := []session.Record{startRec(id, at)}
	for seq := uint64(2); seq <= uint64(n); seq++ {
		at += 7
		switch {
		case seq == uint64(n) && terminal == session.KindCancel:
			out = append(out, cancelRec(id, seq, at))
		case seq == uint64(n) && terminal == session.KindExpire:
			out = append(out, expireRec(id, seq, at))
		case seq == uint64(n) && terminal == session.KindMessage:
			out = append(out, resolveRec(id, seq, at))
		default:
			out = append(out, msgRec(id, seq, at))
		}
	}
	return out[:n]
}

// ---- comparisons ----------------------------------------------------------------

// diffRecord describes how got differs from want, or returns "".
func diffRecord(want, got session.Record) string {
	var d []string
	if want.SessionID != got.SessionID {
		d = append(d, fmt.Sprintf("SessionID %q != %q", got.SessionID, want.SessionID))
	}
	if want.Seq != got.Seq {
		d = append(d, fmt.Sprintf("Seq %d != %d", got.Seq, want.Seq))
	}
	if want.Kind != got.Kind {
		d = append(d, fmt.Sprintf("Kind %s != %s", got.Kind, want.Kind))
	}
	if want.AcceptedAtMs != got.AcceptedAtMs {
		d = append(d, fmt.Sprintf("AcceptedAtMs %d != %d", got.AcceptedAtMs, want.AcceptedAtMs))
	}
	switch {
	case (want.Envelope == nil) != (got.Envelope == nil):
		d = append(d, fmt.Sprintf("Envelope nil=%v, want nil=%v", got.Envelope == nil, want.Envelope == nil))
	case want.Envelope != nil:
		if !proto.Equal(want.Envelope, got.Envelope) {
			d = append(d, fmt.Sprintf("Envelope %v != %v", got.Envelope, want.Envelope))
		}
		if string(want.Envelope.Payload) != string(got.Envelope.Payload) {
			d = append(d, "payload bytes differ")
		}
	}
	switch {
	case (want.Start == nil) != (got.Start == nil):
		d = append(d, fmt.Sprintf("Start nil=%v, want nil=%v", got.Start == nil, want.Start == nil))
	case want.Start != nil && *want.Start != *got.Start:
		d = append(d, fmt.Sprintf("Start %+v != %+v", *got.Start, *want.Start))
	}
	if want.Status != got.Status {
		d = append(d, fmt.Sprintf("Status %s != %s", got.Status, want.Status))
	}
	if (want.Final == nil) != (got.Final == nil) || !proto.Equal(want.Final, got.Final) {
		d = append(d, fmt.Sprintf("Final %v != %v", got.Final, want.Final))
	}
	return strings.Join(d, "; ")
}

// readAll reads a session from seq from.
func readAll(t *testing.T, s store.Store, id string, from uint64) []session.Record {
	t.Helper()
	var out []session.Record
	if err := s.Read(ctx, id, from, func(r session.Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatalf("Read(%s, %d): %v", id, from, err)
	}
	return out
}

// wantHistory checks that the store holds exactly want for its session.
func wantHistory(t *testing.T, s store.Store, want []session.Record) {
	t.Helper()
	id := want[0].SessionID
	got := readAll(t, s, id, 1)
	if len(got) != len(want) {
		t.Fatalf("session %s: read %d records, want %d", id, len(got), len(want))
	}
	for i := range want {
		if d := diffRecord(want[i], got[i]); d != "" {
			t.Fatalf("session %s record %d: %s", id, i+1, d)
		}
	}
	wantChain(t, want, got)
	last, err := s.LastSeq(ctx, id)
	if err != nil || last != want[len(want)-1].Seq {
		t.Fatalf("LastSeq(%s) = %d, %v; want %d", id, last, err, want[len(want)-1].Seq)
	}
	wantInfo(t, s, got[len(got)-1])
}

// wantChain checks the integrity chain of a whole history read back (got)
// against the records appended (want): record 1's PrevHash is 32 zero
// bytes, every later PrevHash is the Hash before it, and every Hash is
// SHA-256(PrevHash || canonical bytes of the appended record).
func wantChain(t *testing.T, want, got []session.Record) {
	t.Helper()
	prev := make([]byte, 32)
	for i, r := range got {
		if !bytes.Equal(r.PrevHash, prev) {
			t.Fatalf("session %s record %d: PrevHash %x, want %x", r.SessionID, r.Seq, r.PrevHash, prev)
		}
		h, err := record.HashOf(prev, want[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Hash) != 32 || !bytes.Equal(r.Hash, h) {
			t.Fatalf("session %s record %d: Hash %x, want %x", r.SessionID, r.Seq, r.Hash, h)
		}
		prev = r.Hash
	}
}

// wantInfo checks Info against the session's last record as read.
func wantInfo(t *testing.T, s store.Store, last session.Record) {
	t.Helper()
	info, err := s.Info(ctx, last.SessionID)
	if err != nil {
		t.Fatalf("Info(%s): %v", last.SessionID, err)
	}
	if d := diffInfo(infoOf(last), info); d != "" {
		t.Fatalf("Info(%s): %s", last.SessionID, d)
	}
}

// infoOf is the summary a session whose last record is last must have.
func infoOf(last session.Record) store.SessionInfo {
	return store.SessionInfo{
		SessionID: last.SessionID, LastSeq: last.Seq, Status: last.Status,
		LastAcceptedMs: last.AcceptedAtMs, LastHash: last.Hash, Final: last.Final,
	}
}

func diffInfo(want, got store.SessionInfo) string {
	var d []string
	if want.SessionID != got.SessionID {
		d = append(d, fmt.Sprintf("SessionID %q != %q", got.SessionID, want.SessionID))
	}
	if want.LastSeq != got.LastSeq {
		d = append(d, fmt.Sprintf("LastSeq %d != %d", got.LastSeq, want.LastSeq))
	}
	if want.Status != got.Status {
		d = append(d, fmt.Sprintf("Status %s != %s", got.Status, want.Status))
	}
	if want.LastAcceptedMs != got.LastAcceptedMs {
		d = append(d, fmt.Sprintf("LastAcceptedMs %d != %d", got.LastAcceptedMs, want.LastAcceptedMs))
	}
	if !bytes.Equal(want.LastHash, got.LastHash) {
		d = append(d, fmt.Sprintf("LastHash %x != %x", got.LastHash, want.LastHash))
	}
	if (want.Final == nil) != (got.Final == nil) || !proto.Equal(want.Final, got.Final) {
		d = append(d, fmt.Sprintf("Final %v != %v", got.Final, want.Final))
	}
	if want.Quarantined != got.Quarantined {
		d = append(d, fmt.Sprintf("Quarantined %q != %q", got.Quarantined, want.Quarantined))
	}
	return strings.Join(d, "; ")
}

func mustAppend(t *testing.T, s store.Store, recs []session.Record) {
	t.Helper()
	if err := s.Append(ctx, recs); err != nil {
		t.Fatalf("Append(%d records): %v", len(recs), err)
	}
}

func wantConflict(t *testing.T, s store.Store, recs []session.Record, why string) {
	t.Helper()
	err := s.Append(ctx, recs)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("%s: Append = %v, want ErrConflict", why, err)
	}
}

func sessions(t *testing.T, s store.Store) []string {
	t.Helper()
	var ids []string
	if err := s.List(ctx, func(info store.SessionInfo) error {
		ids = append(ids, info.SessionID)
		return nil
	}); err != nil {
		t.Fatalf("List: %v", err)
	}
	return ids
}

func lastSeqNotFound(t *testing.T, s store.Store, id string) {
	t.Helper()
	if n, err := s.LastSeq(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LastSeq(%s) = %d, %v; want ErrNotFound", id, n, err)
	}
}

// ---- subtests ----------------------------------------------------------------------

// Every field of every record kind survives the round trip.
func (h *harness) roundTrip(t *testing.T) {
	s := h.fresh(t).s
	for _, k := range []session.Kind{session.KindMessage, session.KindCancel, session.KindExpire} {
		id := fmt.Sprintf("round-trip-session-%s-0000", k)
		want := history(id, 4, k)
		mustAppend(t, s, want[:1])
		mustAppend(t, s, want[1:])
		wantHistory(t, s, want)
	}
	// Extreme field values.
	id := "round-trip-extremes-000000"
	r := startRec(id, math.MaxInt64)
	r.Start.DeadlineMs = math.MinInt64
	r.Start.Policy.SchemaVersion = math.MaxUint32
	r.Envelope.TimestampUnixMs = math.MinInt64
	r.Envelope.Payload = []byte{}
	m := msgRec(id, 2, -1)
	m.Envelope.Payload = nil
	m.Envelope.Sender = strings.Repeat("s", 1000)
	e := expireRec(id, 3, 0)
	mustAppend(t, s, []session.Record{r, m, e})
	wantHistory(t, s, []session.Record{r, m, e})
}

// An empty batch is a no-op.
func (h *harness) emptyAppend(t *testing.T) {
	s := h.fresh(t).s
	if err := s.Append(ctx, nil); err != nil {
		t.Fatalf("Append(nil) = %v", err)
	}
	if err := s.Append(ctx, []session.Record{}); err != nil {
		t.Fatalf("Append(empty) = %v", err)
	}
	if ids := sessions(t, s); len(ids) != 0 {
		t.Fatalf("empty appends created sessions %v", ids)
	}
}

// Store doc: "the first record of a new session has Seq 1".
func (h *harness) firstRecordMustBeOne(t *testing.T) {
	s := h.fresh(t).s
	for _, seq := range []uint64{0, 2, 3, math.MaxUint64} {
		r := msgRec(idA, seq, 1)
		wantConflict(t, s, []session.Record{r}, fmt.Sprintf("first record with Seq %d", seq))
		lastSeqNotFound(t, s, idA)
	}
	if ids := sessions(t, s); len(ids) != 0 {
		t.Fatalf("rejected appends created sessions %v", ids)
	}
	h1 := history(idA, 1, 0)
	mustAppend(t, s, h1)
	wantHistory(t, s, h1)
}

// Store doc: "Append refuses a record whose Seq does not continue the
// stored history of its session (ErrConflict), so a caller ... can never
// write a gap or a fork."
func (h *harness) continuity(t *testing.T) {
	s := h.fresh(t).s
	full := history(idA, 6, 0)
	mustAppend(t, s, full[:3])
	cases := []struct {
		why  string
		recs []session.Record
	}{
		{"gap", []session.Record{full[4]}},
		{"repeat of the last record", []session.Record{full[2]}},
		{"fork at an earlier seq", []session.Record{full[1]}},
		{"a second start", []session.Record{full[0]}},
		{"gap inside the batch", []session.Record{full[3], full[5]}},
		{"repeat inside the batch", []session.Record{full[3], full[3]}},
		{"out of order batch", []session.Record{full[4], full[3]}},
		{"seq 0", []session.Record{msgRec(idA, 0, 1)}},
	}
	for _, c := range cases {
		wantConflict(t, s, c.recs, c.why)
		wantHistory(t, s, full[:3])
	}
	mustAppend(t, s, full[3:5])
	mustAppend(t, s, full[5:])
	wantHistory(t, s, full)
}

// Store doc: "An Append call is atomic: all of its records become durable
// together, or none do." A batch with one bad record writes nothing, for
// any session in it.
func (h *harness) batchAtomicity(t *testing.T) {
	s := h.fresh(t).s
	a := history(idA, 5, 0)
	b := history(idB, 3, 0)
	mustAppend(t, s, a[:2])
	// Good records for A and a brand-new C, then a bad one for B (B's
	// first record is not 1).
	c := history(idC, 2, 0)
	wantConflict(t, s, []session.Record{a[2], a[3], c[0], c[1], b[1]}, "batch ending with a bad record")
	wantHistory(t, s, a[:2])
	lastSeqNotFound(t, s, idC)
	lastSeqNotFound(t, s, idB)
	if ids := sessions(t, s); !slices.Equal(ids, []string{idA}) {
		t.Fatalf("Sessions after a failed batch = %v", ids)
	}
	// A bad record first, good ones after.
	wantConflict(t, s, []session.Record{a[4], a[2], a[3]}, "batch starting with a bad record")
	wantHistory(t, s, a[:2])
	// The same batch, fixed, goes through.
	mustAppend(t, s, []session.Record{a[2], a[3], c[0], c[1], b[0]})
	wantHistory(t, s, a[:4])
	wantHistory(t, s, c)
	wantHistory(t, s, b[:1])
}

// Store doc: "recs may mix sessions; the records of each session must be
// in Seq order".
func (h *harness) mixedBatch(t *testing.T) {
	s := h.fresh(t).s
	a := history(idA, 4, session.KindExpire)
	b := history(idB, 4, session.KindCancel)
	c := history(idC, 3, session.KindMessage)
	// Interleaved.
	mustAppend(t, s, []session.Record{a[0], b[0], a[1], c[0], b[1], b[2], a[2], c[1]})
	mustAppend(t, s, []session.Record{c[2], b[3], a[3]})
	wantHistory(t, s, a)
	wantHistory(t, s, b)
	wantHistory(t, s, c)
}

// Read calls fn "for each record of the session with Seq >= from, in order".
func (h *harness) readFrom(t *testing.T) {
	s := h.fresh(t).s
	want := history(idA, 50, 0)
	for i := 0; i < len(want); i += 7 {
		mustAppend(t, s, want[i:min(i+7, len(want))])
	}
	for _, from := range []uint64{0, 1, 2, 25, 49, 50} {
		got := readAll(t, s, idA, from)
		start := max(from, 1)
		if len(got) != len(want)-int(start)+1 {
			t.Fatalf("Read from %d: %d records", from, len(got))
		}
		for i, r := range got {
			if d := diffRecord(want[int(start)-1+i], r); d != "" {
				t.Fatalf("Read from %d, record %d: %s", from, i, d)
			}
		}
	}
	for _, from := range []uint64{51, 1000, math.MaxUint64} {
		if got := readAll(t, s, idA, from); len(got) != 0 {
			t.Fatalf("Read from %d past the end: %d records", from, len(got))
		}
	}
}

// Session ids that are prefixes of one another stay separate (a classic
// key-encoding bug in ordered stores).
func (h *harness) prefixIDs(t *testing.T) {
	s := h.fresh(t).s
	a := history(idA, 3, 0)
	ab := history(idAB, 5, 0)
	mustAppend(t, s, ab[:1])
	mustAppend(t, s, a)
	mustAppend(t, s, ab[1:])
	wantHistory(t, s, a)
	wantHistory(t, s, ab)
	if got := readAll(t, s, idA, 3); len(got) != 1 || got[0].SessionID != idA {
		t.Fatalf("Read(%s, 3) = %v", idA, got)
	}
	if ids := sessions(t, s); !slices.Equal(ids, []string{idA, idAB}) {
		t.Fatalf("Sessions = %v", ids)
	}
}

// Read / LastSeq of an unknown session: ErrNotFound.
func (h *harness) notFound(t *testing.T) {
	s := h.fresh(t).s
	called := false
	err := s.Read(ctx, idA, 1, func(session.Record) error { called = true; return nil })
	if !errors.Is(err, store.ErrNotFound) || called {
		t.Fatalf("Read(unknown) = %v (fn called %v), want ErrNotFound", err, called)
	}
	lastSeqNotFound(t, s, idA)
	mustAppend(t, s, history(idAB, 2, 0))
	// A prefix or extension of a stored id is still unknown.
	if err := s.Read(ctx, idA, 1, func(session.Record) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Read(prefix of a stored id) = %v", err)
	}
	lastSeqNotFound(t, s, idA)
	lastSeqNotFound(t, s, idAB+"1")
	lastSeqNotFound(t, s, "")
}

// Sessions: "in id order".
func (h *harness) sessionsInOrder(t *testing.T) {
	s := h.fresh(t).s
	if ids := sessions(t, s); len(ids) != 0 {
		t.Fatalf("new store has sessions %v", ids)
	}
	var want []string
	for i := 0; i < 40; i++ {
		// Ids whose insertion order, numeric order and byte order differ.
		id := fmt.Sprintf("session-%d-%s", (i*17)%40, strings.Repeat("x", i%5+14))
		want = append(want, id)
		mustAppend(t, s, history(id, 1+i%3, 0))
	}
	for _, id := range []string{idC, idB, idAB, idA, "A-upper-case-sorts-first-0"} {
		want = append(want, id)
		mustAppend(t, s, history(id, 1, 0))
	}
	slices.Sort(want)
	if got := sessions(t, s); !slices.Equal(got, want) {
		t.Fatalf("Sessions =\n%v\nwant\n%v", got, want)
	}
}

// "until fn returns an error (which Read returns)" / "(which Sessions
// returns)".
func (h *harness) callbackErrors(t *testing.T) {
	s := h.fresh(t).s
	mustAppend(t, s, history(idA, 10, 0))
	mustAppend(t, s, history(idB, 1, 0))
	mustAppend(t, s, history(idC, 1, 0))
	stop := errors.New("stop here")
	var seen []uint64
	err := s.Read(ctx, idA, 2, func(r session.Record) error {
		seen = append(seen, r.Seq)
		if r.Seq == 4 {
			return fmt.Errorf("wrapped: %w", stop)
		}
		return nil
	})
	if !errors.Is(err, stop) || !slices.Equal(seen, []uint64{2, 3, 4}) {
		t.Fatalf("Read with failing fn = %v after %v", err, seen)
	}
	var ids []string
	err = s.List(ctx, func(info store.SessionInfo) error {
		ids = append(ids, info.SessionID)
		if info.SessionID == idB {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !slices.Equal(ids, []string{idA, idB}) {
		t.Fatalf("List with failing fn = %v after %v", err, ids)
	}
	// The store is still usable.
	mustAppend(t, s, []session.Record{msgRec(idB, 2, 5)})
}

// Payloads of the default 1 MiB limit and long histories.
func (h *harness) largeRecords(t *testing.T) {
	s := h.fresh(t).s
	r := msgRec(idA, 2, 1)
	r.Envelope.Payload = make([]byte, 1<<20)
	for i := range r.Envelope.Payload {
		r.Envelope.Payload[i] = byte(i * 31)
	}
	want := append(history(idA, 1, 0), r)
	mustAppend(t, s, want)
	wantHistory(t, s, want)
	long := history(idB, 2000, 0)
	mustAppend(t, s, long[:1000])
	mustAppend(t, s, long[1000:])
	wantHistory(t, s, long)
}

// Many goroutines append to their own sessions while others read (run the
// suite with -race).
func (h *harness) concurrentAppends(t *testing.T) {
	s := h.fresh(t).s
	const writers, perWriter = 16, 60
	var wg sync.WaitGroup
	errs := make(chan error, writers*2)
	for w := 0; w < writers; w++ {
		wg.Add(2)
		id := fmt.Sprintf("concurrent-session-%02d-000000", w)
		go func() {
			defer wg.Done()
			recs := history(id, perWriter, 0)
			for i := 0; i < len(recs); {
				n := 1 + (i+w)%4
				if err := s.Append(ctx, recs[i:min(i+n, len(recs))]); err != nil {
					errs <- fmt.Errorf("%s: %w", id, err)
					return
				}
				i += n
			}
		}()
		go func() { // a reader racing the writer
			defer wg.Done()
			for i := 0; i < 50; i++ {
				var last uint64
				err := s.Read(ctx, id, 1, func(r session.Record) error {
					if r.Seq != last+1 || r.SessionID != id {
						return fmt.Errorf("read %s seq %d after %d", r.SessionID, r.Seq, last)
					}
					last = r.Seq
					return nil
				})
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					errs <- err
					return
				}
				if _, err := s.LastSeq(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
					errs <- err
					return
				}
				_ = s.List(ctx, func(store.SessionInfo) error { return nil })
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ids := sessions(t, s)
	if len(ids) != writers {
		t.Fatalf("%d sessions, want %d", len(ids), writers)
	}
	for _, id := range ids {
		wantHistory(t, s, history(id, perWriter, 0))
	}
}

// Competing appends of the same sequence numbers to one session: exactly
// one writer wins each number, the others get ErrConflict; the history has
// no gap and no fork.
func (h *harness) competingAppends(t *testing.T) {
	s := h.fresh(t).s
	const writers, target = 8, 40
	mustAppend(t, s, history(idA, 1, 0))
	var wg sync.WaitGroup
	wins := make([]int, writers)
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				last, err := s.LastSeq(ctx, idA)
				if err != nil {
					errs <- err
					return
				}
				if last >= target {
					return
				}
				r := msgRec(idA, last+1, int64(w)) // AcceptedAtMs tags the writer
				switch err := s.Append(ctx, []session.Record{r}); {
				case err == nil:
					wins[w]++
				case errors.Is(err, store.ErrConflict):
				default:
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := readAll(t, s, idA, 1)
	if len(got) != target {
		t.Fatalf("%d records, want %d", len(got), target)
	}
	total := 0
	for _, n := range wins {
		total += n
	}
	if total != target-1 {
		t.Fatalf("%d successful appends for %d records", total, target-1)
	}
	perWriter := make([]int, writers)
	for i, r := range got {
		if r.Seq != uint64(i+1) {
			t.Fatalf("record %d has Seq %d", i, r.Seq)
		}
		if i > 0 {
			perWriter[r.AcceptedAtMs]++
		}
	}
	if !slices.Equal(perWriter, wins) {
		t.Fatalf("stored records per writer %v, successful appends %v", perWriter, wins)
	}
}

// Close: "Later calls return ErrClosed."
func (h *harness) close(t *testing.T) {
	s := h.fresh(t).s
	mustAppend(t, s, history(idA, 2, 0))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Append(ctx, history(idB, 1, 0)); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Append after Close = %v", err)
	}
	if err := s.Read(ctx, idA, 1, func(session.Record) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Read after Close = %v", err)
	}
	if _, err := s.LastSeq(ctx, idA); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("LastSeq after Close = %v", err)
	}
	if err := s.List(ctx, func(store.SessionInfo) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("List after Close = %v", err)
	}
	if _, err := s.Info(ctx, idA); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Info after Close = %v", err)
	}
	if err := s.List(ctx, func(store.SessionInfo) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("List after Close = %v", err)
	}
	if err := s.Purge(ctx, idA); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Purge after Close = %v", err)
	}
	if err := s.PutMeta(ctx, "k", []byte("v")); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("PutMeta after Close = %v", err)
	}
	if err := s.DeleteMeta(ctx, "k"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("DeleteMeta after Close = %v", err)
	}
	if err := s.ListMeta(ctx, "", func(string, []byte) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("ListMeta after Close = %v", err)
	}
	// A second Close must not panic; nil or ErrClosed are both fine.
	if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}
}

// Durable stores: everything survives a close and reopen.
func (h *harness) reopenSurvives(t *testing.T) {
	hd := h.fresh(t)
	a := history(idA, 5, session.KindCancel)
	ab := history(idAB, 3, session.KindExpire)
	b := history(idB, 4, session.KindMessage)
	big := msgRec(idC, 2, 9)
	big.Envelope.Payload = make([]byte, 1<<20)
	c := []session.Record{startRec(idC, 1), big}
	mustAppend(t, hd.s, []session.Record{a[0], b[0], ab[0]})
	mustAppend(t, hd.s, append(append(a[1:], b[1:]...), ab[1:]...))
	mustAppend(t, hd.s, c)
	h.reopen(t, hd)
	for _, want := range [][]session.Record{a, ab, b, c} {
		wantHistory(t, hd.s, want)
	}
	if ids := sessions(t, hd.s); !slices.Equal(ids, []string{idA, idAB, idB, idC}) {
		t.Fatalf("Sessions after reopen = %v", ids)
	}
	// Twice in a row, with nothing written in between.
	h.reopen(t, hd)
	wantHistory(t, hd.s, a)
}

// Durable stores: the continuity rule and atomicity hold across a reopen,
// and a failed batch leaves nothing behind on disk.
func (h *harness) reopenContinuity(t *testing.T) {
	hd := h.fresh(t)
	full := history(idA, 6, 0)
	mustAppend(t, hd.s, full[:3])
	wantConflict(t, hd.s, []session.Record{full[3], history(idB, 2, 0)[1]}, "bad batch before reopen")
	h.reopen(t, hd)
	wantHistory(t, hd.s, full[:3])
	lastSeqNotFound(t, hd.s, idB)
	wantConflict(t, hd.s, []session.Record{full[4]}, "gap after reopen")
	wantConflict(t, hd.s, []session.Record{full[2]}, "repeat after reopen")
	wantConflict(t, hd.s, []session.Record{full[0]}, "restart after reopen")
	mustAppend(t, hd.s, full[3:])
	h.reopen(t, hd)
	wantHistory(t, hd.s, full)
	if ids := sessions(t, hd.s); !slices.Equal(ids, []string{idA}) {
		t.Fatalf("Sessions = %v", ids)
	}
}

// ---- integrity chain, summaries, purge, meta ------------------------------------

// Store doc: "Append sets each record's PrevHash to the Hash of the
// session's previous record (ZeroHash for Seq 1) and its Hash to
// SHA-256(PrevHash || canonical bytes ...); the caller's Hash and PrevHash
// are ignored."
func (h *harness) hashChain(t *testing.T) {
	s := h.fresh(t).s
	// The same history, appended one record at a time to one store and in
	// one batch to another, chains to the same hashes.
	want := history(idA, 12, session.KindMessage)
	for i := range want {
		mustAppend(t, s, want[i:i+1])
	}
	one := readAll(t, s, idA, 1)
	wantChain(t, want, one)
	if !bytes.Equal(one[0].PrevHash, store.ZeroHash) {
		t.Fatalf("record 1 PrevHash %x", one[0].PrevHash)
	}
	s2 := h.fresh(t).s
	mustAppend(t, s2, want)
	batched := readAll(t, s2, idA, 1)
	for i := range one {
		if !bytes.Equal(one[i].Hash, batched[i].Hash) || !bytes.Equal(one[i].PrevHash, batched[i].PrevHash) {
			t.Fatalf("record %d: hashes depend on batching", i+1)
		}
	}
	// Distinct records have distinct hashes.
	seen := map[string]bool{}
	for _, r := range one {
		if seen[string(r.Hash)] {
			t.Fatalf("record %d repeats a hash", r.Seq)
		}
		seen[string(r.Hash)] = true
	}
	// Read from the middle returns the same hashes.
	for _, from := range []uint64{2, 7, 12} {
		mid := readAll(t, s, idA, from)
		for i, r := range mid {
			if !bytes.Equal(r.Hash, one[int(from)-1+i].Hash) || !bytes.Equal(r.PrevHash, one[int(from)-1+i].PrevHash) {
				t.Fatalf("Read from %d, record %d: hashes differ from a full read", from, r.Seq)
			}
		}
	}
	// Caller-supplied hashes are ignored.
	b := history(idB, 3, 0)
	for i := range b {
		b[i].Hash = bytes.Repeat([]byte{0xff}, 32)
		b[i].PrevHash = []byte("junk")
	}
	mustAppend(t, s, b)
	got := readAll(t, s, idB, 1)
	wantChain(t, b, got)
	// The record content is what is hashed: the same seq with another
	// payload hashes differently.
	c := history(idC, 2, 0)
	c2 := history(idC, 2, 0)
	c2[1].Envelope.Payload = append([]byte{}, c2[1].Envelope.Payload...)
	c2[1].Envelope.Payload[0] ^= 1
	h1, _ := record.HashOf(store.ZeroHash, c[1])
	h2, _ := record.HashOf(store.ZeroHash, c2[1])
	if bytes.Equal(h1, h2) {
		t.Fatal("a payload change does not change the hash")
	}
}

// Info tracks the last record of a session through every append: LastSeq,
// Status, LastAcceptedMs, LastHash, and Final once terminal.
func (h *harness) infoTracking(t *testing.T) {
	s := h.fresh(t).s
	if _, err := s.Info(ctx, idA); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Info(unknown) = %v, want ErrNotFound", err)
	}
	for _, k := range []session.Kind{session.KindMessage, session.KindCancel, session.KindExpire} {
		id := fmt.Sprintf("info-tracking-%s-00000000", k)
		want := history(id, 5, k)
		for i := range want {
			mustAppend(t, s, want[i:i+1])
			got := readAll(t, s, id, 1)
			wantInfo(t, s, got[len(got)-1])
			info, _ := s.Info(ctx, id)
			if terminal := i == len(want)-1; terminal != info.Status.Terminal() || terminal != (info.Final != nil) {
				t.Fatalf("%s after record %d: Status %s, Final %v", id, i+1, info.Status, info.Final)
			}
		}
	}
	// In a mixed batch, each session's summary is its own last record.
	a, b := history(idA, 3, session.KindExpire), history(idB, 4, 0)
	mustAppend(t, s, []session.Record{a[0], b[0], a[1], b[1], b[2], a[2], b[3]})
	wantHistory(t, s, a)
	wantHistory(t, s, b)
	// A prefix or extension of a stored id is still unknown.
	for _, id := range []string{idAB, idA[:10], idB + "0"} {
		if _, err := s.Info(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Info(%q) = %v, want ErrNotFound", id, err)
		}
	}
	// Returned summaries are copies.
	info, _ := s.Info(ctx, idA)
	info.LastHash[0] ^= 0xff
	info.Final.SessionId = "changed"
	wantHistory(t, s, a)
}

func list(t *testing.T, s store.Store) []store.SessionInfo {
	t.Helper()
	var out []store.SessionInfo
	if err := s.List(ctx, func(info store.SessionInfo) error {
		out = append(out, info)
		return nil
	}); err != nil {
		t.Fatalf("List: %v", err)
	}
	return out
}

// List: every session in id order, each with the summary Info gives.
func (h *harness) list(t *testing.T) {
	s := h.fresh(t).s
	if got := list(t, s); len(got) != 0 {
		t.Fatalf("new store lists %v", got)
	}
	hs := map[string][]session.Record{
		idC:                          history(idC, 2, 0),
		idAB:                         history(idAB, 3, session.KindCancel),
		idA:                          history(idA, 4, session.KindMessage),
		idB:                          history(idB, 1, 0),
		"A-upper-case-sorts-first-0": history("A-upper-case-sorts-first-0", 2, session.KindExpire),
	}
	ids := make([]string, 0, len(hs))
	for id, recs := range hs {
		ids = append(ids, id)
		mustAppend(t, s, recs)
	}
	slices.Sort(ids)
	got := list(t, s)
	if len(got) != len(ids) {
		t.Fatalf("List gave %d sessions, want %d", len(got), len(ids))
	}
	for i, info := range got {
		if info.SessionID != ids[i] {
			t.Fatalf("List[%d] = %s, want %s", i, info.SessionID, ids[i])
		}
		recs := readAll(t, s, info.SessionID, 1)
		if d := diffInfo(infoOf(recs[len(recs)-1]), info); d != "" {
			t.Fatalf("List: %s: %s", info.SessionID, d)
		}
	}
	if ss := sessions(t, s); !slices.Equal(ss, ids) {
		t.Fatalf("Sessions = %v, want %v", ss, ids)
	}
	stop := errors.New("stop")
	var seen []string
	err := s.List(ctx, func(info store.SessionInfo) error {
		seen = append(seen, info.SessionID)
		if len(seen) == 2 {
			return fmt.Errorf("wrapped: %w", stop)
		}
		return nil
	})
	if !errors.Is(err, stop) || !slices.Equal(seen, ids[:2]) {
		t.Fatalf("List with failing fn = %v after %v", err, seen)
	}
}

func listOpen(t *testing.T, s store.Store) []store.SessionInfo {
	t.Helper()
	var out []store.SessionInfo
	if err := s.ListOpen(ctx, func(info store.SessionInfo) error {
		out = append(out, info)
		return nil
	}); err != nil {
		t.Fatalf("ListOpen: %v", err)
	}
	return out
}

// wantListOpen checks that ListOpen gives exactly the sessions ids, in id
// order, each with the summary List gives it, that List's OPEN and
// SUSPENDED sessions are exactly those, and that its other sessions are
// terminal (the suite quarantines nothing: store tests do).
func wantListOpen(t *testing.T, s store.Store, ids ...string) {
	t.Helper()
	ids = slices.Sorted(slices.Values(ids))
	got := listOpen(t, s)
	var gotIDs []string
	for _, info := range got {
		gotIDs = append(gotIDs, info.SessionID)
	}
	if !slices.Equal(gotIDs, ids) {
		t.Fatalf("ListOpen = %v, want %v", gotIDs, ids)
	}
	var ref []store.SessionInfo
	for _, info := range list(t, s) {
		if info.Quarantined != "" {
			t.Fatalf("List: %s quarantined: %s", info.SessionID, info.Quarantined)
		}
		switch {
		case info.Status == session.Open || info.Status == session.Suspended:
			ref = append(ref, info) // not terminal: listed
		case !info.Status.Terminal():
			t.Fatalf("List: %s has status %v", info.SessionID, info.Status)
		}
	}
	if len(ref) != len(got) {
		t.Fatalf("ListOpen gave %d sessions, List has %d OPEN ones", len(got), len(ref))
	}
	for i := range ref {
		if d := diffInfo(ref[i], got[i]); d != "" {
			t.Fatalf("ListOpen: %s: %s (against List)", got[i].SessionID, d)
		}
	}
}

// ListOpen: the OPEN sessions only, in id order, with List's summaries; a
// session leaves when it ends, a purged one is gone, a session that starts
// joins; with WithReopen, the same after a reopen.
func (h *harness) listOpen(t *testing.T) {
	hd := h.fresh(t)
	wantListOpen(t, hd.s)
	const (
		idD = "A-upper-case-sorts-first-0"
		idE = "resolved-by-commitment"
	)
	a := history(idA, 6, 0)
	mustAppend(t, hd.s, a[:2]) // OPEN, in several batches
	mustAppend(t, hd.s, a[2:4])
	mustAppend(t, hd.s, history(idAB, 3, session.KindCancel)) // starts and ends in one batch
	mustAppend(t, hd.s, history(idB, 1, 0))
	mustAppend(t, hd.s, history(idC, 2, 0))
	d := history(idD, 3, session.KindExpire)
	mustAppend(t, hd.s, d[:2])
	mustAppend(t, hd.s, d[2:]) // ends in a later batch
	e := history(idE, 4, session.KindMessage)
	mustAppend(t, hd.s, e[:1])
	wantListOpen(t, hd.s, idA, idB, idC, idE)

	// fn's error stops the listing.
	stop := errors.New("stop")
	var seen []string
	err := hd.s.ListOpen(ctx, func(info store.SessionInfo) error {
		seen = append(seen, info.SessionID)
		if len(seen) == 2 {
			return fmt.Errorf("wrapped: %w", stop)
		}
		return nil
	})
	if !errors.Is(err, stop) || !slices.Equal(seen, []string{idA, idB}) { // idA < idB < idC, idE
		t.Fatalf("ListOpen with failing fn = %v after %v", err, seen)
	}

	// One batch ends a session, continues another and starts a third.
	f := history("fresh", 2, 0)
	mustAppend(t, hd.s, append(append(e[1:], a[4]), f[0]))
	wantListOpen(t, hd.s, idA, idB, idC, "fresh")
	// A session that ends leaves; purged, it is gone; its id starting
	// afresh joins again.
	mustAppend(t, hd.s, []session.Record{expireRec(idB, 2, 99)})
	wantListOpen(t, hd.s, idA, idC, "fresh")
	for _, id := range []string{idB, idAB, idE} {
		if err := hd.s.Purge(ctx, id); err != nil {
			t.Fatalf("Purge(%s): %v", id, err)
		}
	}
	wantListOpen(t, hd.s, idA, idC, "fresh")
	mustAppend(t, hd.s, history(idB, 2, 0))
	wantListOpen(t, hd.s, idA, idB, idC, "fresh")
	if h.cfg.reopen == nil {
		return
	}
	h.reopen(t, hd)
	wantListOpen(t, hd.s, idA, idB, idC, "fresh")
	// After a reopen (tips loaded from the store): a session ends, one
	// continues, one starts.
	mustAppend(t, hd.s, []session.Record{cancelRec(idC, 3, 100), a[5], f[1], startRec("zzzz-new", 101)})
	wantListOpen(t, hd.s, idA, idB, "fresh", "zzzz-new")
	h.reopen(t, hd)
	wantListOpen(t, hd.s, idA, idB, "fresh", "zzzz-new")
	wantHistory(t, hd.s, a)
}

// Purge: whole terminal sessions only.
func (h *harness) purge(t *testing.T) {
	s := h.fresh(t).s
	done := history(idA, 40, session.KindMessage) // terminal
	neighbour := history(idAB, 3, session.KindExpire)
	open := history(idB, 3, 0)
	mustAppend(t, s, done[:20])
	mustAppend(t, s, done[20:])
	mustAppend(t, s, neighbour)
	mustAppend(t, s, open)

	if err := s.Purge(ctx, idB); !errors.Is(err, store.ErrNotTerminal) {
		t.Fatalf("Purge(open session) = %v, want ErrNotTerminal", err)
	}
	wantHistory(t, s, open)
	if err := s.Purge(ctx, idC); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Purge(unknown) = %v, want ErrNotFound", err)
	}
	if err := s.Purge(ctx, idA); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if err := s.Read(ctx, idA, 1, func(session.Record) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Read(purged) = %v", err)
	}
	if _, err := s.Info(ctx, idA); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Info(purged) = %v", err)
	}
	lastSeqNotFound(t, s, idA)
	if err := s.Purge(ctx, idA); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second Purge = %v, want ErrNotFound", err)
	}
	// The id sharing a prefix is untouched.
	wantHistory(t, s, neighbour)
	wantHistory(t, s, open)
	if ids := sessions(t, s); !slices.Equal(ids, []string{idAB, idB}) {
		t.Fatalf("Sessions after Purge = %v", ids)
	}
	// Nothing of the purged history remains: the id starts afresh.
	again := history(idA, 2, 0)
	mustAppend(t, s, again)
	wantHistory(t, s, again)
	// The neighbour can be purged too, and the open session once it ends.
	if err := s.Purge(ctx, idAB); err != nil {
		t.Fatalf("Purge(%s): %v", idAB, err)
	}
	mustAppend(t, s, []session.Record{expireRec(idB, 4, 99)})
	if err := s.Purge(ctx, idB); err != nil {
		t.Fatalf("Purge after expiry: %v", err)
	}
	if ids := sessions(t, s); !slices.Equal(ids, []string{idA}) {
		t.Fatalf("Sessions = %v", ids)
	}
}

type kv struct {
	k, v string
}

func listMeta(t *testing.T, s store.Store, prefix string) []kv {
	t.Helper()
	var out []kv
	if err := s.ListMeta(ctx, prefix, func(k string, v []byte) error {
		out = append(out, kv{k, string(v)})
		return nil
	}); err != nil {
		t.Fatalf("ListMeta(%q): %v", prefix, err)
	}
	return out
}

// The meta key-value space: durable ext-mode registrations and the like.
func (h *harness) meta(t *testing.T) {
	s := h.fresh(t).s
	if got := listMeta(t, s, ""); len(got) != 0 {
		t.Fatalf("new store has meta %v", got)
	}
	bin := string([]byte{0, 1, 0xff, '\n'})
	val := []byte("v2")
	for _, e := range []kv{{"ext/b", "B"}, {"ext/a", "A"}, {"ext", "bare"}, {"extra", "X"}, {"pol/x", bin}, {"e", ""}, {"ext/c", "C"}} {
		if err := s.PutMeta(ctx, e.k, []byte(e.v)); err != nil {
			t.Fatalf("PutMeta(%q): %v", e.k, err)
		}
	}
	if err := s.PutMeta(ctx, "ext/c", val); err != nil { // overwrite
		t.Fatal(err)
	}
	val[0] = 'X' // the store kept its own copy
	if err := s.DeleteMeta(ctx, "ext/b"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMeta(ctx, "never-stored"); err != nil {
		t.Fatalf("DeleteMeta(missing) = %v", err)
	}
	all := []kv{{"e", ""}, {"ext", "bare"}, {"ext/a", "A"}, {"ext/c", "v2"}, {"extra", "X"}, {"pol/x", bin}}
	if got := listMeta(t, s, ""); !slices.Equal(got, all) {
		t.Fatalf("ListMeta(\"\") = %q, want %q", got, all)
	}
	if got := listMeta(t, s, "ext/"); !slices.Equal(got, all[2:4]) {
		t.Fatalf("ListMeta(ext/) = %q", got)
	}
	if got := listMeta(t, s, "ext"); !slices.Equal(got, all[1:5]) {
		t.Fatalf("ListMeta(ext) = %q", got)
	}
	if got := listMeta(t, s, "zzz"); len(got) != 0 {
		t.Fatalf("ListMeta(zzz) = %q", got)
	}
	if err := s.PutMeta(ctx, "", []byte("v")); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("PutMeta(empty key) = %v, want ErrInvalid", err)
	}
	stop := errors.New("stop")
	n := 0
	if err := s.ListMeta(ctx, "", func(string, []byte) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("ListMeta with failing fn = %v after %d", err, n)
	}
	// Meta keys are not sessions, and sessions are not meta.
	mustAppend(t, s, history(idA, 1, 0))
	if ids := sessions(t, s); !slices.Equal(ids, []string{idA}) {
		t.Fatalf("Sessions = %v", ids)
	}
	if got := listMeta(t, s, ""); !slices.Equal(got, all) {
		t.Fatalf("ListMeta after an append = %q", got)
	}
}

// Session ids a store cannot represent are ErrInvalid, and the batch is
// not written.
func (h *harness) invalidSessionID(t *testing.T) {
	s := h.fresh(t).s
	for _, id := range []string{"", "a\x00b", "\x00"} {
		r := history(id, 1, 0)
		err := s.Append(ctx, append(history(idA, 1, 0), r...))
		if !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("Append(session id %q) = %v, want ErrInvalid", id, err)
		}
	}
	if ids := sessions(t, s); len(ids) != 0 {
		t.Fatalf("rejected appends created sessions %v", ids)
	}
}

// Durable stores: summaries, hashes, meta and purges survive a reopen, and
// the chain continues across it.
func (h *harness) reopenInfoChainMeta(t *testing.T) {
	hd := h.fresh(t)
	a := history(idA, 6, 0)
	b := history(idB, 3, session.KindCancel)
	c := history(idC, 2, session.KindExpire)
	mustAppend(t, hd.s, a[:3])
	mustAppend(t, hd.s, append(b, c...))
	mustAppend(t, hd.s, []session.Record{{SessionID: idAB, Seq: 1, Kind: session.KindExpire, AcceptedAtMs: 5, Status: session.Expired, Final: finalMD(idAB, session.Expired, 5)}})
	if err := hd.s.PutMeta(ctx, "ext/x", []byte("registration")); err != nil {
		t.Fatal(err)
	}
	if err := hd.s.PutMeta(ctx, "ext/y", []byte("gone")); err != nil {
		t.Fatal(err)
	}
	if err := hd.s.DeleteMeta(ctx, "ext/y"); err != nil {
		t.Fatal(err)
	}
	if err := hd.s.Purge(ctx, idC); err != nil {
		t.Fatal(err)
	}
	before := list(t, hd.s)
	beforeA := readAll(t, hd.s, idA, 1)
	h.reopen(t, hd)
	after := list(t, hd.s)
	if len(after) != len(before) {
		t.Fatalf("List after reopen: %d sessions, before %d", len(after), len(before))
	}
	for i := range before {
		if d := diffInfo(before[i], after[i]); d != "" {
			t.Fatalf("List after reopen, %s: %s", before[i].SessionID, d)
		}
	}
	wantHistory(t, hd.s, b)
	lastSeqNotFound(t, hd.s, idC)
	afterA := readAll(t, hd.s, idA, 1)
	for i := range beforeA {
		if !bytes.Equal(beforeA[i].Hash, afterA[i].Hash) || !bytes.Equal(beforeA[i].PrevHash, afterA[i].PrevHash) {
			t.Fatalf("record %d: hashes changed across reopen", i+1)
		}
	}
	if got := listMeta(t, hd.s, ""); !slices.Equal(got, []kv{{"ext/x", "registration"}}) {
		t.Fatalf("meta after reopen = %q", got)
	}
	// The chain continues across the reopen.
	mustAppend(t, hd.s, a[3:])
	wantHistory(t, hd.s, a)
	if got := readAll(t, hd.s, idA, 4); !bytes.Equal(got[0].PrevHash, beforeA[2].Hash) {
		t.Fatal("first record after reopen does not chain to the last one before")
	}
	h.reopen(t, hd)
	wantHistory(t, hd.s, a)
}
