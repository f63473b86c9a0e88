package loadgen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/bench/datasync"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// DurableEchoService is the floor for any server that makes each Send
// durable before answering: Send appends the envelope's bytes to a log
// file and answers once a sync covering them returned, syncs being
// shared by every Send waiting (group commit: one write and one
// fdatasync per group, the least a durable acknowledgement costs). It
// validates, indexes and decides nothing, so a runtime can only be
// slower; comparing a runtime with it separates what the machine's
// transport and disk cost from what the runtime adds. The log is a
// preallocated, already written file that is overwritten in a circle
// (as a recycled write-ahead log is): a sync then writes no file
// metadata. Nothing is ever read back.
//
// With syncEach (NewDurableEchoService's option) every Send writes and
// syncs on its own, one at a time: the one-sync-per-message server that
// group commit is measured against (what a runtime that fsyncs each
// message does at best).
type DurableEchoService struct {
	macpv1.UnimplementedMACPRuntimeServiceServer

	f        *os.File
	size     int64
	syncEach bool
	eachMu   sync.Mutex // syncEach: one write and sync at a time

	mu      sync.Mutex
	cur     *echoGroup // the group new Sends join
	err     error      // a failed write or sync: every later Send fails
	kick    chan struct{}
	closed  bool
	stopped chan struct{}
	off     int64 // the syncer's, or (syncEach) eachMu's
}

type echoGroup struct {
	buf  []byte
	n    int // Sends in the group (an empty envelope adds no bytes)
	done chan struct{}
	err  error
}

// durableEchoLogSize is the log file's size.
const durableEchoLogSize = 64 << 20

// NewDurableEchoService creates (or reuses) DIR/durable-echo.log, fills
// it so that appends overwrite written blocks, and starts the syncer;
// with syncEach every Send syncs on its own instead.
func NewDurableEchoService(dir string, syncEach bool) (*DurableEchoService, error) {
	f, err := os.OpenFile(filepath.Join(dir, "durable-echo.log"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	zero := make([]byte, 1<<20)
	for off := int64(0); off < durableEchoLogSize; off += int64(len(zero)) {
		if _, err := f.WriteAt(zero, off); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	s := &DurableEchoService{f: f, size: durableEchoLogSize, syncEach: syncEach, cur: newEchoGroup(), kick: make(chan struct{}, 1), stopped: make(chan struct{})}
	go s.syncer()
	return s, nil
}

func newEchoGroup() *echoGroup { return &echoGroup{done: make(chan struct{})} }

// Send appends the envelope and acknowledges it once it is synced.
func (s *DurableEchoService) Send(ctx context.Context, req *macpv1.SendRequest) (*macpv1.SendResponse, error) {
	env := req.GetEnvelope()
	b, err := proto.Marshal(env)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if s.syncEach {
		if err := s.sendEach(b); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return echoAck(env), nil
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil, status.Error(codes.Internal, s.err.Error())
	}
	g := s.cur
	g.buf = append(g.buf, b...)
	g.n++
	select {
	case s.kick <- struct{}{}:
	default: // a kick is pending: the syncer takes this group too
	}
	s.mu.Unlock()
	select {
	case <-g.done:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if g.err != nil {
		return nil, status.Error(codes.Internal, g.err.Error())
	}
	return echoAck(env), nil
}

// sendEach writes and syncs one Send's bytes on its own (syncEach). The
// offset is the syncer's, which does not run in this mode.
func (s *DurableEchoService) sendEach(b []byte) error {
	s.eachMu.Lock()
	defer s.eachMu.Unlock()
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.writeSync(b); err != nil {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		return err
	}
	return nil
}

func echoAck(env *macpv1.Envelope) *macpv1.SendResponse {
	return &macpv1.SendResponse{Ack: &macpv1.Ack{
		Ok: true, MessageId: env.GetMessageId(), SessionId: env.GetSessionId(),
		AcceptedAtUnixMs: time.Now().UnixMilli(), SessionState: macpv1.SessionState_SESSION_STATE_OPEN,
	}}
}

// syncer writes and syncs one group at a time: everything appended while
// the previous sync ran goes into the next.
func (s *DurableEchoService) syncer() {
	defer close(s.stopped)
	for range s.kick {
		s.mu.Lock()
		g := s.cur
		if g.n == 0 {
			s.mu.Unlock()
			continue
		}
		s.cur = newEchoGroup()
		s.mu.Unlock()
		g.err = s.writeSync(g.buf)
		if g.err != nil {
			s.mu.Lock()
			s.err = g.err
			s.mu.Unlock()
		}
		close(g.done)
	}
}

func (s *DurableEchoService) writeSync(b []byte) error {
	if int64(len(b)) > s.size {
		return fmt.Errorf("durable echo: group of %d bytes exceeds the %d-byte log", len(b), s.size)
	}
	if s.off+int64(len(b)) > s.size {
		s.off = 0
	}
	if _, err := s.f.WriteAt(b, s.off); err != nil {
		return err
	}
	s.off += int64(len(b))
	return datasync.File(s.f)
}

// Close stops the syncer (after the group in progress) and closes the
// log; Sends still waiting fail.
func (s *DurableEchoService) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.err == nil {
		s.err = errors.New("durable echo: closed")
	}
	g := s.cur
	close(s.kick) // under mu: no Send kicks after this
	s.mu.Unlock()
	<-s.stopped
	if g.n > 0 {
		select {
		case <-g.done:
		default:
			g.err = errors.New("durable echo: closed")
			close(g.done)
		}
	}
	return s.f.Close()
}

// NewDurableEchoServer returns a gRPC server with svc registered.
func NewDurableEchoServer(svc *DurableEchoService, opts ...grpc.ServerOption) *grpc.Server {
	g := grpc.NewServer(opts...)
	macpv1.RegisterMACPRuntimeServiceServer(g, svc)
	return g
}
