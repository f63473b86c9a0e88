package crashtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// binDir holds the binary built by buildMacpd; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildMacpd builds macpd once per test binary, without the race detector
// (the subprocess is what crashes, not what is checked).
var buildMacpd = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "macp-crashtest-bin")
	if err != nil {
		return "", err
	}
	binDir = dir
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "macpd")
	cmd := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-o", bin, "./cmd/macpd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// moduleRoot is the directory holding go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// freeAddr picks a free loopback port (never 50051, which belongs to
// someone else's macpd).
func freeAddr(t *testing.T) string {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if !strings.HasSuffix(addr, ":50051") {
			return addr
		}
	}
}

// daemon is the macpd subprocess, restarted on the same data directory and
// address.
type daemon struct {
	t              *testing.T
	bin, addr, dir string
	logPath        string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
	starts int
	// kills counts SIGKILLs sent; killed is the last process killed.
	kills   int
	killed  *exec.Cmd
	logFile *os.File
	// profiles: incarnation n (starts counts from 1) runs with
	// MACP_PROFILE = profiles[(n-1) % len(profiles)] ("" leaves it unset:
	// the default, 2026-04); none: unset throughout.
	profiles []string
}

// profileOf is the profile incarnation n binds new sessions to, as
// recorded in their start records.
func (d *daemon) profileOf(n int) string {
	p := ""
	if len(d.profiles) > 0 && n > 0 {
		p = d.profiles[(n-1)%len(d.profiles)]
	}
	if p == "latest" || p == coord.ProfileLatest {
		return coord.ProfileLatest
	}
	return coord.ProfileApril
}

// incarnation is the number of the latest macpd start: a call begun and
// answered while it is n can only have been served by incarnation n (the
// ones before were killed and waited for before n was started).
func (d *daemon) incarnation() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.starts
}

func newDaemon(t *testing.T, bin, workDir string) *daemon {
	d := &daemon{t: t, bin: bin, addr: freeAddr(t), dir: filepath.Join(workDir, "data"), logPath: filepath.Join(workDir, "macpd.log")}
	f, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	d.logFile = f
	t.Cleanup(func() {
		d.mu.Lock()
		cmd, exited := d.cmd, d.exited
		d.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		f.Close()
	})
	return d
}

// logf writes a marker line into macpd.log between incarnations.
func (d *daemon) logf(format string, args ...any) {
	fmt.Fprintf(d.logFile, "=== crashtest %s: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// start runs macpd and waits until grpc.health.v1 reports SERVING; it
// returns how long that took (recovery included).
func (d *daemon) start() time.Duration {
	d.t.Helper()
	t0 := time.Now()
	for attempt := 0; ; attempt++ {
		d.mu.Lock()
		d.starts++
		n := d.starts
		d.mu.Unlock()
		d.logf("start #%d", n)
		cmd := exec.Command(d.bin)
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "MACP_") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env,
			"MACP_ALLOW_INSECURE=1",
			"MACP_BIND_ADDR="+d.addr,
			"MACP_DATA_DIR="+d.dir,
			// The load comes from one initiator and a few participants at
			// full speed, and leaves abandoned sessions OPEN.
			"MACP_SESSION_START_LIMIT_PER_MINUTE=0",
			"MACP_MESSAGE_LIMIT_PER_MINUTE=0",
			"MACP_MAX_OPEN_SESSIONS=0",
			"MACP_LOG_LEVEL=info",
		)
		// Debugging: extra settings for macpd, e.g. MACP_MEMORY_ONLY=1 to
		// watch the test catch lost acks.
		if len(d.profiles) > 0 {
			if p := d.profiles[(n-1)%len(d.profiles)]; p != "" {
				cmd.Env = append(cmd.Env, "MACP_PROFILE="+p)
			}
			d.logf("start #%d binds new sessions to profile %s", n, d.profileOf(n))
		}
		cmd.Env = append(cmd.Env, strings.Fields(os.Getenv("MACP_CRASH_MACPD_ENV"))...)
		cmd.Stdout, cmd.Stderr = d.logFile, d.logFile
		if err := cmd.Start(); err != nil {
			d.t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		d.mu.Lock()
		d.cmd, d.exited = cmd, exited
		d.mu.Unlock()
		err := d.waitServing(exited, 60*time.Second)
		if err == nil {
			return time.Since(t0)
		}
		d.mu.Lock()
		d.cmd, d.exited = nil, nil
		d.mu.Unlock()
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		// Another process may briefly hold the port; anything else (a
		// refused recovery above all) is a finding.
		if attempt < 20 && strings.Contains(d.logTail(2000), "address already in use") {
			time.Sleep(250 * time.Millisecond)
			continue
		}
		d.t.Fatalf("macpd start #%d on %s failed: %v\n--- macpd.log (tail) ---\n%s", n, d.dir, err, d.logTail(8000))
	}
}

func (d *daemon) waitServing(exited <-chan error, limit time.Duration) error {
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: fastBackoff, MinConnectTimeout: time.Second}))
	if err != nil {
		return err
	}
	defer conn.Close()
	h := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "macp.v1.MACPRuntimeService"})
		cancel()
		if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("macpd exited before serving: %v", werr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("macpd did not serve within %v: %v", limit, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill sends SIGKILL to the running macpd (safe from any goroutine; a
// no-op when it is not running or was already killed).
func (d *daemon) kill() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || d.killed == d.cmd {
		return false
	}
	if err := d.cmd.Process.Kill(); err != nil {
		return false
	}
	d.killed = d.cmd
	d.kills++
	return true
}

// waitExit waits for the killed process to be gone.
func (d *daemon) waitExit() {
	d.t.Helper()
	d.mu.Lock()
	exited := d.exited
	d.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		d.t.Fatalf("macpd still running 30s after SIGKILL")
	}
	d.mu.Lock()
	d.cmd, d.exited = nil, nil
	d.mu.Unlock()
}

// killCount is the number of SIGKILLs delivered.
func (d *daemon) killCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.kills
}

