package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/snapshot"
	"github.com/macpd/macpd/internal/snapshot/snapshotio"
)

// Issue 27 item 7: a cross_session_decay window lists only the later
// sessions the caller may observe, over HTTP as over gRPC, so one caller
// gets one state_snapshot_id for one state on both paths (before, the
// HTTP window listed every later session of the initiator, including
// ones alice may not read, and its id differed from macpctl snapshot's).
// The index the window reads follows sessions started after it was built.
func TestSnapshotDecayCandidatesPerCaller(t *testing.T) {
	a, cl := startApp(t)
	start := func(participants ...string) string {
		t.Helper()
		sid := uuid.NewString()
		r, err := cl.Send(as("coord"), &macpv1.SendRequest{Envelope: &macpv1.Envelope{MacpVersion: "1.0", Mode: "macp.mode.decision.v1",
			MessageType: "SessionStart", MessageId: uuid.NewString(), SessionId: sid, Sender: "coord", TimestampUnixMs: time.Now().UnixMilli(),
			Payload: mustMarshal(t, &macpv1.SessionStartPayload{Intent: "pick", Participants: participants, ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", TtlMs: 60000})}})
		if err != nil || !r.Ack.Ok {
			t.Fatalf("start: %v %v", r, err)
		}
		time.Sleep(2 * time.Millisecond) // distinct acceptance times keep the order obvious
		return sid
	}
	first := start("alice", "bob")
	withAlice := start("alice")
	bobOnly := start("bob")
	base := "http://" + a.HTTPAddr()
	window := func(who string, runs int) (snapshot.Hash, []snapshot.ID) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/macp/session/"+first+"/state-window?decay_runs="+string(rune('0'+runs)), nil)
		req.Header.Set("Authorization", "Bearer "+who)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var rep snapshot.Report
		if resp.StatusCode != 200 || json.Unmarshal(b, &rep) != nil {
			t.Fatalf("%s: %d %s", who, resp.StatusCode, b)
		}
		pay, _, err := a.Snapshots().Payload(t.Context(), string(rep.Snapshot.ContentsRef))
		if err != nil {
			t.Fatal(err)
		}
		var p snapshot.Payload
		if err := json.Unmarshal(pay, &p); err != nil {
			t.Fatal(err)
		}
		return rep.Snapshot.StateSnapshotID, p.Window.Subsequent
	}
	op := func(sid string) snapshot.ID { return snapshot.Opaque("macpd", "default", sid) }
	window("coord", 5)             // builds the index
	later := start("alice", "bob") // after it was built: the lifecycle feed adds it
	for _, w := range []struct {
		who  string
		want []snapshot.ID
	}{
		{"alice", []snapshot.ID{op(withAlice), op(later)}},
		{"bob", []snapshot.ID{op(bobOnly), op(later)}},
		{"coord", []snapshot.ID{op(withAlice), op(bobOnly), op(later)}},
	} {
		var id snapshot.Hash
		var sub []snapshot.ID
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if id, sub = window(w.who, 5); slices.Equal(sub, w.want) || time.Now().After(deadline) {
				break
			}
		}
		if !slices.Equal(sub, w.want) {
			t.Fatalf("%s: subsequent %v, want %v", w.who, sub, w.want)
		}
		// The same caller over gRPC (macpctl snapshot's path) gets the same id.
		in, subs, err := snapshotio.FromRuntime(as(w.who), cl, first, 5)
		if err != nil {
			t.Fatal(err)
		}
		p, err := snapshot.Build(in, snapshot.Options{EventSource: "macpd", ServerID: "default", DecayRuns: 5, Subsequent: subs})
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := snapshot.Seal(p)
		if err != nil || sealed.ID != id {
			t.Fatalf("%s: gRPC id %s, HTTP id %s (%v)", w.who, sealed.ID, id, err)
		}
	}
}
