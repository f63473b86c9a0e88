package natsstore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/macpd/macpd/internal/natstest"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/natsstore"
)

// Sessions are spread over the partitions' streams, each session's
// messages in one stream; List covers every stream; the layout is
// recorded at creation, a node asking for another one is refused, and a
// node that does not ask gets the recorded one.
func TestPartitions(t *testing.T) {
	srv := natstest.Run(t)
	s := open(t, srv, "parts", 4)
	if got := s.StreamNames(); len(got) != 4 || got[0] != "parts_history_0" || got[3] != "parts_history_3" {
		t.Fatalf("streams %v", got)
	}
	var ids []string
	var rs []session.Record
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("s%02d", i)
		ids = append(ids, id)
		rs = append(rs, recs(id, 1, 2)...)
	}
	if err := s.Append(ctx, rs); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	total := 0
	for _, name := range s.StreamNames() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			t.Errorf("stream %s holds no session of 40", name)
		}
		total += int(info.State.Msgs)
	}
	if total != 40 { // one message per session
		t.Errorf("%d messages in the streams, want 40", total)
	}
	if got := listAll(t, s); strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("List = %v", got)
	}
	if s2 := open(t, srv, "parts", 0); s2.Partitions() != 4 || len(readAll(t, s2, "s07")) != 2 {
		t.Fatalf("reopened with partitions 0: %d partitions", s2.Partitions())
	}
	_, err = natsstore.Open(ctx, natsstore.Options{URL: srv.ClientURL(), Name: "parts", Replicas: 1, Partitions: 8})
	if err == nil || !strings.Contains(err.Error(), "MACP_NATS_PARTITIONS (Options.Partitions) 8 does not match") {
		t.Fatalf("Open with a mismatching partitions = %v", err)
	}
	if s3 := open(t, srv, "fresh", 0); s3.Partitions() != natsstore.DefaultPartitions {
		t.Fatalf("a new deployment has %d partitions, want %d", s3.Partitions(), natsstore.DefaultPartitions)
	}
}

// A deployment from before partitions (the one stream <name>_history, no
// recorded layout) stays on its stream: its history is readable and
// writable, the layout 1 is recorded, and asking for another is refused.
func TestOneStreamDeploymentKeepsItsStream(t *testing.T) {
	srv := natstest.Run(t)
	old := open(t, srv, "old", 1)
	if err := old.Append(ctx, recs("a", 1, 3)); err != nil {
		t.Fatal(err)
	}
	if got := old.Subject("a"); got != "old.hist.YQ" {
		t.Fatalf("one-stream subject %q, want old.hist.YQ", got)
	}
	// Remove the recorded layout: the bucket as a deployment from before
	// partitions left it.
	if err := old.MetaBucket().Purge(ctx, "layout"); err != nil {
		t.Fatal(err)
	}
	old.Close()
	s := open(t, srv, "old", 0)
	if s.Partitions() != 1 || s.StreamNames()[0] != "old_history" {
		t.Fatalf("partitions %d, streams %v", s.Partitions(), s.StreamNames())
	}
	if n := len(readAll(t, s, "a")); n != 3 {
		t.Fatalf("a: %d records, want 3", n)
	}
	if err := s.Append(ctx, []session.Record{rec("a", 4), rec("b", 1)}); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, s); strings.Join(got, ",") != "a,b" {
		t.Fatalf("List = %v", got)
	}
	_, err := natsstore.Open(ctx, natsstore.Options{URL: srv.ClientURL(), Name: "old", Replicas: 1, Partitions: 8})
	if err == nil || !strings.Contains(err.Error(), "keeps its history in 1 stream") {
		t.Fatalf("Open with partitions 8 over a one-stream deployment = %v", err)
	}
}
