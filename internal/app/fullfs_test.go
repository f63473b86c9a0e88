package app_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store/pebblestore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// mountTmpfs mounts a tmpfs of size bytes at dir. It needs root; without
// it the test is skipped, except under CI=true, where it fails.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("cannot mount a %s tmpfs at %s (needs root): %v %s", size, dir, err, out)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
}

func mustBytes(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// A real full disk (docs/security.md "Storage faults"): macpd's data
// directory on an 8 MiB tmpfs, written with 256 KiB Proposals until the
// disk is full. Every Send is either acknowledged or refused with
// INTERNAL_ERROR (never a transport error, never ok without durability);
// once the store failed, /healthz answers 503 and macpd_store_failed is 1,
// and the store stays failed (no write is retried). After a restart on
// the same directory (with room again), the history holds every
// acknowledged envelope, in order, and nothing that was never sent.
func TestFullDiskNeverAcknowledgesAndRecovers(t *testing.T) {
	root := t.TempDir()
	disk := filepath.Join(root, "disk")
	if err := os.Mkdir(disk, 0o755); err != nil {
		t.Fatal(err)
	}
	mountTmpfs(t, disk, "8m")
	dir := filepath.Join(disk, "data")

	cfg := config.Default()
	cfg.DataDir, cfg.BindAddr, cfg.AllowInsecure, cfg.AdminAddr = dir, "127.0.0.1:0", true, "127.0.0.1:0"
	cfg.Limits.SessionStartsPerMinute, cfg.Limits.MessagesPerMinute = 0, 0
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
	defer conn.Close()
	c := macpv1.NewMACPRuntimeServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer alice")
	send := func(env *macpv1.Envelope) *macpv1.Ack {
		r, err := c.Send(ctx, &macpv1.SendRequest{Envelope: env})
		if err != nil {
			t.Fatalf("Send %s: gRPC error %v (a full disk is an INTERNAL_ERROR Ack)", env.MessageId, err)
		}
		return r.Ack
	}
	sid := uuid.NewString()
	start := &macpv1.Envelope{MacpVersion: "1.0", Mode: "macp.mode.decision.v1", MessageType: "SessionStart", MessageId: "start",
		SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: mustBytes(&macpv1.SessionStartPayload{
			Intent: "fill the disk", Participants: []string{"alice", "bob"}, ModeVersion: "1.0.0", ConfigurationVersion: "c", TtlMs: 600000})}
	if ack := send(start); !ack.Ok {
		t.Fatalf("start: %v", ack.Error)
	}
	acked := []string{"start"}
	filler := strings.Repeat("f", 256<<10)
	refused := 0
	for i := 0; i < 200 && refused < 3; i++ {
		id := fmt.Sprintf("p%d", i)
		ack := send(&macpv1.Envelope{MacpVersion: "1.0", Mode: "macp.mode.decision.v1", MessageType: "Proposal", MessageId: id,
			SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(),
			Payload: mustBytes(&decisionv1.ProposalPayload{ProposalId: id, Option: "x", Rationale: filler})})
		switch {
		case ack.Ok:
			if refused > 0 {
				t.Fatalf("%s acknowledged after the store failed", id)
			}
			acked = append(acked, id)
		case ack.GetError().GetCode() == "INTERNAL_ERROR":
			refused++
		default:
			t.Fatalf("%s: %v, want ok or INTERNAL_ERROR", id, ack.Error)
		}
	}
	if refused == 0 {
		t.Fatalf("the 8 MiB disk never filled (%d acknowledged)", len(acked))
	}
	admin := "http://" + a.AdminAddr()
	code, body := httpGet(t, admin+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "restart required") {
		t.Fatalf("/healthz with a failed store: %d %q", code, body)
	}
	if _, m := httpGet(t, admin+"/metrics"); !strings.Contains(m, "\nmacpd_store_failed 1\n") {
		t.Fatal("/metrics does not report macpd_store_failed 1")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = a.Shutdown(sctx) // may report the failure

	// Restart with room again: exactly the acknowledged history.
	if out, err := exec.Command("mount", "-o", "remount,size=64m", disk).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v %s", err, out)
	}
	ps, err := pebblestore.Open(dir, pebblestore.Options{})
	if err != nil {
		t.Fatalf("reopening the store after the full disk: %v", err)
	}
	defer ps.Close()
	var got []string
	err = ps.Read(context.Background(), sid, 1, func(rec session.Record) error {
		if rec.Envelope != nil {
			got = append(got, rec.Envelope.MessageId)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < len(acked) || !slicesEqual(got[:len(acked)], acked) {
		t.Fatalf("history after restart %v, acknowledged %v", got, acked)
	}
	for _, id := range got[len(acked):] { // sent, answered INTERNAL_ERROR, yet durable: allowed
		if !strings.HasPrefix(id, "p") {
			t.Fatalf("history holds %s, never sent", id)
		}
	}
	t.Logf("%d acknowledged, %d refused once the disk was full; %d in history after restart", len(acked), refused, len(got))
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
