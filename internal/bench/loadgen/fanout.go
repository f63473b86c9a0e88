package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/sdk"
)

// Fan-out load (RunFanout): one busy session, many passive subscribers.
//
// The initiator starts one Decision session whose declared participants
// are the senders (p1..pS) and the watcher identities (w1..wK, at most
// FanoutPerWatcher subscribers each, so the default per-identity stream
// cap holds). Subscribers StreamSessions with subscribe_session_id and
// after_sequence 0, spread over Conns connections, as the watchers; once
// every one has its response header, Warmup envelopes are sent and
// delivered (untimed), then the measured phase: Senders concurrent unary
// Send callers send Messages envelopes of the decision pattern (each
// caller sequential) and the run waits until every subscriber received
// every envelope. ServerCPU, if set, is read before and after the
// measured phase (the server process's CPU time), so the result says what
// the server spent per delivered envelope.
//
// Verification (any failure fails the run): every subscriber must receive
// the same envelopes in the same order (a count and an order-dependent
// hash of the message ids); the first subscriber keeps its whole list,
// which must hold every sent message id exactly once, each sender's
// messages in the order it sent them.

// FanoutPerWatcher is how many subscribers share one watcher identity.
const FanoutPerWatcher = 200

// FanoutConfig describes one fan-out run.
type FanoutConfig struct {
	// Addr and Dial as in Config.
	Addr string
	Dial func(ctx context.Context) (macpv1.MACPRuntimeServiceClient, io.Closer, error)
	// Subscribers (default 1000), spread over Conns connections (default
	// 20); the senders use a connection of their own.
	Subscribers, Conns int
	// Senders concurrent unary Send callers (default 8) send Messages
	// envelopes (default 1000) after Warmup (default 100) untimed ones.
	Senders, Messages, Warmup int
	// Pad adds bytes to each envelope's payload.
	Pad int
	// Initiator (default DefaultInitiator), ModeVersion (default: the
	// runtime's), CallTimeout per Send (default 10s), Timeout for the
	// whole delivery (default 5m).
	Initiator, ModeVersion string
	CallTimeout, Timeout   time.Duration
	// ServerCPU, if set, returns the server's CPU time so far.
	ServerCPU func() (time.Duration, error)
}

// FanoutResult is the outcome of a fan-out run (every figure is of the
// measured phase).
type FanoutResult struct {
	SessionID   string `json:"session_id"`
	Subscribers int    `json:"subscribers"`
	Conns       int    `json:"conns"`
	Senders     int    `json:"senders"`
	Messages    int    `json:"messages"`
	// Delivered is Messages x Subscribers, every one verified.
	Delivered int64 `json:"delivered"`
	// AcceptedSec is until every Send was acknowledged; DeliveredSec until
	// every subscriber had every envelope.
	AcceptedSec  float64 `json:"accepted_s"`
	DeliveredSec float64 `json:"delivered_s"`
	// DeliveriesPerSec is Delivered per DeliveredSec.
	DeliveriesPerSec float64 `json:"deliveries_per_s"`
	// ServerCPUSec is the server's CPU time during the measured phase;
	// ServerCPUPerDelivery is it per delivered envelope, in µs (0 without
	// Config.ServerCPU).
	ServerCPUSec         float64 `json:"server_cpu_s"`
	ServerCPUPerDelivery float64 `json:"server_cpu_us_per_delivery"`
}

// fanSub is one subscriber's tally of the envelopes of the session.
type fanSub struct {
	n    atomic.Int64
	hash atomic.Uint64 // order-dependent hash of the message ids so far
	ids  []string      // subscriber 0 only
	err  atomic.Pointer[error]
}

func chainHash(h uint64, id string) uint64 {
	f := fnv.New64a()
	f.Write([]byte(id))
	return h*1099511628211 ^ f.Sum64()
}

