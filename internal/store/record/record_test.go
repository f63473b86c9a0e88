package record_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"math"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	storev1 "github.com/macpd/macpd/gen/macpd/store/v1"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/record"
	"google.golang.org/protobuf/proto"
)

func startRec() session.Record {
	return session.Record{
		SessionID: "sid", Seq: 1, Kind: session.KindStart, AcceptedAtMs: 1000, Status: session.Open,
		Envelope: &macpv1.Envelope{MacpVersion: "1.0", Mode: "m", MessageType: "SessionStart", MessageId: "m1", SessionId: "sid", Sender: "a", TimestampUnixMs: 999, Payload: []byte{1, 2, 3}},
		Start: &session.StartInfo{
			Policy:     policy.Descriptor{ID: "p", Mode: "*", Description: "d", Rules: "{}", SchemaVersion: 7},
			DeadlineMs: math.MinInt64,
		},
	}
}

func expireRec(seq uint64) session.Record {
	return session.Record{
		SessionID: "sid", Seq: seq, Kind: session.KindExpire, AcceptedAtMs: 2000, Status: session.Expired,
		Final: &macpv1.SessionMetadata{SessionId: "sid", State: macpv1.SessionState_SESSION_STATE_EXPIRED, Participants: []string{"a"}},
	}
}

func TestRoundTrip(t *testing.T) {
	prev := store.ZeroHash
	for _, rec := range []session.Record{startRec(), expireRec(2)} {
		v, h, err := record.Encode(rec, prev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := record.Decode(v, rec.SessionID, rec.Seq)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.PrevHash, prev) || !bytes.Equal(got.Hash, h) {
			t.Fatalf("hashes %x %x, want %x %x", got.PrevHash, got.Hash, prev, h)
		}
		canon, _ := record.Canonical(rec)
		want := sha256.Sum256(append(append([]byte{}, prev...), canon...))
		if !bytes.Equal(h, want[:]) {
			t.Fatal("Hash is not SHA-256(prev || canonical)")
		}
		if hh, _ := record.HashOf(prev, rec); !bytes.Equal(hh, h) {
			t.Fatal("HashOf differs from Encode")
		}
		// The value is canonical bytes + trailer, and decodes as a whole.
		if !bytes.Equal(v[:len(canon)], canon) || len(v) != len(canon)+record.TrailerSize {
			t.Fatal("value is not canonical bytes + trailer")
		}
		var pb storev1.Record
		if err := proto.Unmarshal(v, &pb); err != nil || !bytes.Equal(pb.Hash, h) || !bytes.Equal(pb.PrevHash, prev) {
			t.Fatalf("value does not decode as a Record with hashes: %v", err)
		}
		got.Hash, got.PrevHash = nil, nil
		if got.SessionID != rec.SessionID || got.Seq != rec.Seq || got.Kind != rec.Kind || got.AcceptedAtMs != rec.AcceptedAtMs ||
			got.Status != rec.Status || !proto.Equal(got.Envelope, rec.Envelope) || !proto.Equal(got.Final, rec.Final) ||
			(rec.Start == nil) != (got.Start == nil) || (rec.Start != nil && *rec.Start != *got.Start) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, rec)
		}
		prev = h
	}
}

// Every single-bit flip anywhere in a stored value is detected.
func TestEveryBitFlipIsCorrupt(t *testing.T) {
	v, _, err := record.Encode(startRec(), store.ZeroHash)
	if err != nil {
		t.Fatal(err)
	}
	for i := range v {
		for bit := 0; bit < 8; bit++ {
			c := bytes.Clone(v)
			c[i] ^= 1 << bit
			if _, err := record.Decode(c, "sid", 1); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("flip byte %d bit %d: Decode = %v, want ErrCorrupt", i, bit, err)
			}
		}
	}
	for _, n := range []int{0, 1, record.TrailerSize - 1, len(v) - 1} {
		if _, err := record.Decode(v[:n], "sid", 1); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	// Filed under another key.
	if _, err := record.Decode(v, "sid", 2); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("wrong seq: %v", err)
	}
	if _, err := record.Decode(v, "other", 1); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("wrong session: %v", err)
	}
}

func TestChain(t *testing.T) {
	v1, h1, _ := record.Encode(startRec(), store.ZeroHash)
	r1, _ := record.Decode(v1, "sid", 1)
	v2, _, _ := record.Encode(expireRec(2), h1)
	r2, _ := record.Decode(v2, "sid", 2)
	c := record.NewChain("sid")
	if err := c.Next(r1); err != nil {
		t.Fatal(err)
	}
	if err := c.Next(r2); err != nil {
		t.Fatal(err)
	}
	// A record chained to the wrong predecessor (self-consistent, so its
	// own hash checks out) breaks the chain.
	bad, _, _ := record.Encode(expireRec(2), bytes.Repeat([]byte{1}, 32))
	rb, err := record.Decode(bad, "sid", 2)
	if err != nil {
		t.Fatal(err)
	}
	c = record.NewChain("sid")
	_ = c.Next(r1)
	if err := c.Next(rb); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("broken link: %v", err)
	}
	// Gaps and foreign records.
	c = record.NewChain("sid")
	if err := c.Next(r2); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("missing first record: %v", err)
	}
	c = record.NewChain("other")
	if err := c.Next(r1); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("foreign record: %v", err)
	}
}

