package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/wire"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

const decisionMode = "macp.mode.decision.v1"

// env is a running macpd with both listeners.
type env struct {
	a    *app.App
	base string // http://127.0.0.1:port
	c    macpv1.MACPRuntimeServiceClient

	mu      sync.Mutex
	clients map[string]*sdk.Client
}

func testConfig() config.Config {
	cfg := config.Default()
	cfg.MemoryOnly = true
	cfg.BindAddr = "127.0.0.1:0"
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.AllowInsecure = true
	cfg.Limits.SessionStartsPerMinute, cfg.Limits.MessagesPerMinute = 0, 0
	return cfg
}

// startAppTLS starts cfg (TLS configured) without a gRPC client.
func startAppTLS(t testing.TB, cfg config.Config) *env {
	t.Helper()
	a, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	return &env{a: a, base: "http://" + a.HTTPAddr()}
}

func startApp(t testing.TB, cfg config.Config) *env {
	t.Helper()
	a, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	conn, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &env{a: a, base: "http://" + a.HTTPAddr(), c: macpv1.NewMACPRuntimeServiceClient(conn)}
}

func as(agent string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+agent)
}

// do sends a request as agent ("" = no credentials) and returns status
// and body.
func (e *env) do(t testing.TB, method, path, agent, ctype string, body []byte, hdr ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if agent != "" {
		req.Header.Set("Authorization", "Bearer "+agent)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// post posts a JSON envelope (already encoded) to /macp/envelope.
func (e *env) post(t testing.TB, agent string, js string) (int, []byte) {
	t.Helper()
	return e.do(t, "POST", "/macp/envelope", agent, "application/json", []byte(js))
}

// mustAck posts and requires 200 ok.
func (e *env) mustAck(t testing.TB, path, agent, js string) *macpv1.Ack {
	t.Helper()
	code, b := e.do(t, "POST", path, agent, "application/json", []byte(js))
	if code != 200 {
		t.Fatalf("POST %s: %d %s", path, code, b)
	}
	ack := &macpv1.Ack{}
	if err := protojson.Unmarshal(b, ack); err != nil {
		t.Fatalf("ack %s: %v", b, err)
	}
	if !ack.Ok {
		t.Fatalf("not ok: %s", b)
	}
	return ack
}

// startJSON is a SessionStart envelope in the canonical JSON form
// (payload object, RFC 3339 timestamp).
func startJSON(sid string, participants ...string) string {
	p, _ := json.Marshal(participants)
	return fmt.Sprintf(`{"macp_version":"1.0","mode":%q,"message_type":"SessionStart","message_id":%q,"session_id":%q,`+
		`"timestamp":%q,"payload":{"intent":"pick","participants":%s,"mode_version":"1.0.0","configuration_version":"cfg-1","ttl_ms":600000}}`,
		decisionMode, uuid.NewString(), sid, time.Now().UTC().Format(time.RFC3339Nano), p)
}

func proposalJSON(sid, msgID, pid string) string {
	return fmt.Sprintf(`{"macp_version":"1.0","mode":%q,"message_type":"Proposal","message_id":%q,"session_id":%q,`+
		`"payload":{"proposal_id":%q,"option":"opt-%s"}}`, decisionMode, msgID, sid, pid, pid)
}

// startSession starts a decision session by coord with participants over HTTP.
func (e *env) startSession(t testing.TB, participants ...string) string {
	t.Helper()
	sid := uuid.NewString()
	e.mustAck(t, "/macp/session/start", "coord", startJSON(sid, participants...))
	return sid
}

// grpcProposal sends a proposal over gRPC.
func (e *env) grpcProposal(t testing.TB, agent, sid, msgID string) *macpv1.Ack {
	t.Helper()
	p, _ := proto.Marshal(&decisionv1.ProposalPayload{ProposalId: msgID, Option: "o"})
	r, err := e.c.Send(as(agent), &macpv1.SendRequest{Envelope: &macpv1.Envelope{MacpVersion: "1.0", Mode: decisionMode,
		MessageType: "Proposal", MessageId: msgID, SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: p}})
	if err != nil {
		t.Fatal(err)
	}
	return r.Ack
}

// macpError decodes an error body.
func macpError(t testing.TB, b []byte) *macpv1.MACPError {
	t.Helper()
	me := &macpv1.MACPError{}
	if err := protojson.Unmarshal(b, me); err != nil || me.Code == "" {
		t.Fatalf("not a MACPError: %s (%v)", b, err)
	}
	return me
}

// storedEnvelopes reads the session's stored history (the bytes every
// transport must reproduce), envelopes only, keyed by sequence number.
func (e *env) stored(t testing.TB, sid string) map[uint64][]byte {
	return e.storedRange(t, sid, 1, 0)
}

// storedRange is stored from sequence number from, at most n records (0 = all).
func (e *env) storedRange(t testing.TB, sid string, from uint64, n int) map[uint64][]byte {
	t.Helper()
	out := map[uint64][]byte{}
	errEnough := fmt.Errorf("enough")
	err := e.a.Runtime().Store().Read(context.Background(), sid, from, func(rec session.Record) error {
		if n > 0 && rec.Seq >= from+uint64(n) {
			return errEnough
		}
		if rec.Envelope != nil {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec.Envelope)
			if err != nil {
				return err
			}
			out[rec.Seq] = b
		}
		return nil
	})
	if err != nil && err != errEnough {
		t.Fatal(err)
	}
	return out
}

func wireBytes(t testing.TB, env *macpv1.Envelope) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeEnvelopeJSON(t testing.TB, b []byte) *macpv1.Envelope {
	t.Helper()
	env := &macpv1.Envelope{}
	if err := protojson.Unmarshal(b, env); err != nil {
		t.Fatalf("envelope JSON %s: %v", b, err)
	}
	return env
}

var _ = strings.TrimSpace

// decodeCanonical reads a canonical-form envelope (the polling feed's
// items) with the server's own decoder, minus the feed's extra fields.
func decodeCanonical(js []byte) (*macpv1.Envelope, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, err
	}
	delete(m, "seq")
	delete(m, "proposal_id")
	b, _ := json.Marshal(m)
	env, cerr := wire.DecodeEnvelope(b)
	if cerr != nil {
		return nil, cerr
	}
	return env, nil
}
