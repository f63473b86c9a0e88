package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Every acknowledged Send's envelope is in the log, and concurrent Sends
// share syncs (fewer groups than Sends is likely, not asserted: it
// depends on timing); the file keeps its preallocated size.
func TestDurableEchoAppendsBeforeAnswering(t *testing.T) {
	for _, each := range []bool{false, true} {
		t.Run(fmt.Sprintf("syncEach=%v", each), func(t *testing.T) { testDurableEchoAppends(t, each) })
	}
}

func testDurableEchoAppends(t *testing.T, each bool) {
	dir := t.TempDir()
	s, err := NewDurableEchoService(dir, each)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	envs := make(chan *macpv1.Envelope, 400)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				env := &macpv1.Envelope{SessionId: "s", MessageId: fmt.Sprintf("m-%d-%d", w, i), MessageType: "Proposal", Payload: []byte("payload")}
				resp, err := s.Send(context.Background(), &macpv1.SendRequest{Envelope: env})
				if err != nil || !resp.GetAck().GetOk() || resp.GetAck().GetMessageId() != env.MessageId {
					t.Errorf("Send %s: %v %v", env.MessageId, resp, err)
					return
				}
				envs <- env
			}
		}()
	}
	wg.Wait()
	close(envs)
	data, err := os.ReadFile(filepath.Join(dir, "durable-echo.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != durableEchoLogSize {
		t.Fatalf("log is %d bytes, want %d", len(data), durableEchoLogSize)
	}
	n := 0
	for env := range envs {
		b, _ := proto.Marshal(env)
		if !bytes.Contains(data, b) {
			t.Fatalf("acknowledged envelope %s is not in the log", env.MessageId)
		}
		n++
	}
	if n != 400 {
		t.Fatalf("%d acknowledged, want 400", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Send(context.Background(), &macpv1.SendRequest{Envelope: &macpv1.Envelope{MessageId: "late"}}); status.Code(err) != codes.Internal {
		t.Fatalf("Send after Close: %v, want Internal", err)
	}
}

// A failed write is never acknowledged, and every later Send fails too.
func TestDurableEchoFailedWrite(t *testing.T) {
	for _, each := range []bool{false, true} {
		t.Run(fmt.Sprintf("syncEach=%v", each), func(t *testing.T) { testDurableEchoFailedWrite(t, each) })
	}
}

func testDurableEchoFailedWrite(t *testing.T, each bool) {
	s, err := NewDurableEchoService(t.TempDir(), each)
	if err != nil {
		t.Fatal(err)
	}
	s.f.Close() // the next write fails
	for i := 0; i < 2; i++ {
		resp, err := s.Send(context.Background(), &macpv1.SendRequest{Envelope: &macpv1.Envelope{MessageId: "m"}})
		if status.Code(err) != codes.Internal || resp != nil {
			t.Fatalf("Send %d after a failed write: %v %v, want Internal", i, resp, err)
		}
	}
	_ = s.Close()
}