func (d *daemon) logTail(n int) string {
	b, _ := os.ReadFile(d.logPath)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// fastBackoff lets clients reconnect within a fraction of a second of a
// restart (gRPC's default backoff grows to two minutes).
var fastBackoff = backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond}

// outcome of one Send as the client saw it.
type outcome uint8

const (
	pending  outcome = iota // no answer yet
	acked                   // ok Ack: must be in history exactly once
	rejected                // a definite refusal: must not be in history
	unknown                 // no answer (server killed, deadline): may or may not be in history
)

func (o outcome) String() string {
	return [...]string{"pending", "acked", "rejected", "unknown"}[o]
}

// sendRec is one Send as the tracker saw it.
type sendRec struct {
	tag, sid, mid, typ, sender string
	payload                    []byte
	start, end                 time.Time
	out                        outcome
	code                       string // rejection code or gRPC error
	dup                        bool   // the ok Ack said duplicate
	// inc0 and inc1 are the daemon's incarnation when the Send began and
	// when it was answered (equal: that incarnation served it).
	inc0, inc1 int
}

// ctrlRec is one CancelSession, SuspendSession or ResumeSession call as
// the tracker saw it. The runtime names the record it writes (the ok
// Ack's message_id); an unanswered call may or may not have written one.
type ctrlRec struct {
	tag, sid string
	// typ is the record type the call writes: SessionCancel,
	// SessionSuspend or SessionResume.
	typ        string
	start, end time.Time
	out        outcome
	code       string
	mid        string              // from the ok Ack
	state      macpv1.SessionState // from the ok Ack
}

// tracker records every Send going through the test's connections (a
// client interceptor), so that histories can be checked against
// everything that was sent, not only what was acked; it also fires kills
// right after the N-th ack of a tag.
type tracker struct {
	mu       sync.Mutex
	sends    map[string]*sendRec // by message id
	order    []*sendRec
	sessions map[string]bool // every session id a Send named
	acks     map[string]int64
	trigger  struct {
		tag   string
		at    int64
		fired chan struct{}
	}
	total atomic.Int64 // acks of every tag
	kill  func() bool
	// ctrls are the session control calls, in the order they began.
	ctrls []*ctrlRec
	// incarnation, when set, numbers the macpd serving (daemon.incarnation).
	incarnation func() int
}

func newTracker(kill func() bool) *tracker {
	return &tracker{sends: map[string]*sendRec{}, sessions: map[string]bool{}, acks: map[string]int64{}, kill: kill}
}

func (tr *tracker) inc() int {
	if tr.incarnation == nil {
		return 0
	}
	return tr.incarnation()
}

// controlCalls maps the session control methods to the record type each
// writes.
var controlCalls = map[string]string{
	macpv1.MACPRuntimeService_CancelSession_FullMethodName:  coord.TypeSessionCancel,
	macpv1.MACPRuntimeService_SuspendSession_FullMethodName: coord.TypeSessionSuspend,
	macpv1.MACPRuntimeService_ResumeSession_FullMethodName:  coord.TypeSessionResume,
}

