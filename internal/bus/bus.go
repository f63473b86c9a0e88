// Package bus is the message-bus binding over NATS subjects (RFC-MACP-0006
// §6, docs/cluster.md "Message-bus binding"): agents submit envelopes by
// NATS request and get the Ack back on the reply subject (Serve), and
// receive accepted records on per-session, per-member subjects published
// by the holder of the cluster's delivery lease (Deliver, deliver.go);
// AgentPermissions gives the NATS permissions that confine an agent to
// its own submissions and the sessions it belongs to.
//
// Subject: <name>.bus.submit.<base64url(agent id)>, a request whose body is
// a protobuf macp.v1.Envelope. Every macpd node with MACP_NATS_BUS=1
// subscribes in the queue group "macpd", so exactly one node takes each
// submission. The sender is the agent id in the subject (the envelope's
// sender field is overwritten, as on every binding): NATS authorization is
// the authentication, so each agent's NATS user must be allowed to publish
// only to its own submit subject (docs/cluster.md gives the permissions).
//
// Authoritative acceptance: the reply is the protobuf macp.v1.Ack that the
// runtime returns for the envelope, sent only after the runtime returned
// it, so an Ack with ok=true means the envelope was appended to the
// replicated history stream (a quorum of the servers stored it). A
// submission without a reply subject is not processed. No reply (a node
// lost, a timeout) means unknown: resend with the same message_id, which
// the history deduplicates. Order within a session is the history's order
// (each envelope's position is decided by the append), and one agent's
// envelopes are decided in the order their answers arrive when it waits
// for each Ack before the next.
//
// Bounds: at most MaxInFlight submissions are processed at once per node;
// beyond that a submission is answered RATE_LIMITED at once. Each waits at
// most Timeout for the runtime.
package bus

import (
	"context"
	"encoding/base64"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/runtime"
)

// QueueGroup is the queue group every node's submit subscription joins.
const QueueGroup = "macpd"

// MaxInFlight bounds the submissions one node processes at once.
const MaxInFlight = 1024

// Timeout bounds one submission's wait for the runtime.
const Timeout = 30 * time.Second

// SubmitSubject returns the subject an agent submits on.
func SubmitSubject(name, agent string) string {
	return name + ".bus.submit." + base64.RawURLEncoding.EncodeToString([]byte(agent))
}

// Server is one node's bus binding.
type Server struct {
	sub  *nats.Subscription
	slot chan struct{}
	wg   sync.WaitGroup
	stop context.CancelFunc
	ctx  context.Context
}

// Serve subscribes to <name>.bus.submit.* and hands each submission to rt.
func Serve(nc *nats.Conn, name string, rt *runtime.Runtime, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{slot: make(chan struct{}, MaxInFlight), stop: cancel, ctx: ctx}
	prefix := name + ".bus.submit."
	sub, err := nc.QueueSubscribe(prefix+"*", QueueGroup, func(m *nats.Msg) {
		if m.Reply == "" {
			return // nobody to answer: not processed
		}
		reply := func(ack *macpv1.Ack) {
			b, err := proto.Marshal(ack)
			if err == nil {
				err = m.Respond(b)
			}
			if err != nil {
				log.Debug("bus: answering a submission failed", "err", err)
			}
		}
		agent, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(m.Subject, prefix))
		if err != nil || len(agent) == 0 {
			reply(nack(nil, coord.CodeInvalidEnvelope, "the submit subject does not name an agent (base64url)"))
			return
		}
		env := &macpv1.Envelope{}
		if err := proto.Unmarshal(m.Data, env); err != nil {
			reply(nack(nil, coord.CodeInvalidEnvelope, "the body is not a protobuf macp.v1.Envelope"))
			return
		}
		select {
		case s.slot <- struct{}{}:
		default:
			reply(nack(env, coord.CodeRateLimited, "too many submissions in flight on this node; retry"))
			return
		}
		s.wg.Add(1)
		go func() {
			defer func() { <-s.slot; s.wg.Done() }()
			cctx, cancel := context.WithTimeout(s.ctx, Timeout)
			defer cancel()
			reply(rt.Send(cctx, coord.Identity{Sender: string(agent)}, env))
		}()
	})
	if err != nil {
		cancel()
		return nil, err
	}
	s.sub = sub
	return s, nil
}

func nack(env *macpv1.Envelope, code coord.Code, msg string) *macpv1.Ack {
	ack := &macpv1.Ack{Ok: false, Error: &macpv1.MACPError{Code: string(code), Message: msg}}
	if env != nil {
		ack.MessageId, ack.SessionId = env.MessageId, env.SessionId
	}
	return ack
}

// Stop unsubscribes and waits for the submissions in progress.
func (s *Server) Stop() {
	_ = s.sub.Unsubscribe()
	s.wg.Wait()
	s.stop()
}
