package loadgen_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/bench/loadgen"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// fakeHistory maps a session to its history of message ids.
type fakeHistory map[string][]string

func (f fakeHistory) History(_ context.Context, sid string) ([]*macpv1.Envelope, error) {
	ids, ok := f[sid]
	if !ok {
		return nil, errors.New("boom")
	}
	envs := make([]*macpv1.Envelope, len(ids))
	for i, id := range ids {
		envs[i] = &macpv1.Envelope{SessionId: sid, MessageId: id, MessageType: id}
	}
	return envs, nil
}

func (f fakeHistory) exists(_ context.Context, sid string) error {
	if sid == "gone" {
		return fmt.Errorf("GetSession: %w", loadgen.ErrNoSession)
	}
	if sid == "flaky" {
		return errors.New("unavailable")
	}
	return nil
}

func parse(t *testing.T, log string) []loadgen.Acked {
	t.Helper()
	a, err := loadgen.ReadAckedLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func check(t *testing.T, h fakeHistory, log string) *loadgen.Report {
	t.Helper()
	return loadgen.Checker{History: h, Exists: h.exists}.Check(context.Background(), parse(t, log))
}

// kinds lists "kind session message" of each problem.
func kinds(r *loadgen.Report) []string {
	var out []string
	for _, p := range r.Problems {
		out = append(out, fmt.Sprintf("%s %s %s", p.Kind, p.SessionID, p.MessageID))
	}
	return out
}

func TestCheckClean(t *testing.T) {
	h := fakeHistory{"s1": {"a", "b", "c", "d"}, "s2": {"x", "y"}}
	// Acked order is a subsequence of history order (c unlogged: its ack
	// was lost); a duplicate ack line counts once; two-column lines and
	// comments are accepted.
	r := check(t, h, "# log\ns1\ta\ns2 x\ns1\tb\ns1\tb\ns1\td\ns2\ty\n")
	if !r.OK() || r.Checked != 5 || r.Sessions != 2 {
		t.Fatalf("%s %v", r.Summary(), r.Problems)
	}
	if got := r.Summary(); got != "5 acked checked, 0 missing, 0 duplicated, 0 out of order" {
		t.Fatalf("summary %q", got)
	}
}

func TestCheckMissing(t *testing.T) {
	h := fakeHistory{"s1": {"a", "c"}}
	r := check(t, h, "s1\ta\ns1\tb\ns1\tc\n")
	if r.Missing != 1 || r.Duplicated != 0 || r.OutOfOrder != 0 || r.Checked != 3 {
		t.Fatalf("%s", r.Summary())
	}
	if k := kinds(r); len(k) != 1 || k[0] != "missing s1 b" {
		t.Fatalf("%v", k)
	}
	if !strings.Contains(r.Problems[0].String(), "log line 2") {
		t.Fatalf("%s", r.Problems[0])
	}
}

func TestCheckDuplicated(t *testing.T) {
	h := fakeHistory{"s1": {"a", "b", "a", "c"}}
	r := check(t, h, "s1\ta\ns1\tb\ns1\tc\n")
	if r.Duplicated != 1 || r.Missing != 0 || r.OutOfOrder != 0 {
		t.Fatalf("%s %v", r.Summary(), kinds(r))
	}
	if k := kinds(r); k[0] != "duplicated s1 a" || !strings.Contains(r.Problems[0].Detail, "2 times") {
		t.Fatalf("%v %v", k, r.Problems)
	}
}

func TestCheckOutOfOrder(t *testing.T) {
	h := fakeHistory{"s1": {"a", "c", "b", "d"}}
	r := check(t, h, "s1\ta\ns1\tb\ns1\tc\ns1\td\n")
	if r.OutOfOrder != 1 || r.Missing != 0 || r.Duplicated != 0 {
		t.Fatalf("%s %v", r.Summary(), kinds(r))
	}
	if k := kinds(r); k[0] != "out-of-order s1 c" || !strings.Contains(r.Problems[0].Detail, "acked after b") {
		t.Fatalf("%v %v", k, r.Problems)
	}
}

// Order is only required within a stream: concurrent senders' acks may
// be logged in any order relative to each other.
func TestCheckStreams(t *testing.T) {
	h := fakeHistory{"s1": {"start", "a1", "b1", "a2", "b2"}}
	r := check(t, h, "s1\tstart\t0\ns1\tb1\t1\ns1\ta1\t0\ns1\tb2\t1\ns1\ta2\t0\n")
	if !r.OK() {
		t.Fatalf("%s %v", r.Summary(), r.Problems)
	}
	// The same lines without streams: one stream, so a1 after b1 is out
	// of order.
	r = check(t, h, "s1\tstart\ns1\tb1\ns1\ta1\ns1\tb2\ns1\ta2\n")
	if r.OutOfOrder != 2 {
		t.Fatalf("%s %v", r.Summary(), kinds(r))
	}
	// Within stream 1, b2 before b1 is out of order.
	r = check(t, h, "s1\tb2\t1\ns1\tb1\t1\n")
	if k := kinds(r); len(k) != 1 || k[0] != "out-of-order s1 b1" {
		t.Fatalf("%v", k)
	}
}

// Every kind at once, across sessions, each reported with its session and
// message ids.
func TestCheckAllKinds(t *testing.T) {
	h := fakeHistory{
		"s1":    {"a", "b", "b", "c"},
		"s2":    {"y", "x"},
		"flaky": {"q"},
	}
	r := check(t, h, strings.Join([]string{
		"s1 a", "s1 b", "s1 c", "s1 lost",
		"s2 x", "s2 y",
		"gone g1", "gone g2",
		"flaky q",
		"unreadable u",
	}, "\n"))
	want := []string{
		"duplicated s1 b", "missing s1 lost",
		"out-of-order s2 y",
		"no-session gone ", "missing gone g1", "missing gone g2",
		"read-failed flaky ",
		"read-failed unreadable ",
	}
	if got := kinds(r); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("problems\n got %q\nwant %q", got, want)
	}
	if r.Checked != 10 || r.Missing != 3 || r.Duplicated != 1 || r.OutOfOrder != 1 || r.Unreadable != 2 || r.OK() {
		t.Fatalf("%s", r.Summary())
	}
	if got := r.Summary(); got != "10 acked checked, 3 missing, 1 duplicated, 1 out of order, 2 session(s) unreadable" {
		t.Fatalf("%q", got)
	}
}

