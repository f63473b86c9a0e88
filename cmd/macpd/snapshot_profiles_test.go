package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/cmthash"
	"github.com/macpd/macpd/sdk"
)

// Sessions of the profile-latest determinism run (issue 31).
const (
	detLResumed     = "9f5c7a8e-1b6d-4c2e-9fa0-4e5b6c7d8e9f"
	detLCancelled   = "a06d8b9f-2c7e-4d3f-8ab1-5f6c7d8e9fa0"
	detLSuperseding = "b17e9ca0-3d8f-4e4a-9bc2-6a7d8e9fa0b1"
	detLSuspended   = "c28fadb1-4e9a-4f5b-8cd3-7b8e9fa0b1c2"
)

// feedLatest sends the fixed envelopes of the latest run: a session
// suspended, resumed (after a pause that differs between the runs, so
// banked_ms differs) and resolved; one cancelled (CANCELLED under
// 2026-09); one resolved by a Commitment superseding the first one's by
// its RFC-MACP-0013 hash; one left SUSPENDED. Free text carries canaries.
func feedLatest(t *testing.T, p *macpdProc, pause time.Duration) {
	t.Helper()
	ctx := context.Background()
	cls := map[string]*sdk.Client{"coord": p.client(t, "coord"), "alice": p.client(t, "alice"), "bob": p.client(t, "bob")}
	const mode = "macp.mode.decision.v1"
	send := func(who, sid, id, typ string, payload []byte) {
		t.Helper()
		ack, err := cls[who].Send(ctx, &macpv1.Envelope{MacpVersion: "1.0", Mode: mode, MessageType: typ, MessageId: id,
			SessionId: sid, Sender: who, TimestampUnixMs: time.Now().UnixMilli(), Payload: payload})
		if err != nil || !ack.GetOk() {
			t.Fatalf("%s %s in %s: %v %v", who, typ, sid, ack, err)
		}
	}
	start := func(sid string) {
		send("coord", sid, "start-"+sid, "SessionStart", mustPB(&macpv1.SessionStartPayload{
			Intent: canaries[0], Participants: []string{"alice", "bob"}, ModeVersion: "1.0.0", ConfigurationVersion: "cfg-7",
			TtlMs: 600_000, ContextId: canaries[7], Extensions: map[string][]byte{"x-note": []byte(canaries[1])}}))
		// The newest Decision rules admit proposals from declared
		// participants only.
		send("alice", sid, "prop-"+sid, "Proposal", mustPB(&decisionv1.ProposalPayload{ProposalId: "p1", Option: "postgres", Rationale: canaries[2]}))
	}
	control := func(op string, sid string) {
		t.Helper()
		var ack *macpv1.Ack
		var err error
		switch op {
		case "suspend":
			ack, err = cls["coord"].SuspendSession(ctx, sid, canaries[5])
		case "resume":
			ack, err = cls["coord"].ResumeSession(ctx, sid, canaries[5])
		case "cancel":
			ack, err = cls["coord"].CancelSession(ctx, sid, canaries[5])
		}
		if err != nil || !ack.GetOk() {
			t.Fatalf("%s %s: %v %v", op, sid, ack, err)
		}
	}
	commitment := func(sid string) *macpv1.CommitmentPayload {
		return &macpv1.CommitmentPayload{CommitmentId: "c-" + sid, Action: "decision.selected", AuthorityScope: "team",
			Reason: canaries[4], ModeVersion: "1.0.0", ConfigurationVersion: "cfg-7", OutcomePositive: true}
	}
	vote := func(sid string) {
		send("alice", sid, "vote-a-"+sid, "Vote", mustPB(&decisionv1.VotePayload{ProposalId: "p1", Vote: "APPROVE", Reason: canaries[3]}))
	}

	start(detLResumed)
	control("suspend", detLResumed)
	time.Sleep(pause)
	control("resume", detLResumed)
	vote(detLResumed)
	first := commitment(detLResumed)
	send("coord", detLResumed, "commit-"+detLResumed, "Commitment", mustPB(first))

	start(detLCancelled)
	control("cancel", detLCancelled)

	start(detLSuperseding)
	vote(detLSuperseding)
	h, err := cmthash.Hash(first)
	if err != nil {
		t.Fatal(err)
	}
	c := commitment(detLSuperseding)
	c.Supersedes = &macpv1.CommitmentRef{SessionId: detLResumed, CommitmentHash: h}
	send("coord", detLSuperseding, "commit-"+detLSuperseding, "Commitment", mustPB(c))

	start(detLSuspended)
	control("suspend", detLSuspended)
}

