// Package loadgen drives a MACP runtime over gRPC with many sessions and
// reports throughput and latency percentiles (issue #4 items 7 and 9). It
// is the engine behind "macpbench load" and "macpbench check-acked", and also
// holds the echo service cmd/echo-bench serves as the transport ceiling.
//
// Each session is a SessionStart from the initiator, then Messages
// envelopes of the mode's message pattern (workload.go), then optionally a
// Commitment. Concurrency sessions are driven at once; a session's messages
// are sent by SendersPerSession sender streams, each sequential (send, wait
// for the Ack, send the next). Every Send carries its sender's dev bearer
// identity ("authorization: Bearer <id>") as call metadata, so one
// connection serves every identity.
//
// RunFanout (fanout.go) measures the other direction: one busy session
// and many passive subscribers, every delivery verified, and the server's
// CPU time per delivered envelope ("macpbench fanout").
//
// The load generator never stops on a failed call: Send errors are counted
// and the session is abandoned (the server may have been killed on
// purpose), rejections are counted and the session goes on.
package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Transport is what the load generator talks to.
type Transport string

const (
	// TransportMACP drives a MACP runtime (macpd).
	TransportMACP Transport = "macp"
	// TransportEcho drives an echo server (cmd/echo-bench): the same
	// envelopes over the same client path, without asking the server for
	// mode versions first.
	TransportEcho Transport = "echo"
)

// DefaultInitiator is the dev identity that starts (and commits) sessions.
const DefaultInitiator = "load-initiator"

// Config describes one load run.
type Config struct {
	// Addr is the server address; used by the default Dial.
	Addr string
	// Dial opens one client connection; nil dials Addr in plaintext. The
	// connection should carry no identity: each call brings its own.
	Dial func(ctx context.Context) (macpv1.MACPRuntimeServiceClient, io.Closer, error)
	// Conns is the number of connections (default 1); driven sessions are
	// spread over them round robin.
	Conns int
	// Transport is TransportMACP (default) or TransportEcho.
	Transport Transport
	// Mode is a mode id or short name (default decision); ModeVersion
	// defaults to the runtime's (TransportMACP) or the known version.
	Mode, ModeVersion string
	// ConfigurationVersion bound at SessionStart (default "v1").
	ConfigurationVersion string
	// Sessions is the number of sessions; 0 with Duration > 0 means as
	// many as fit in Duration.
	Sessions int
	// Messages per session, after the SessionStart and before the
	// optional Commitment.
	Messages int
	// Concurrency is the number of sessions driven at once (default 1).
	Concurrency int
	// SendersPerSession is the number of sender streams sending into one
	// session concurrently (default 1).
	SendersPerSession int
	// Commit ends each session with a Commitment (Decision only).
	Commit bool
	// TTL of each session (default 10m).
	TTL time.Duration
	// Duration bounds the run (0: until every session is done). When it
	// ends, no new Send starts; Sends in flight complete.
	Duration time.Duration
	// CallTimeout bounds each Send (default 10s).
	CallTimeout time.Duration
	// Initiator is the dev identity of the initiator (default
	// DefaultInitiator); participants are p1..pN.
	Initiator string
	// Pad adds this many bytes of text to each mode message's payload.
	Pad int
	// GiveUpAfter stops the run when a Send fails without an answer and no
	// Send has been answered for this long (the server is gone); default
	// 2s, negative: never (to ride out a restart). After a failed Send a
	// worker waits (10ms doubling to 1s, reset by a clean session) before
	// its next session.
	GiveUpAfter time.Duration
	// Stream drives each session over one pipelined StreamSession call
	// instead of unary Sends (stream.go): up to Window envelopes in
	// flight (default DefaultWindow), each acknowledged by its durable
	// echo on the stream. TransportMACP only; SendersPerSession must be
	// 1; decision and proposal only.
	Stream bool
	Window int
	// AckedLog, if set, receives one line per acknowledged envelope,
	// "session_id<TAB>message_id<TAB>stream<TAB>message_type", written
	// after its ok Ack arrived (see AckedLog).
	AckedLog io.Writer
}