// control records a session control call of connection tag around invoke.
func (tr *tracker) control(tag, method string, req, reply any, invoke func() error) error {
	sid := req.(interface{ GetSessionId() string }).GetSessionId()
	rec := &ctrlRec{tag: tag, sid: sid, typ: controlCalls[method], start: time.Now()}
	tr.mu.Lock()
	tr.ctrls = append(tr.ctrls, rec)
	tr.sessions[sid] = true
	tr.mu.Unlock()
	err := invoke()
	ack := reply.(interface{ GetAck() *macpv1.Ack }).GetAck()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	rec.end = time.Now()
	switch {
	case err == nil && ack.GetOk():
		rec.out, rec.mid, rec.state = acked, ack.GetMessageId(), ack.GetSessionState()
	case err == nil:
		rec.out, rec.code = classify(ack.GetError().GetCode())
	default:
		if code := macpCode(err); code != "" {
			rec.out, rec.code = classify(code)
		} else {
			rec.out, rec.code = unknown, status.Code(err).String()
		}
	}
	return err
}

const sendMethod = "/macp.v1.MACPRuntimeService/Send"

// interceptor records the Sends of connection tag.
func (tr *tracker) interceptor(tag string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := controlCalls[method]; ok {
			return tr.control(tag, method, req, reply, func() error { return invoker(ctx, method, req, reply, cc, opts...) })
		}
		sreq, ok := req.(*macpv1.SendRequest)
		if method != sendMethod || !ok {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		rec, err := tr.begin(tag, bearer(ctx), sreq.GetEnvelope())
		if err != nil {
			return err
		}

		err = invoker(ctx, method, req, reply, cc, opts...)

		ack := reply.(*macpv1.SendResponse).GetAck()
		switch {
		case err == nil && ack.GetOk():
			tr.settle(rec, acked, "", ack.GetDuplicate())
		case err == nil:
			out, code := classify(ack.GetError().GetCode())
			tr.settle(rec, out, code, false)
		default:
			if code := macpCode(err); code != "" {
				out, code := classify(code)
				tr.settle(rec, out, code, false)
			} else {
				tr.settle(rec, unknown, status.Code(err).String(), false)
			}
		}
		return err
	}
}

// begin records an envelope about to be sent by sender over connection
// tag; every message id is sent once.
func (tr *tracker) begin(tag, sender string, env *macpv1.Envelope) (*sendRec, error) {
	rec := &sendRec{tag: tag, sid: env.GetSessionId(), mid: env.GetMessageId(), typ: env.GetMessageType(),
		sender: sender, payload: bytes.Clone(env.GetPayload())}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if _, seen := tr.sends[rec.mid]; seen {
		return nil, fmt.Errorf("crashtest: message id %s sent twice", rec.mid)
	}
	tr.sends[rec.mid] = rec
	tr.order = append(tr.order, rec)
	tr.sessions[rec.sid] = true
	rec.start = time.Now()
	rec.inc0 = tr.inc()
	return rec, nil
}

// settle records rec's outcome (once: a settled rec keeps its first) and,
// on an ack that reaches an armed trigger, kills macpd right away, with
// the other Sends in flight.
func (tr *tracker) settle(rec *sendRec, out outcome, code string, dup bool) {
	end := time.Now()
	inc := tr.inc()
	var fired chan struct{}
	tr.mu.Lock()
	if rec.out != pending {
		tr.mu.Unlock()
		return
	}
	rec.end, rec.out, rec.code, rec.dup, rec.inc1 = end, out, code, dup, inc
	if out == acked {
		tr.acks[rec.tag]++
		tr.total.Add(1)
		if tr.trigger.fired != nil && (tr.trigger.tag == rec.tag && tr.acks[rec.tag] >= tr.trigger.at ||
			tr.trigger.tag == "" && tr.total.Load() >= tr.trigger.at) {
			fired = tr.trigger.fired
			tr.trigger.fired = nil
		}
	}
	tr.mu.Unlock()
	if fired != nil {
		tr.kill()
		close(fired)
	}
}

// streamInterceptor records the envelopes sent on the StreamSession calls
// of connection tag (pipelined streams, loadgen's Stream mode): an
// envelope is acked when the runtime echoes it on the stream (it does so
// only once it is durable), refused when an in-stream error names it (or
// names none while it is the only one in flight, as loadgen matches
// them), and unknown when the stream ends before either.
func (tr *tracker) streamInterceptor(tag string) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != macpv1.MACPRuntimeService_StreamSession_FullMethodName {
			return cs, err
		}
		return &trackedStream{ClientStream: cs, tr: tr, tag: tag, sender: bearer(ctx), inFlight: map[string]*sendRec{}}, nil
	}
}

// trackedStream is one tracked StreamSession call.
type trackedStream struct {
	grpc.ClientStream
	tr          *tracker
	tag, sender string
	mu          sync.Mutex
	inFlight    map[string]*sendRec // sent, not yet echoed or refused
}

