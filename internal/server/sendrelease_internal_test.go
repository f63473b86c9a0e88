package server

import (
	"context"
	"errors"
	goruntime "runtime"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/store/memstore"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Encode once for every stream (docs/benchmarks.md "Fan-out"), with the
// per-stream charge of docs/security.md "Stream buffers": a record's
// StreamSessionResponse is encoded once and its bytes shared by every
// stream that delivers it; each stream's charge is released when gRPC
// frees that stream's buffer, at once when gRPC never took it, and by
// the garbage collector when gRPC dropped the buffer without freeing it.
func TestEncodedRecordsSharedAndChargesReleased(t *testing.T) {
	rt := runtime.New(memstore.New(), builtin.Modes(), policy.DefaultOnly{}, runtime.Options{})
	budget := rt.StreamBudget()
	used := func() int64 { return budget.Stats().Used }
	env := &macpv1.Envelope{MessageId: "m1", SessionId: "s", MessageType: "Proposal", Payload: []byte("payload")}
	b1, err := records.encoded(7, env)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := records.encoded(7, env)
	if &b1[0] != &b2[0] {
		t.Fatal("the same record was encoded twice")
	}
	if b3, _ := records.encoded(8, env); &b3[0] == &b1[0] {
		t.Fatal("another sequence number got the same encoding")
	}
	var got macpv1.StreamSessionResponse
	if err := proto.Unmarshal(b1, &got); err != nil || !proto.Equal(got.GetEnvelope(), env) {
		t.Fatalf("the encoding is not the StreamSessionResponse of the envelope: %v %v", err, got.GetEnvelope())
	}

	codec := newRequestCodec()
	const cost = 1000
	stream := func() (*sendWindow, *recordSender) {
		sw := (&Service{rt: rt}).newSendWindow(context.Background())
		if err := sw.w.Acquire(context.Background(), cost); err != nil {
			t.Fatal(err)
		}
		return sw, &recordSender{sw: sw}
	}

	// Taken by gRPC: held until the buffer is freed; two streams share
	// the bytes.
	_, rs1 := stream()
	_, rs2 := stream()
	var held []mem.BufferSlice
	for _, rs := range []*recordSender{rs1, rs2} {
		if err := rs.send(b1, cost, func(m any) error {
			bs, err := codec.Marshal(m)
			held = append(held, bs)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if used() != 2*cost {
		t.Fatalf("used %d while gRPC holds both buffers, want %d", used(), 2*cost)
	}
	if a, b := held[0][0].ReadOnlyData(), held[1][0].ReadOnlyData(); &a[0] != &b1[0] || &b[0] != &b1[0] {
		t.Fatal("the streams' buffers do not share the record's encoding")
	}
	held[0].Free()
	if used() != cost {
		t.Fatalf("used %d after one buffer was freed, want %d", used(), cost)
	}
	held[1].Free()
	if used() != 0 {
		t.Fatalf("used %d after both buffers were freed, want 0", used())
	}

	// Never taken (the call ended before encoding): released at once.
	_, rs := stream()
	if err := rs.send(b1, cost, func(any) error { return errors.New("stream done") }); err == nil {
		t.Fatal("the send error was lost")
	}
	if used() != 0 {
		t.Fatalf("used %d after a send that never encoded, want 0", used())
	}

	// Dropped by gRPC without Free: the GC backstop releases it once the
	// buffer and the stream's sender are unreachable.
	func() {
		_, rs := stream()
		if err := rs.send(b1, cost, func(m any) error { _, err := codec.Marshal(m); return err }); err != nil {
			t.Fatal(err)
		}
	}()
	if used() != cost {
		t.Fatalf("used %d while the dropped buffer is not collected, want %d", used(), cost)
	}
	for deadline := time.Now().Add(10 * time.Second); used() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("used %d: the dropped buffer's charge was never released", used())
		}
		goruntime.GC()
	}
}