// Result is the outcome of a run.
type Result struct {
	Transport   Transport `json:"transport"`
	Mode        string    `json:"mode"`
	ModeVersion string    `json:"mode_version"`
	Concurrency int       `json:"concurrency"`
	Senders     int       `json:"senders_per_session"`
	Messages    int       `json:"messages_per_session"`
	// Stream and Window are Config's: pipelined StreamSession calls with
	// up to Window envelopes in flight each.
	Stream bool `json:"stream"`
	Window int  `json:"window,omitempty"`
	// SessionsPlanned is Config.Sessions (0: bounded by duration).
	SessionsPlanned int `json:"sessions_planned"`
	// SessionsStarted got an ok Ack for their SessionStart;
	// SessionsFailed did not; SessionsAbandoned were started but stopped
	// early by a Send error; SessionsCommitted got an ok Ack for their
	// Commitment.
	SessionsStarted   int64 `json:"sessions_started"`
	SessionsFailed    int64 `json:"sessions_failed"`
	SessionsAbandoned int64 `json:"sessions_abandoned"`
	SessionsCommitted int64 `json:"sessions_committed"`
	// Sends counts Send calls; Acked those answered with an ok Ack
	// (Duplicates among them); Rejected those answered with ok=false (or
	// a status carrying a MACP error); Errors those that failed otherwise.
	Sends      int64 `json:"sends"`
	Acked      int64 `json:"acked"`
	Duplicates int64 `json:"duplicates"`
	Rejected   int64 `json:"rejected"`
	Errors     int64 `json:"errors"`
	// Unmatched counts envelopes echoed on a stream that were none of its
	// own in flight (a stream mode run expects 0).
	Unmatched int64 `json:"unmatched_echoes,omitempty"`
	// GaveUp is set when GiveUpAfter stopped the run.
	GaveUp bool `json:"gave_up"`
	// Elapsed is the wall time from the first Send to the last answer.
	Elapsed    time.Duration `json:"-"`
	ElapsedSec float64       `json:"elapsed_s"`
	// Throughput is Acked per second of Elapsed.
	Throughput float64 `json:"throughput_per_s"`
	// Latency is over every Send answered with an Ack, ok or not.
	Latency Latency `json:"latency"`
	// RejectedByCode and ErrorsByCode break the failures down by MACP
	// code and gRPC code.
	RejectedByCode map[string]int64 `json:"rejected_by_code,omitempty"`
	ErrorsByCode   map[string]int64 `json:"errors_by_code,omitempty"`
	// FirstError describes the first failure of each kind, for the
	// summary.
	FirstRejection string `json:"first_rejection,omitempty"`
	FirstError     string `json:"first_error,omitempty"`
	// AckedLogError is the acked log's write error, if any.
	AckedLogError string `json:"acked_log_error,omitempty"`
}

// stats are one sender stream's counters; merged at the end.
type stats struct {
	lat                                []time.Duration
	sends, ok, dup, rejected, errs     int64
	unmatched                          int64
	rejCodes, errCodes                 map[string]int64
	firstRej, firstErr                 string
	firstAt, lastAt                    time.Time
	started, failed, abandoned, commit int64
}

func (s *stats) code(m *map[string]int64, c string) {
	if *m == nil {
		*m = make(map[string]int64)
	}
	(*m)[c]++
}

// runner is one Run.
type runner struct {
	cfg     Config
	wl      workload
	clients []macpv1.MACPRuntimeServiceClient
	log     *AckedLog
	// stop ends the run: no new Send starts once it is done.
	stop      context.Context
	giveUp    context.CancelFunc
	gaveUp    atomic.Bool
	answered  atomic.Int64 // time of the last answer, UnixNano
	mu        sync.Mutex
	all       []*stats
	nextIndex atomic.Int64
}

