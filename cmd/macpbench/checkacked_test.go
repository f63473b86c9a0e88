package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clikit"
	"github.com/macpd/macpd/internal/clikit/clitest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// historyServer serves GetSession and StreamSession subscriptions from
// fixed histories (message ids; "Commitment" ends a history).
type historyServer struct {
	macpv1.UnimplementedMACPRuntimeServiceServer
	h map[string][]string
}

func bearerOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	return strings.Join(md.Get("authorization"), ",")
}

func (s *historyServer) GetSession(ctx context.Context, req *macpv1.GetSessionRequest) (*macpv1.GetSessionResponse, error) {
	if bearerOf(ctx) != "Bearer load-initiator" {
		return nil, status.Error(codes.PermissionDenied, "FORBIDDEN: not the initiator")
	}
	if _, ok := s.h[req.GetSessionId()]; !ok {
		return nil, status.Error(codes.NotFound, "SESSION_NOT_FOUND: no such session")
	}
	return &macpv1.GetSessionResponse{Metadata: &macpv1.SessionMetadata{SessionId: req.GetSessionId()}}, nil
}

func (s *historyServer) StreamSession(st grpc.BidiStreamingServer[macpv1.StreamSessionRequest, macpv1.StreamSessionResponse]) error {
	req, err := st.Recv()
	if err != nil {
		return err
	}
	for _, id := range s.h[req.GetSubscribeSessionId()] {
		env := &macpv1.Envelope{SessionId: req.GetSubscribeSessionId(), MessageId: id, MessageType: "Evaluation"}
		if id == "Commitment" {
			env.MessageType = "Commitment"
		}
		if err := st.Send(&macpv1.StreamSessionResponse{Response: &macpv1.StreamSessionResponse_Envelope{Envelope: env}}); err != nil {
			return err
		}
	}
	<-st.Context().Done() // a live subscription stays open
	return nil
}

func startHistoryServer(t *testing.T, h map[string][]string) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	macpv1.RegisterMACPRuntimeServiceServer(g, &historyServer{h: h})
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func writeLog(t *testing.T, lines ...string) string {
	p := filepath.Join(t.TempDir(), "acked.log")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckAcked(t *testing.T) {
	addr := startHistoryServer(t, map[string][]string{
		"s1": {"start", "a", "b", "Commitment"},
		"s2": {"start", "y", "x", "x"},
	})
	r := newRunner(t, nil)
	res := r.Ok("check-acked", "--addr", addr, "--insecure", "--idle", "50ms",
		writeLog(t, "s1\tstart\t0", "s1\ta\t0", "s1\tb\t0", "s1\tCommitment\t0", "s2\tstart\t0", "s2\ty\t0"))
	if got := res.Lines()[len(res.Lines())-1]; got != "6 acked checked, 0 missing, 0 duplicated, 0 out of order" {
		t.Fatalf("%s", res.Out)
	}

	res = r.Run("check-acked", "--addr", addr, "--insecure", "--idle", "50ms",
		writeLog(t, "s1\tstart\t0", "s1\tb\t0", "s1\ta\t0", "s1\tlost\t0", "s2\tx\t0", "s3\tm\t0"))
	if res.Code != clikit.ExitRejected {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Out, res.ErrOut)
	}
	for _, want := range []string{
		"out-of-order session s1 message a: acked after b",
		"missing session s1 message lost",
		"duplicated session s2 message x: appears 2 times",
		"no-session session s3",
		"missing session s3 message m",
		"6 acked checked, 2 missing, 1 duplicated, 1 out of order\n",
	} {
		if !strings.Contains(res.Out, want) {
			t.Errorf("output lacks %q:\n%s", want, res.Out)
		}
	}

	// --show limits the problems printed, not the summary.
	res = r.Run("check-acked", "--addr", addr, "--insecure", "--idle", "50ms", "--show", "1",
		writeLog(t, "s3\tm1", "s3\tm2", "s3\tm3"))
	if res.Code != clikit.ExitRejected || !strings.Contains(res.Out, "... and 3 more problem(s)") || !strings.Contains(res.Out, "3 missing") {
		t.Fatalf("exit %d\n%s", res.Code, res.Out)
	}

	// Another identity may not read the sessions.
	res = r.Run("check-acked", "--addr", addr, "--insecure", "--agent", "mallory", writeLog(t, "s1\tstart"))
	if res.Code != clikit.ExitRejected || !strings.Contains(res.Out, "read-failed session s1") || !strings.Contains(res.Out, "1 session(s) unreadable") {
		t.Fatalf("exit %d\n%s", res.Code, res.Out)
	}
}

func TestCheckAckedUsage(t *testing.T) {
	r := newRunner(t, nil)
	for _, args := range [][]string{
		{},
		{"/nonexistent/acked.log"},
		{writeLog(t, "only-one-field")},
		{"a", "b"},
	} {
		if res := r.Run(append([]string{"check-acked", "--insecure"}, args...)...); res.Code != clikit.ExitUsage {
			t.Errorf("check-acked %v: exit %d, want %d\n%s", args, res.Code, clikit.ExitUsage, res.ErrOut)
		}
	}
}

// End to end against macpd: load with an acked log, then check it.
func TestLoadThenCheckAcked(t *testing.T) {
	a := clitest.StartApp(t)
	r := newRunner(t, nil)
	log := filepath.Join(t.TempDir(), "acked.log")
	r.Ok("load", "--addr", a.Addr(), "--insecure", "--sessions", "3", "--messages", "10", "--senders", "2", "--commit", "--acked-log", log)
	res := r.Run("check-acked", "--addr", a.Addr(), "--insecure", "--idle", "200ms", log)
	if res.Code != 0 || !strings.Contains(res.Out, "36 acked checked, 0 missing, 0 duplicated, 0 out of order") {
		t.Fatalf("exit %d\n%s%s", res.Code, res.Out, res.ErrOut)
	}
}