func TestIndex(t *testing.T) {
	v1, h1, _ := record.Encode(startRec(), store.ZeroHash)
	v2, _, _ := record.Encode(expireRec(2), h1)
	r2, _ := record.Decode(v2, "sid", 2)
	info := record.InfoOf(r2)
	b, err := record.EncodeIndex(info)
	if err != nil {
		t.Fatal(err)
	}
	got, err := record.DecodeIndex(b, "sid")
	if err != nil {
		t.Fatal(err)
	}
	if err := record.CheckIndex(got, r2); err != nil {
		t.Fatal(err)
	}
	r1, _ := record.Decode(v1, "sid", 1)
	if err := record.CheckIndex(got, r1); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("index against an older record: %v", err)
	}
	for _, mutate := range []func(*store.SessionInfo){
		func(i *store.SessionInfo) { i.Status = session.Resolved },
		func(i *store.SessionInfo) { i.LastAcceptedMs++ },
		func(i *store.SessionInfo) { i.Final = nil },
		func(i *store.SessionInfo) { i.LastHash = store.ZeroHash },
	} {
		m := got
		mutate(&m)
		if err := record.CheckIndex(m, r2); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("mutated index passes: %v", err)
		}
	}
	if _, err := record.DecodeIndex(b, "other"); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("index under another id: %v", err)
	}
	if _, err := record.DecodeIndex([]byte{0xff}, "sid"); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("garbage index: %v", err)
	}
}

// FuzzDecode: Decode never panics, and whatever it accepts re-encodes to
// the same value.
func FuzzDecode(f *testing.F) {
	v1, h1, _ := record.Encode(startRec(), store.ZeroHash)
	v2, _, _ := record.Encode(expireRec(2), h1)
	f.Add(v1, uint64(1))
	f.Add(v2, uint64(2))
	f.Add([]byte{}, uint64(1))
	f.Fuzz(func(t *testing.T, v []byte, seq uint64) {
		rec, err := record.Decode(v, "sid", seq)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("error not marked corrupt: %v", err)
			}
			return
		}
		// Accepted values are hash-consistent with themselves; the
		// canonical re-encoding need not be byte-identical (protobuf
		// allows several encodings), but the hash covers the stored bytes.
		if len(rec.Hash) != record.HashSize || len(rec.PrevHash) != record.HashSize {
			t.Fatal("accepted record without hashes")
		}
	})
}

// EncodeTo with a reused buffer produces exactly Encode's bytes and hash,
// whatever the buffer held before.
func TestEncodeToReusesBuffer(t *testing.T) {
	var buf []byte
	prev := store.ZeroHash
	for i, r := range []session.Record{startRec(), expireRec(2), startRec(), expireRec(9)} {
		want, wantHash, err := record.Encode(r, prev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := record.EncodeTo(buf, r, prev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) || !bytes.Equal(got[len(got)-record.HashSize:], wantHash) {
			t.Fatalf("record %d: EncodeTo differs from Encode", i)
		}
		buf = got
		prev = wantHash
	}
}

// TestEncoderReuse: an Encoder used for one record after another gives
// each the bytes Encode gives it alone (nothing carries over, a
// SessionStart's policy included), and a message record costs it no
// allocation.
func TestEncoderReuse(t *testing.T) {
	msg := session.Record{
		SessionID: "sid", Seq: 2, Kind: session.KindMessage, AcceptedAtMs: 1500, Status: session.Open,
		Envelope: &macpv1.Envelope{MacpVersion: "1.0", Mode: "m", MessageType: "Proposal", MessageId: "m2", SessionId: "sid", Sender: "a", TimestampUnixMs: 1499, Payload: []byte{4, 5}},
	}
	var e record.Encoder
	var buf []byte
	prev := store.ZeroHash
	for i, r := range []session.Record{startRec(), msg, expireRec(3), startRec(), msg, msg, expireRec(9)} {
		want, wantHash, err := record.Encode(r, prev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.EncodeTo(buf, r, prev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("record %d: Encoder bytes differ from Encode", i)
		}
		buf, prev = got, wantHash
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := e.EncodeTo(buf, msg, prev); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Encoder.EncodeTo allocates %.0f times per message record", allocs)
	}
}
