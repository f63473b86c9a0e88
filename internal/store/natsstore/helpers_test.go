package natsstore_test

import (
	"context"
	"fmt"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/natstest"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/natsstore"
)

var ctx = context.Background()

func rec(id string, seq uint64) session.Record {
	r := session.Record{
		SessionID: id, Seq: seq, Kind: session.KindMessage, AcceptedAtMs: int64(seq), Status: session.Open,
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

func recs(id string, from, to uint64) []session.Record {
	var out []session.Record
	for s := from; s <= to; s++ {
		out = append(out, rec(id, s))
	}
	return out
}

func open(t testing.TB, srv *natstest.Server, name string, parts int) *natsstore.Store {
	t.Helper()
	s, err := natsstore.Open(ctx, natsstore.Options{URL: srv.ClientURL(), Name: name, Replicas: 1, Partitions: parts})
	if err != nil {
		t.Fatalf("Open %s (partitions %d): %v", name, parts, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func readAll(t *testing.T, s store.Store, id string) []session.Record {
	t.Helper()
	var out []session.Record
	if err := s.Read(ctx, id, 1, func(r session.Record) error { out = append(out, r); return nil }); err != nil {
		t.Fatalf("Read %s: %v", id, err)
	}
	return out
}

func listAll(t *testing.T, s store.Store) []string {
	t.Helper()
	var ids []string
	if err := s.List(ctx, func(i store.SessionInfo) error { ids = append(ids, i.SessionID); return nil }); err != nil {
		t.Fatalf("List: %v", err)
	}
	return ids
}
