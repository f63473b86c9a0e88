package app_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/snapshot"
	"github.com/macpd/macpd/internal/snapshot/snapshotio"
)

// The snapshot routes as the HTTP binding serves them (dev identities:
// the bearer token is the agent id): the report of a
// live session equals the one computed from what a client reads over
// gRPC, its payload is served by content address, and the runtime's read
// matrix decides (initiator and participants yes, others FORBIDDEN,
// unknown sessions SESSION_NOT_FOUND).
func TestSnapshotRoutes(t *testing.T) {
	a, c := startApp(t)
	sid := uuid.NewString()
	send := func(agent, typ, id string, payload []byte) {
		t.Helper()
		r, err := c.Send(as(agent), &macpv1.SendRequest{Envelope: &macpv1.Envelope{MacpVersion: "1.0", Mode: "macp.mode.decision.v1",
			MessageType: typ, MessageId: id, SessionId: sid, Sender: agent, TimestampUnixMs: time.Now().UnixMilli(), Payload: payload}})
		if err != nil || !r.Ack.Ok {
			t.Fatalf("%s: %v %v", typ, r, err)
		}
	}
	send("coord", "SessionStart", "m0", mustMarshal(t, &macpv1.SessionStartPayload{Intent: "pick", Participants: []string{"alice", "bob"},
		ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", TtlMs: 60000}))
	send("coord", "Proposal", "m1", mustMarshal(t, &decisionv1.ProposalPayload{ProposalId: "p1", Option: "x"}))

	base := "http://" + a.HTTPAddr()
	get := func(path, who string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if who != "" {
			req.Header.Set("Authorization", "Bearer "+who)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, rep := get("/macp/session/"+sid+"/state-window", "alice")
	if code != 200 {
		t.Fatalf("%d %s", code, rep)
	}
	in, _, err := snapshotio.FromRuntime(as("alice"), c, sid, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := snapshot.Build(in, snapshot.Options{EventSource: "macpd", ServerID: "default"})
	sealed, err := snapshot.Seal(p)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := snapshot.NewReport(sealed).Bytes()
	if rep != string(want) {
		t.Fatalf("http report %s\nwire report %s", rep, want)
	}
	if code, body := get("/macp/snapshots/"+string(sealed.ID), "bob"); code != 200 || body != string(sealed.Bytes) {
		t.Fatalf("payload: %d %s", code, body)
	}
	for _, c := range []struct {
		path, who string
		status    int
	}{
		{"/macp/session/" + sid + "/state-window", "mallory", 403},
		{"/macp/session/" + sid + "/state-window", "", 401},
		{"/macp/snapshots/" + string(sealed.ID), "mallory", 403},
		{"/macp/session/" + uuid.NewString() + "/state-window", "alice", 404},
	} {
		if code, body := get(c.path, c.who); code != c.status {
			t.Errorf("%s as %q: %d %s", c.path, c.who, code, body)
		}
	}
}