func (s *trackedStream) SendMsg(m any) error {
	req, ok := m.(*macpv1.StreamSessionRequest)
	if !ok || req.GetEnvelope() == nil {
		return s.ClientStream.SendMsg(m)
	}
	rec, err := s.tr.begin(s.tag, s.sender, req.GetEnvelope())
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.inFlight[rec.mid] = rec
	s.mu.Unlock()
	if err := s.ClientStream.SendMsg(m); err != nil {
		s.take(rec.mid)
		s.tr.settle(rec, unknown, "stream send: "+status.Code(err).String(), false)
		return err
	}
	return nil
}

func (s *trackedStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		// The call ended: what it did not answer may or may not be in
		// history.
		s.mu.Lock()
		left := s.inFlight
		s.inFlight = map[string]*sendRec{}
		s.mu.Unlock()
		for _, rec := range left {
			s.tr.settle(rec, unknown, "stream ended: "+status.Code(err).String(), false)
		}
		return err
	}
	resp, ok := m.(*macpv1.StreamSessionResponse)
	if !ok {
		return nil
	}
	if env := resp.GetEnvelope(); env != nil {
		if rec := s.take(env.GetMessageId()); rec != nil {
			s.tr.settle(rec, acked, "", false)
		}
	} else if e := resp.GetError(); e != nil {
		rec := s.take(e.GetMessageId())
		if rec == nil && e.GetMessageId() == "" {
			s.mu.Lock()
			if len(s.inFlight) == 1 {
				for id := range s.inFlight {
					rec = s.inFlight[id]
					delete(s.inFlight, id)
				}
			}
			s.mu.Unlock()
		}
		if rec != nil {
			out, code := classify(e.GetCode())
			s.tr.settle(rec, out, code, false)
		}
	}
	return nil
}

// take removes and returns the envelope in flight with message id mid.
func (s *trackedStream) take(mid string) *sendRec {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.inFlight[mid]
	delete(s.inFlight, mid)
	return rec
}

// classify maps a MACP code to an outcome: INTERNAL_ERROR may hide a write
// with an unknown result (a failed sync), every other code is a refusal.
func classify(code string) (outcome, string) {
	if code == "" || code == "INTERNAL_ERROR" {
		return unknown, "macp:" + code
	}
	return rejected, code
}

// arm makes the n-th ack of tag ("": of any tag) from now kill macpd; the
// channel closes once it did.
func (tr *tracker) arm(tag string, n int64) <-chan struct{} {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	ch := make(chan struct{})
	base := tr.acks[tag]
	if tag == "" {
		base = tr.total.Load()
	}
	tr.trigger.tag, tr.trigger.at, tr.trigger.fired = tag, base+n, ch
	return ch
}

// disarm cancels a trigger that did not fire.
func (tr *tracker) disarm() {
	tr.mu.Lock()
	tr.trigger.fired = nil
	tr.mu.Unlock()
}

// controls returns the control calls by session (no call may be running).
func (tr *tracker) controls() map[string][]*ctrlRec {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := map[string][]*ctrlRec{}
	for _, c := range tr.ctrls {
		out[c.sid] = append(out[c.sid], c)
	}
	return out
}

// snapshot returns the records and session ids (no Send may be running).
func (tr *tracker) snapshot() (map[string]*sendRec, []*sendRec, map[string]bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.sends, tr.order, tr.sessions
}

// acksOf is the number of acks of connection tag.
func (tr *tracker) acksOf(tag string) int64 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.acks[tag]
}

// bearer is the dev identity in the outgoing authorization metadata.
func bearer(ctx context.Context) string {
	md, _ := metadata.FromOutgoingContext(ctx)
	for _, v := range md.Get("authorization") {
		if s, ok := strings.CutPrefix(v, "Bearer "); ok {
			return s
		}
	}
	return ""
}

// macpCode is the MACP code a status error carries, or "".
func macpCode(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if e, ok := d.(*macpv1.MACPError); ok && e.GetCode() != "" {
			return e.GetCode()
		}
	}
	return ""
}

// dial opens a tracked connection for tag, reconnecting quickly after a
// restart.
func (tr *tracker) dial(addr, tag string) (macpv1.MACPRuntimeServiceClient, io.Closer, error) {
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(tr.interceptor(tag)),
		grpc.WithChainStreamInterceptor(tr.streamInterceptor(tag)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: fastBackoff, MinConnectTimeout: 2 * time.Second}),
	)
	if err != nil {
		return nil, nil, err
	}
	return macpv1.NewMACPRuntimeServiceClient(conn), conn, nil
}

// asIdentity adds a dev bearer identity to ctx.
func asIdentity(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+id)
}

// envInt reads a positive integer from the environment.
func envInt(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil && v > 0 {
		return v
	}
	return def
}
