package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/httpapi"
	"github.com/macpd/macpd/internal/testutil/apptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

func startApp(t *testing.T) (*app.App, macpv1.MACPRuntimeServiceClient) {
	t.Helper()
	a := apptest.Start(t, func(c *config.Config) { c.HTTP.Addr = "127.0.0.1:0" }) // the snapshot routes are tested through it
	return a, macpv1.NewMACPRuntimeServiceClient(apptest.Dial(t, a.Addr()))
}

func as(agent string) context.Context { return apptest.As(agent) }

func mustMarshal(t *testing.T, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A complete Decision session over gRPC: RFC-MACP-0007 happy path, with the
// sender bound to the authenticated identity (RFC-MACP-0004 §3).
func TestDecisionSessionOverGRPC(t *testing.T) {
	_, c := startApp(t)
	sid := uuid.NewString()
	env := func(sender, typ, id string, payload []byte) *macpv1.Envelope {
		return &macpv1.Envelope{MacpVersion: "1.0", Mode: "macp.mode.decision.v1", MessageType: typ, MessageId: id,
			SessionId: sid, Sender: sender, TimestampUnixMs: time.Now().UnixMilli(), Payload: payload}
	}
	send := func(agent string, e *macpv1.Envelope) *macpv1.Ack {
		t.Helper()
		r, err := c.Send(as(agent), &macpv1.SendRequest{Envelope: e})
		if err != nil {
			t.Fatal(err)
		}
		return r.Ack
	}
	start := mustMarshal(t, &macpv1.SessionStartPayload{Intent: "pick", Participants: []string{"alice", "bob"},
		ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", TtlMs: 60000})
	if ack := send("coord", env("spoofed", "SessionStart", "m0", start)); !ack.Ok {
		t.Fatalf("start: %v", ack)
	}
	if ack := send("coord", env("coord", "Proposal", "m1", mustMarshal(t, &decisionv1.ProposalPayload{ProposalId: "p1", Option: "x"}))); !ack.Ok {
		t.Fatalf("proposal: %v", ack)
	}
	if ack := send("alice", env("alice", "Vote", "m2", mustMarshal(t, &decisionv1.VotePayload{ProposalId: "p1", Vote: "APPROVE"}))); !ack.Ok {
		t.Fatalf("vote: %v", ack)
	}
	commit := mustMarshal(t, &macpv1.CommitmentPayload{CommitmentId: "c1", Action: "decision.selected", AuthorityScope: "s",
		Reason: "r", ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", OutcomePositive: true})
	if ack := send("alice", env("alice", "Commitment", "m3", commit)); ack.Ok || ack.Error.Code != "FORBIDDEN" {
		t.Fatalf("non-initiator commitment: %v", ack)
	}
	ack := send("coord", env("coord", "Commitment", "m3", commit))
	if !ack.Ok || ack.SessionState != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("commitment: %v", ack)
	}
	if ack := send("coord", env("coord", "Commitment", "m3", commit)); !ack.Ok || !ack.Duplicate {
		t.Fatalf("retried commitment must be a duplicate: %v", ack)
	}
	md, err := c.GetSession(as("alice"), &macpv1.GetSessionRequest{SessionId: sid})
	if err != nil {
		t.Fatal(err)
	}
	if md.Metadata.Initiator != "coord" || md.Metadata.State != macpv1.SessionState_SESSION_STATE_RESOLVED {
		t.Fatalf("metadata: %v", md.Metadata)
	}
}

// The default store is durable (issue #4): a session and its dedup set
// survive a shutdown and a restart on the same data directory.
func TestDurableDefaultSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.BindAddr = "127.0.0.1:0"
	cfg.AllowInsecure = true
	cfg.DataDir = dir
	if cfg.MemoryOnly {
		t.Fatal("the default configuration must be durable")
	}
	run := func(fn func(c macpv1.MACPRuntimeServiceClient)) {
		a, err := app.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		fn(macpv1.NewMACPRuntimeServiceClient(conn))
		conn.Close()
		if err := a.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sid := uuid.NewString()
	start := &macpv1.Envelope{MacpVersion: "1.0", Mode: "macp.mode.decision.v1", MessageType: "SessionStart", MessageId: "m0",
		SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: mustMarshal(t, &macpv1.SessionStartPayload{
			Participants: []string{"alice"}, ModeVersion: "1.0.0", ConfigurationVersion: "c", TtlMs: 60000})}
	run(func(c macpv1.MACPRuntimeServiceClient) {
		r, err := c.Send(as("coord"), &macpv1.SendRequest{Envelope: start})
		if err != nil || !r.Ack.Ok {
			t.Fatalf("start: %v %v", r, err)
		}
	})
	run(func(c macpv1.MACPRuntimeServiceClient) {
		r, err := c.Send(as("coord"), &macpv1.SendRequest{Envelope: start})
		if err != nil || !r.Ack.Ok || !r.Ack.Duplicate {
			t.Fatalf("resent start after restart must be a duplicate: %v %v", r, err)
		}
		md, err := c.GetSession(as("alice"), &macpv1.GetSessionRequest{SessionId: sid})
		if err != nil || md.Metadata.State != macpv1.SessionState_SESSION_STATE_OPEN || md.Metadata.Initiator != "coord" {
			t.Fatalf("after restart: %v %v", md, err)
		}
	})
}

// Initialize advertises protocol-mode session resume and its replay window
// under capabilities.experimental when the HTTP listener serves it
// (issue 14; docs/resume.md).
func TestInitializeAdvertisesResume(t *testing.T) {
	_, c := startApp(t)
	resp, err := c.Initialize(context.Background(), &macpv1.InitializeRequest{SupportedProtocolVersions: []string{"1.0"}})
	if err != nil {
		t.Fatal(err)
	}
	f := resp.GetCapabilities().GetExperimental().GetFeatures()
	if f[httpapi.ResumeCapability] == "" || f[httpapi.ResumeCapability+".replay_window"] != "0" || f["ext_mode_lifecycle"] != "true" {
		t.Fatalf("experimental features %v", f)
	}
	// GetManifest says the same (as /.well-known/macp.json does).
	m, err := c.GetManifest(context.Background(), &macpv1.GetManifestRequest{})
	if err != nil {
		t.Fatal(err)
	}
	md := m.GetManifest().GetMetadata()
	if md["experimental."+httpapi.ResumeCapability] != f[httpapi.ResumeCapability] || md["experimental."+httpapi.ResumeCapability+".replay_window"] != "0" {
		t.Fatalf("manifest metadata %v", md)
	}
}
