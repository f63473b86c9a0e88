package pebblestore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
)

var ctx = context.Background()

// rec builds record seq of session id; AcceptedAtMs tags the batch that
// wrote it. The last record of a terminal session gets Status Expired.
func rec(id string, seq uint64, tag int64) session.Record {
	r := session.Record{
		SessionID: id, Seq: seq, Kind: session.KindMessage, AcceptedAtMs: tag, Status: session.Open,
		Envelope: &macpv1.Envelope{
			MacpVersion: "1.0", Mode: "macp.mode.decision.v1", MessageType: "Proposal",
			MessageId: fmt.Sprintf("m-%d", seq), SessionId: id, Sender: "alice", Payload: []byte(fmt.Sprintf("payload %s %d", id, seq)),
		},
	}
	if seq == 1 {
		r.Kind = session.KindStart
		r.Envelope.MessageType = "SessionStart"
		r.Start = &session.StartInfo{Policy: policy.Default(), DeadlineMs: 1 << 40}
	}
	return r
}

func expired(id string, seq uint64, tag int64) session.Record {
	return session.Record{
		SessionID: id, Seq: seq, Kind: session.KindExpire, AcceptedAtMs: tag, Status: session.Expired,
		Final: &macpv1.SessionMetadata{SessionId: id, State: macpv1.SessionState_SESSION_STATE_EXPIRED},
	}
}

func appendN(t testing.TB, s store.Store, id string, from, to uint64, tag int64) {
	t.Helper()
	var recs []session.Record
	for seq := from; seq <= to; seq++ {
		recs = append(recs, rec(id, seq, tag))
	}
	if err := s.Append(ctx, recs); err != nil {
		t.Fatalf("Append(%s %d..%d): %v", id, from, to, err)
	}
}

// readAll returns a session's records, or the error Read returned.
func readAll(s store.Store, id string) ([]session.Record, error) {
	var out []session.Record
	err := s.Read(ctx, id, 1, func(r session.Record) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

func listAll(t testing.TB, s store.Store) []store.SessionInfo {
	t.Helper()
	var out []store.SessionInfo
	if err := s.List(ctx, func(i store.SessionInfo) error { out = append(out, i); return nil }); err != nil {
		t.Fatalf("List: %v", err)
	}
	return out
}

// quietLogger keeps Pebble's own logging out of test output.
type quietLogger struct{ t testing.TB }

func (quietLogger) Infof(string, ...any)           {}
func (l quietLogger) Errorf(f string, a ...any)    { l.t.Logf("pebble: "+f, a...) }
func (l quietLogger) Fatalf(f string, args ...any) { l.t.Errorf("pebble fatal: "+f, args...) }

// rawEdit opens the store's Pebble directly, bypassing the store and its
// codec, to plant damage.
func rawEdit(t testing.TB, fs vfs.FS, dir string, edit func(db *pebble.DB)) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, Logger: quietLogger{t}})
	if err != nil {
		t.Fatalf("raw open: %v", err)
	}
	edit(db)
	if err := db.Close(); err != nil {
		t.Fatalf("raw close: %v", err)
	}
}

func rawGet(t testing.TB, db *pebble.DB, key []byte) []byte {
	t.Helper()
	v, closer, err := db.Get(key)
	if err != nil {
		t.Fatalf("raw get %q: %v", key, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...)
}

func rawSet(t testing.TB, db *pebble.DB, key, val []byte) {
	t.Helper()
	if err := db.Set(key, val, pebble.Sync); err != nil {
		t.Fatalf("raw set: %v", err)
	}
}

func wantCorrupt(t testing.TB, err error, why string) {
	t.Helper()
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("%s: %v, want ErrCorrupt", why, err)
	}
}