// Run executes the load. ctx cancellation stops it like Duration does:
// no new Send starts, Sends in flight complete. Only a configuration or
// dial error is returned; every Send failure is counted in the Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.Transport = cmp.Or(cfg.Transport, TransportMACP)
	if cfg.Transport != TransportMACP && cfg.Transport != TransportEcho {
		return nil, fmt.Errorf("loadgen: unknown transport %q (macp or echo)", cfg.Transport)
	}
	mode, ok := ResolveMode(cfg.Mode)
	if !ok {
		return nil, fmt.Errorf("loadgen: no message pattern for mode %q (known: decision, proposal, multi_round)", cfg.Mode)
	}
	cfg.Mode = mode
	cfg.Conns = max(cfg.Conns, 1)
	cfg.Concurrency = max(cfg.Concurrency, 1)
	cfg.SendersPerSession = max(cfg.SendersPerSession, 1)
	cfg.TTL = cmp.Or(cfg.TTL, 10*time.Minute)
	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, 10*time.Second)
	cfg.Initiator = cmp.Or(cfg.Initiator, DefaultInitiator)
	cfg.ConfigurationVersion = cmp.Or(cfg.ConfigurationVersion, sdk.DefaultConfigurationVersion)
	cfg.GiveUpAfter = cmp.Or(cfg.GiveUpAfter, 2*time.Second)
	switch {
	case cfg.Sessions < 0 || cfg.Messages < 0 || cfg.Pad < 0:
		return nil, errors.New("loadgen: sessions, messages and pad must not be negative")
	case cfg.Sessions == 0 && cfg.Duration <= 0:
		return nil, errors.New("loadgen: set a number of sessions, a duration, or both")
	}
	if cfg.Stream {
		cfg.Window = cmp.Or(cfg.Window, DefaultWindow)
		switch {
		case cfg.Transport != TransportMACP:
			return nil, errors.New("loadgen: the stream mode drives a MACP runtime (transport macp)")
		case cfg.SendersPerSession != 1:
			return nil, errors.New("loadgen: the stream mode has one sender per session")
		case cfg.Window < 1:
			return nil, errors.New("loadgen: the stream window must be at least 1")
		case !streamModes[mode]:
			return nil, fmt.Errorf("loadgen: the stream mode drives decision or proposal sessions, not %s", mode)
		}
	}
	wl, err := newWorkload(cfg.Mode, cfg.Pad)
	if err != nil {
		return nil, err
	}
	if cfg.Commit && !wl.canCommit() {
		return nil, fmt.Errorf("loadgen: the %s message pattern never makes a Commitment eligible; drop Commit", cfg.Mode)
	}
	if cfg.Dial == nil {
		cfg.Dial = plaintextDial(cfg.Addr)
	}
	r := &runner{cfg: cfg, wl: wl}
	for range cfg.Conns {
		cl, closer, err := cfg.Dial(ctx)
		if err != nil {
			return nil, fmt.Errorf("loadgen: dial: %w", err)
		}
		defer closer.Close()
		r.clients = append(r.clients, cl)
	}
	if r.cfg.ModeVersion == "" {
		r.cfg.ModeVersion = defaultModeVersions[cfg.Mode]
		if cfg.Transport == TransportMACP {
			if v := r.lookupModeVersion(ctx); v != "" {
				r.cfg.ModeVersion = v
			}
		}
	}
	if cfg.AckedLog != nil {
		r.log = NewAckedLog(cfg.AckedLog, 100*time.Millisecond)
	}
	stop, giveUp := context.WithCancel(ctx)
	defer giveUp()
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		stop, cancel = context.WithTimeout(stop, cfg.Duration)
		defer cancel()
	}
	r.stop, r.giveUp = stop, giveUp
	r.answered.Store(time.Now().UnixNano())

	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(r.clients[w%len(r.clients)])
		}()
	}
	wg.Wait()
	res := r.result()
	if r.log != nil {
		if err := r.log.Close(); err != nil {
			res.AckedLogError = err.Error()
		}
	}
	return res, nil
}

// plaintextDial dials addr without transport security (Config.Dial's
// default).
func plaintextDial(addr string) func(context.Context) (macpv1.MACPRuntimeServiceClient, io.Closer, error) {
	return func(context.Context) (macpv1.MACPRuntimeServiceClient, io.Closer, error) {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, err
		}
		return macpv1.NewMACPRuntimeServiceClient(conn), conn, nil
	}
}

// lookupModeVersion asks the runtime for the mode's version (standard
// modes, then extension modes); "" if it does not say.
func (r *runner) lookupModeVersion(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(r.as(ctx, r.cfg.Initiator), r.cfg.CallTimeout)
	defer cancel()
	cl := r.clients[0]
	if resp, err := cl.ListModes(ctx, &macpv1.ListModesRequest{}); err == nil {
		for _, m := range resp.GetModes() {
			if m.GetMode() == r.cfg.Mode {
				return m.GetModeVersion()
			}
		}
	}
	if resp, err := cl.ListExtModes(ctx, &macpv1.ListExtModesRequest{}); err == nil {
		for _, m := range resp.GetModes() {
			if m.GetMode() == r.cfg.Mode {
				return m.GetModeVersion()
			}
		}
	}
	return ""
}