// Issue 31: two macpd processes bound to profile latest, with different
// data directories, time zones, working directories, GOMAXPROCS and
// wall-clock times (and suspensions of different lengths, so the recorded
// banked_ms differ), give a suspended-resumed-resolved session, a
// CANCELLED one, a superseding one and a SUSPENDED one the same ids over
// the wire (both privacy profiles) and in the MACP_SNAPSHOT_DIR files of
// the ended ones (a SUSPENDED session is not ended: no file); the ids
// equal the checked-in golden ones; no canary reaches a snapshot, report
// or log; the superseding payload holds the reference as hashes only.
func TestSnapshotIDsAcrossProcessesLatest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds macpd and runs it twice: make test-all")
	}
	sessions := []string{detLResumed, detLCancelled, detLSuperseding, detLSuspended}
	ended := []string{detLResumed, detLCancelled, detLSuperseding}

	a := startDetMacpd(t, "UTC", "1", "MACP_PROFILE=latest")
	feedLatest(t, a, 20*time.Millisecond)
	idsA, textsA := collectSessions(t, a, sessions, ended)
	a.stop(t)

	time.Sleep(1100 * time.Millisecond)
	b := startDetMacpd(t, "Asia/Kathmandu", "3", "MACP_PROFILE=latest")
	feedLatest(t, b, 700*time.Millisecond)
	idsB, textsB := collectSessions(t, b, sessions, ended)
	b.stop(t)

	if len(idsA) != 2*len(sessions)+len(ended) {
		t.Fatalf("collected %d ids: %v", len(idsA), idsA)
	}
	for k, v := range idsA {
		if idsB[k] != v {
			t.Errorf("%s: %s vs %s", k, v, idsB[k])
		}
	}
	for _, sid := range ended {
		if idsA[sid+"/file"] != idsA[sid+"/default"] {
			t.Errorf("%s: the written file's id differs from the wire one", sid)
		}
	}
	if _, err := os.Stat(filepath.Join(a.snapDir, "reports", detLSuspended+".json")); err == nil {
		t.Error("a SUSPENDED session got a snapshot file")
	}

	golden := filepath.Join("testdata", "snapshot_ids_latest.json")
	if *updateSnapshotIDs {
		out, _ := json.MarshalIndent(idsA, "", "  ")
		if err := os.WriteFile(golden, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gb, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update-snapshot-ids to create it)", err)
	}
	var want map[string]string
	if err := json.Unmarshal(gb, &want); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(want) != fmt.Sprint(idsA) {
		t.Errorf("ids differ from %s:\n got %v\nwant %v", golden, idsA, want)
	}

	sawRef, sawProfile := false, false
	for i, s := range append(textsA, textsB...) {
		assertNoCanary(t, fmt.Sprintf("snapshot text %d", i), s)
		for _, sid := range sessions {
			if strings.Contains(s, sid) {
				t.Errorf("snapshot text %d holds raw session id %s", i, sid)
			}
		}
		sawRef = sawRef || strings.Contains(s, `"supersedes":{"commitment_hash":"sha256:`)
		sawProfile = sawProfile || strings.Contains(s, `"protocol_profile":"2026-09"`)
	}
	if !sawRef || !sawProfile {
		t.Errorf("no payload names the supersedes reference (%v) or the profile (%v)", sawRef, sawProfile)
	}
	assertNoCanary(t, "macpd log (first run)", a.out.String())
	assertNoCanary(t, "macpd log (second run)", b.out.String())
}