func TestReadAckedLog(t *testing.T) {
	a := parse(t, "s1\tm1\t3\tProposal\n\n  s2 m2  \ns3\tm3") // last line cut short
	if len(a) != 3 || a[0] != (loadgen.Acked{SessionID: "s1", MessageID: "m1", Stream: "3", Line: 1}) ||
		a[1] != (loadgen.Acked{SessionID: "s2", MessageID: "m2", Line: 3}) || a[2].MessageID != "m3" {
		t.Fatalf("%+v", a)
	}
	if _, err := loadgen.ReadAckedLog(strings.NewReader("s1\n")); err == nil {
		t.Fatal("one field: no error")
	}
}

// streamServer answers StreamSession subscriptions from a fake history.
type streamServer struct {
	macpv1.UnimplementedMACPRuntimeServiceServer
	h fakeHistory
}

func (s *streamServer) StreamSession(st grpc.BidiStreamingServer[macpv1.StreamSessionRequest, macpv1.StreamSessionResponse]) error {
	req, err := st.Recv()
	if err != nil {
		return err
	}
	if req.GetAfterSequence() != 0 || req.GetEnvelope() != nil {
		return status.Error(codes.InvalidArgument, "want a subscription from 0")
	}
	if req.GetSubscribeSessionId() == "forbidden" {
		return st.Send(&macpv1.StreamSessionResponse{Response: &macpv1.StreamSessionResponse_Error{Error: &macpv1.MACPError{Code: "FORBIDDEN", Message: "no"}}})
	}
	envs, err := s.h.History(st.Context(), req.GetSubscribeSessionId())
	if err != nil {
		return status.Error(codes.NotFound, err.Error())
	}
	heartbeat := &macpv1.StreamSessionResponse{Response: &macpv1.StreamSessionResponse_Envelope{Envelope: &macpv1.Envelope{MessageType: "Signal", MessageId: "hb"}}}
	for _, e := range envs {
		if err := st.Send(&macpv1.StreamSessionResponse{Response: &macpv1.StreamSessionResponse_Envelope{Envelope: e}}); err != nil {
			return err
		}
		if err := st.Send(heartbeat); err != nil {
			return err
		}
	}
	if strings.HasPrefix(req.GetSubscribeSessionId(), "ends") {
		return nil // end the stream after the history (else stay open)
	}
	// Stay open, with heartbeats (ambient Signals) that must neither
	// count as history nor keep the read from going idle.
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-st.Context().Done():
			return nil
		case <-t.C:
			if err := st.Send(heartbeat); err != nil {
				return nil
			}
		}
	}
}

func TestStreamHistory(t *testing.T) {
	srv := &streamServer{h: fakeHistory{"s1": {"a", "b", "c"}, "s2": {"a", "Commitment"}, "ends1": {"a", "b", "c"}}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	macpv1.RegisterMACPRuntimeServiceServer(g, srv)
	go g.Serve(lis)
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := loadgen.StreamHistory{Client: macpv1.NewMACPRuntimeServiceClient(conn), Identity: "x", Idle: 50 * time.Millisecond}
	ids := func(envs []*macpv1.Envelope) string {
		var s []string
		for _, e := range envs {
			s = append(s, e.MessageId)
		}
		return strings.Join(s, ",")
	}
	// Open stream: ends on idle.
	envs, err := r.History(context.Background(), "s1")
	if err != nil || ids(envs) != "a,b,c" {
		t.Fatalf("idle: %q %v", ids(envs), err)
	}
	// A terminal envelope (a Commitment) ends the read at once.
	r.Idle = time.Hour
	envs, err = r.History(context.Background(), "s2")
	if err != nil || ids(envs) != "a,Commitment" {
		t.Fatalf("terminal: %q %v", ids(envs), err)
	}
	// So does the end of the stream.
	envs, err = r.History(context.Background(), "ends1")
	if err != nil || ids(envs) != "a,b,c" {
		t.Fatalf("end of stream: %q %v", ids(envs), err)
	}
	if _, err := r.History(context.Background(), "nope"); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown session: %v", err)
	}
	if _, err := r.History(context.Background(), "forbidden"); err == nil || !strings.Contains(err.Error(), "FORBIDDEN") {
		t.Fatalf("error frame: %v", err)
	}
}