// RunFanout runs one fan-out measurement (see above).
func RunFanout(ctx context.Context, cfg FanoutConfig) (*FanoutResult, error) {
	cfg.Subscribers = cmp.Or(cfg.Subscribers, 1000)
	cfg.Conns = cmp.Or(cfg.Conns, 20)
	cfg.Senders = cmp.Or(cfg.Senders, 8)
	cfg.Messages = cmp.Or(cfg.Messages, 1000)
	cfg.Warmup = cmp.Or(cfg.Warmup, 100)
	cfg.Initiator = cmp.Or(cfg.Initiator, DefaultInitiator)
	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, 10*time.Second)
	cfg.Timeout = cmp.Or(cfg.Timeout, 5*time.Minute)
	if cfg.Subscribers < 1 || cfg.Conns < 1 || cfg.Senders < 1 || cfg.Messages < 1 || cfg.Warmup < 0 || cfg.Pad < 0 {
		return nil, errors.New("loadgen: fan-out needs at least one subscriber, connection, sender and message")
	}
	if cfg.Dial == nil {
		cfg.Dial = plaintextDial(cfg.Addr)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conns := make([]macpv1.MACPRuntimeServiceClient, cfg.Conns+1) // the last: senders
	for i := range conns {
		cl, closer, err := cfg.Dial(ctx)
		if err != nil {
			return nil, fmt.Errorf("loadgen: dial: %w", err)
		}
		defer closer.Close()
		conns[i] = cl
	}
	r := &runner{cfg: Config{Initiator: cfg.Initiator, CallTimeout: cfg.CallTimeout, Mode: ModeDecision}, clients: conns[cfg.Conns:]}
	modeVersion := cmp.Or(cfg.ModeVersion, r.lookupModeVersion(ctx), defaultModeVersions[ModeDecision])
	wl := decisionLoad{pad: strings.Repeat("x", cfg.Pad)}
	watchers := make([]string, (cfg.Subscribers+FanoutPerWatcher-1)/FanoutPerWatcher)
	for i := range watchers {
		watchers[i] = "w" + strconv.Itoa(i+1)
	}
	sid := sdk.NewSessionID()
	start, err := sdk.NewSessionStart(sid, ModeDecision, sdk.StartPayload{
		Intent: "fan-out", Participants: append(wl.participants(cfg.Senders), watchers...), TTL: time.Hour,
		ModeVersion: modeVersion, ConfigurationVersion: sdk.DefaultConfigurationVersion,
	})
	if err != nil {
		return nil, err
	}
	sendCl := conns[cfg.Conns]
	send := func(sender string, env *macpv1.Envelope) error {
		cctx, ccancel := context.WithTimeout(r.as(ctx, sender), cfg.CallTimeout)
		defer ccancel()
		resp, err := sendCl.Send(cctx, &macpv1.SendRequest{Envelope: env})
		if err != nil {
			return fmt.Errorf("%s %s: %w", env.MessageType, env.MessageId, err)
		}
		if a := resp.GetAck(); !a.GetOk() {
			return fmt.Errorf("%s %s rejected: %s: %s", env.MessageType, env.MessageId, a.GetError().GetCode(), a.GetError().GetMessage())
		}
		return nil
	}
	if err := send(cfg.Initiator, start); err != nil {
		return nil, fmt.Errorf("loadgen: SessionStart: %w", err)
	}
	pre := wl.prelude(cfg.Initiator)[0]
	if err := send(pre.sender, &macpv1.Envelope{MacpVersion: sdk.ProtocolVersion, Mode: ModeDecision, MessageType: pre.typ,
		MessageId: "pre", SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: pre.payload}); err != nil {
		return nil, fmt.Errorf("loadgen: prelude: %w", err)
	}

	// Subscribers.
	subs := make([]*fanSub, cfg.Subscribers)
	var ready sync.WaitGroup
	for i := range subs {
		sub := &fanSub{}
		subs[i] = sub
		who := watchers[i/FanoutPerWatcher]
		stream, err := conns[i%cfg.Conns].StreamSession(r.as(ctx, who))
		if err != nil {
			return nil, fmt.Errorf("loadgen: subscriber %d: %w", i, err)
		}
		if err := stream.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: sid}); err != nil {
			return nil, fmt.Errorf("loadgen: subscriber %d: %w", i, err)
		}
		ready.Add(1)
		go func() {
			defer ready.Done()
			if _, err := stream.Header(); err != nil {
				err = fmt.Errorf("subscriber %d: %w", i, err)
				sub.err.Store(&err)
			}
		}()
		go func() {
			for {
				resp, err := stream.Recv()
				if err != nil {
					if ctx.Err() == nil {
						err = fmt.Errorf("subscriber %d: the stream ended: %w", i, err)
						sub.err.Store(&err)
					}
					return
				}
				env := resp.GetEnvelope()
				if env == nil || env.SessionId != sid {
					continue // heartbeats
				}
				if i == 0 {
					sub.ids = append(sub.ids, env.MessageId)
				}
				sub.hash.Store(chainHash(sub.hash.Load(), env.MessageId))
				sub.n.Add(1)
			}
		}()
	}
	ready.Wait()
	for _, s := range subs {
		if e := s.err.Load(); e != nil {
			return nil, fmt.Errorf("loadgen: %w", *e)
		}
	}

	// drive sends count messages from cfg.Senders callers, numbered from
	// base per caller, and waits for their acknowledgements.
	drive := func(phase string, count int) error {
		var wg sync.WaitGroup
		errc := make(chan error, cfg.Senders)
		for j := range cfg.Senders {
			n := count / cfg.Senders
			if j < count%cfg.Senders {
				n++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range n {
					m := wl.next(cfg.Initiator, j, fanKey(phase, k))
					env := &macpv1.Envelope{MacpVersion: sdk.ProtocolVersion, Mode: ModeDecision, MessageType: m.typ,
						MessageId: fmt.Sprintf("%s-%d-%d", phase, j, k), SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: m.payload}
					if err := send(m.sender, env); err != nil {
						errc <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		select {
		case err := <-errc:
			return fmt.Errorf("loadgen: %w", err)
		default:
			return nil
		}
	}
	// wait waits until every subscriber has n envelopes.
	wait := func(n int64) error {
		deadline := time.Now().Add(cfg.Timeout)
		for {
			behind, least := 0, n
			for _, s := range subs {
				if e := s.err.Load(); e != nil {
					return fmt.Errorf("loadgen: %w", *e)
				}
				if c := s.n.Load(); c < n {
					behind++
					least = min(least, c)
				}
			}
			if behind == 0 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("loadgen: %d of %d subscribers did not receive %d envelopes within %v (the slowest has %d)",
					behind, len(subs), n, cfg.Timeout, least)
			}
			time.Sleep(time.Millisecond)
		}
	}
	base := int64(2) // SessionStart and the prelude
	if cfg.Warmup > 0 {
		if err := drive("w", cfg.Warmup); err != nil {
			return nil, err
		}
		if err := wait(base + int64(cfg.Warmup)); err != nil {
			return nil, err
		}
	}
	total := base + int64(cfg.Warmup) + int64(cfg.Messages)
	var cpu0 time.Duration
	if cfg.ServerCPU != nil {
		if cpu0, err = cfg.ServerCPU(); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	if err := drive("m", cfg.Messages); err != nil {
		return nil, err
	}
	accepted := time.Since(t0)
	if err := wait(total); err != nil {
		return nil, err
	}
	delivered := time.Since(t0)
	res := &FanoutResult{SessionID: sid, Subscribers: cfg.Subscribers, Conns: cfg.Conns, Senders: cfg.Senders, Messages: cfg.Messages,
		Delivered: int64(cfg.Messages) * int64(cfg.Subscribers), AcceptedSec: accepted.Seconds(), DeliveredSec: delivered.Seconds()}
	res.DeliveriesPerSec = float64(res.Delivered) / delivered.Seconds()
	if cfg.ServerCPU != nil {
		cpu1, err := cfg.ServerCPU()
		if err != nil {
			return nil, err
		}
		res.ServerCPUSec = (cpu1 - cpu0).Seconds()
		res.ServerCPUPerDelivery = float64((cpu1 - cpu0).Microseconds()) / float64(res.Delivered)
	}
	// Nothing more may arrive: watch for a duplicate for a moment.
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := verifyFanout(subs, total, cfg.Senders, cfg.Warmup, cfg.Messages); err != nil {
		return nil, err
	}
	return res, nil
}

// fanKey keeps the decision pattern's proposal ids of the two phases
// apart (next numbers them by k).
func fanKey(phase string, k int) int {
	if phase == "m" {
		return k + 1<<30
	}
	return k
}

// verifyFanout checks the tallies (see the package comment on fan-out).
func verifyFanout(subs []*fanSub, total int64, senders, warmup, messages int) error {
	ref := subs[0]
	ids := ref.ids
	if int64(len(ids)) != total || ref.n.Load() != total {
		return fmt.Errorf("loadgen: subscriber 0 received %d envelopes, want %d", len(ids), total)
	}
	var h uint64
	for _, id := range ids {
		h = chainHash(h, id)
	}
	if h != ref.hash.Load() {
		return errors.New("loadgen: subscriber 0's hash does not match its list")
	}
	for i, s := range subs {
		if n := s.n.Load(); n != total || s.hash.Load() != h {
			return fmt.Errorf("loadgen: subscriber %d received %d envelopes (order hash %x); subscriber 0 received %d (%x): not the same envelopes in the same order",
				i, n, s.hash.Load(), total, h)
		}
	}
	if ids[1] != "pre" {
		return fmt.Errorf("loadgen: subscriber 0's second envelope is %q, want the prelude", ids[1])
	}
	// Subscriber 0: every sent id once, each sender's in its order.
	next := map[string]int{} // "phase-j" -> next k
	seen := make(map[string]bool, len(ids))
	for _, id := range ids[2:] {
		if seen[id] {
			return fmt.Errorf("loadgen: envelope %s delivered twice", id)
		}
		seen[id] = true
		cut := strings.LastIndexByte(id, '-')
		k, err := strconv.Atoi(id[cut+1:])
		if cut < 0 || err != nil {
			return fmt.Errorf("loadgen: unexpected envelope %q delivered", id)
		}
		if k != next[id[:cut]] {
			return fmt.Errorf("loadgen: envelope %s delivered out of its sender's order (expected number %d)", id, next[id[:cut]])
		}
		next[id[:cut]]++
	}
	for phase, count := range map[string]int{"w": warmup, "m": messages} {
		for j := range senders {
			want := count / senders
			if j < count%senders {
				want++
			}
			if got := next[fmt.Sprintf("%s-%d", phase, j)]; got != want {
				return fmt.Errorf("loadgen: sender %d's %s envelopes: %d delivered, %d sent", j, phase, got, want)
			}
		}
	}
	return nil
}