func (r *runner) as(ctx context.Context, identity string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+identity)
}

func (r *runner) newStats() *stats {
	s := &stats{}
	r.mu.Lock()
	r.all = append(r.all, s)
	r.mu.Unlock()
	return s
}

// worker drives sessions one after another until none is left or the run
// stops.
func (r *runner) worker(cl macpv1.MACPRuntimeServiceClient) {
	st := r.newStats()
	backoff := time.Duration(0)
	for r.stop.Err() == nil {
		i := r.nextIndex.Add(1) - 1
		if r.cfg.Sessions > 0 && i >= int64(r.cfg.Sessions) {
			return
		}
		drive := r.session
		if r.cfg.Stream {
			drive = r.streamSession
		}
		if drive(cl, st) {
			backoff = min(max(2*backoff, 10*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-r.stop.Done():
				t.Stop()
			}
		} else {
			backoff = 0
		}
	}
}

// outcome of one Send.
type outcome uint8

const (
	sent     outcome = iota // ok Ack
	rejected                // answered, not accepted
	failed                  // no answer: the session is abandoned
	stopped                 // the run stopped before the Send
)

func (r *runner) send(cl macpv1.MACPRuntimeServiceClient, st *stats, stream int, sid string, m msg) outcome {
	if r.stop.Err() != nil {
		return stopped
	}
	env := &macpv1.Envelope{
		MacpVersion: sdk.ProtocolVersion, Mode: r.cfg.Mode, MessageType: m.typ, MessageId: sdk.NewMessageID(),
		SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: m.payload,
	}
	// Calls in flight when the run stops are let finish (bounded by the
	// call timeout): their acks are still counted and logged.
	ctx, cancel := context.WithTimeout(r.as(context.WithoutCancel(r.stop), m.sender), r.cfg.CallTimeout)
	t0 := time.Now()
	resp, err := cl.Send(ctx, &macpv1.SendRequest{Envelope: env})
	t1 := time.Now()
	cancel()
	st.sends++
	if st.firstAt.IsZero() {
		st.firstAt = t0
	}
	st.lastAt = t1
	if err == nil || macpCode(err) != "" {
		r.answered.Store(t1.UnixNano())
	}
	if err != nil {
		if code := macpCode(err); code != "" {
			st.lat = append(st.lat, t1.Sub(t0))
			st.rejected++
			st.code(&st.rejCodes, code)
			if st.firstRej == "" {
				st.firstRej = fmt.Sprintf("%s %s: %v", m.typ, sid, err)
			}
			return rejected
		}
		st.errs++
		if r.cfg.GiveUpAfter > 0 && t1.Sub(time.Unix(0, r.answered.Load())) >= r.cfg.GiveUpAfter {
			r.gaveUp.Store(true)
			r.giveUp()
		}
		st.code(&st.errCodes, grpcCodeName(status.Code(err)))
		if st.firstErr == "" {
			st.firstErr = fmt.Sprintf("%s %s: %v", m.typ, sid, err)
		}
		return failed
	}
	st.lat = append(st.lat, t1.Sub(t0))
	ack := resp.GetAck()
	if !ack.GetOk() {
		code := cmp.Or(ack.GetError().GetCode(), "NO_ACK")
		st.rejected++
		st.code(&st.rejCodes, code)
		if st.firstRej == "" {
			st.firstRej = fmt.Sprintf("%s %s: %s: %s", m.typ, sid, code, ack.GetError().GetMessage())
		}
		return rejected
	}
	st.ok++
	if ack.GetDuplicate() {
		st.dup++
	}
	if r.log != nil {
		r.log.Record(sid, env.MessageId, stream, m.typ)
	}
	return sent
}

// session drives one session; it reports whether a Send failed without an
// answer.
func (r *runner) session(cl macpv1.MACPRuntimeServiceClient, st *stats) bool {
	sid := sdk.NewSessionID()
	n := r.cfg.SendersPerSession
	start, err := sdk.NewSessionStart(sid, r.cfg.Mode, sdk.StartPayload{
		Intent: "load", Participants: r.wl.participants(n), TTL: r.cfg.TTL,
		ModeVersion: r.cfg.ModeVersion, ConfigurationVersion: r.cfg.ConfigurationVersion,
	})
	if err != nil {
		panic(err) // fixed, valid payload
	}
	switch r.send(cl, st, 0, sid, msg{r.cfg.Initiator, sdk.TypeSessionStart, start.Payload}) {
	case sent:
		st.started++
	case stopped:
		return false
	case rejected:
		st.failed++
		return false
	default:
		st.failed++
		return true
	}
	// The prelude, then the concurrent streams, all on stream 0's clock.
	left := r.cfg.Messages
	for _, m := range r.wl.prelude(r.cfg.Initiator) {
		if left == 0 {
			break
		}
		left--
		switch r.send(cl, st, 0, sid, m) {
		case failed:
			st.abandoned++
			return true
		case stopped:
			return false
		}
	}
	var abandoned atomic.Bool
	stream := func(st *stats, j, count int) {
		for k := range count {
			switch r.send(cl, st, j, sid, r.wl.next(r.cfg.Initiator, j, k)) {
			case failed:
				abandoned.Store(true)
				return
			case stopped:
				return
			}
		}
	}
	if n == 1 {
		stream(st, 0, left)
	} else {
		var wg sync.WaitGroup
		for j := range n {
			count := left / n
			if j < left%n {
				count++
			}
			sst := st
			if j > 0 {
				sst = r.newStats()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				stream(sst, j, count)
			}()
		}
		wg.Wait()
	}
	if abandoned.Load() {
		st.abandoned++
		return true
	}
	if r.cfg.Commit {
		c := commitment(r.cfg.ModeVersion, r.cfg.ConfigurationVersion, "")
		switch r.send(cl, st, 0, sid, msg{r.cfg.Initiator, sdk.TypeCommitment, c}) {
		case sent:
			st.commit++
		case failed:
			st.abandoned++
			return true
		}
	}
	return false
}

func (r *runner) result() *Result {
	res := &Result{
		Transport: r.cfg.Transport, Mode: r.cfg.Mode, ModeVersion: r.cfg.ModeVersion,
		Concurrency: r.cfg.Concurrency, Senders: r.cfg.SendersPerSession, Messages: r.cfg.Messages,
		SessionsPlanned: r.cfg.Sessions, GaveUp: r.gaveUp.Load(),
	}
	if r.cfg.Stream {
		res.Stream, res.Window = true, r.cfg.Window
	}
	var lat []time.Duration
	var first, last time.Time
	for _, s := range r.all {
		lat = append(lat, s.lat...)
		res.Sends += s.sends
		res.Acked += s.ok
		res.Duplicates += s.dup
		res.Rejected += s.rejected
		res.Errors += s.errs
		res.Unmatched += s.unmatched
		res.SessionsStarted += s.started
		res.SessionsFailed += s.failed
		res.SessionsAbandoned += s.abandoned
		res.SessionsCommitted += s.commit
		for c, n := range s.rejCodes {
			if res.RejectedByCode == nil {
				res.RejectedByCode = make(map[string]int64)
			}
			res.RejectedByCode[c] += n
		}
		for c, n := range s.errCodes {
			if res.ErrorsByCode == nil {
				res.ErrorsByCode = make(map[string]int64)
			}
			res.ErrorsByCode[c] += n
		}
		res.FirstRejection = cmp.Or(res.FirstRejection, s.firstRej)
		res.FirstError = cmp.Or(res.FirstError, s.firstErr)
		if !s.firstAt.IsZero() && (first.IsZero() || s.firstAt.Before(first)) {
			first = s.firstAt
		}
		if s.lastAt.After(last) {
			last = s.lastAt
		}
	}
	if !first.IsZero() {
		res.Elapsed = last.Sub(first)
	}
	res.ElapsedSec = res.Elapsed.Seconds()
	if res.Elapsed > 0 {
		res.Throughput = float64(res.Acked) / res.Elapsed.Seconds()
	}
	res.Latency = Summarize(lat)
	return res
}

// macpCode returns the MACP code a status error carries (a
// macp.v1.MACPError detail), or "".
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

// grpcCodeName is the canonical name of a gRPC code ("UNAVAILABLE").
func grpcCodeName(c codes.Code) string {
	names := map[codes.Code]string{
		codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
		codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
		codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
		codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
		codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
		codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
		codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
		codes.Unauthenticated: "UNAUTHENTICATED",
	}
	if n, ok := names[c]; ok {
		return n
	}
	return c.String()
}
