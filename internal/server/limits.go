package server

import (
	"context"
	"net"
	"sync"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/limits"
	"github.com/macpd/macpd/internal/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Transport limits and the authorization filters that need the transport
// (docs/security.md "Limits"). Payload size is Options.MaxRecvBytes;
// per-sender rates and open sessions are the runtime's.

// Limits are the gRPC binding's abuse limits (Options.Limits): the
// configuration's type (limits.Transport), documented there.
type Limits = limits.Transport

// streamLimits are the Service's stream counters.
type streamLimits struct {
	perIdentity *limits.Counter
	perSession  *limits.Counter
}

func newStreamLimits(l Limits) *streamLimits {
	return &streamLimits{perIdentity: limits.NewCounter(l.MaxStreamsPerIdentity), perSession: limits.NewCounter(l.MaxStreamsPerSession)}
}

// limitOptions are the grpc.Server options for s.opts.Limits.
func (s *Service) limitOptions() []grpc.ServerOption {
	l := s.opts.Limits
	opts := []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: l.MaxConnectionIdle,
			Time:              l.KeepaliveTime,
			Timeout:           l.KeepaliveTimeout,
		}),
		// Pings without calls in flight are allowed (SDKs keep idle
		// channels alive); they do not count as activity for
		// MaxConnectionIdle.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.KeepaliveMinTime, PermitWithoutStream: true}),
	}
	if l.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(l.MaxConcurrentStreams)))
	}
	if l.HandshakeTimeout > 0 {
		opts = append(opts, grpc.ConnectionTimeout(l.HandshakeTimeout))
	}
	return opts
}

// limitUnary bounds unary calls by Limits.UnaryTimeout and charges
// ListSessions, whose cost grows with the number of sessions, to the
// caller's message rate (runtime.ChargeCall). It runs after
// authentication.
func (s *Service) limitUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if info.FullMethod == macpv1.MACPRuntimeService_ListSessions_FullMethodName {
		if id, ok := identityFrom(ctx); ok && s.rt != nil {
			if cerr := s.rt.ChargeCall(id); cerr != nil {
				return nil, statusErr(cerr)
			}
		}
	}
	d := s.opts.Limits.UnaryTimeout
	// Send waits only for its commit, which the runtime bounds itself
	// (runtime.Options.CommitTimeout, set to the same limit): a context
	// with a timer per call was ~3% of the server's CPU under load.
	if d <= 0 || !isMACPMethod(info.FullMethod) || info.FullMethod == macpv1.MACPRuntimeService_Send_FullMethodName {
		return h(ctx, req)
	}
	ctx, cancel := context.WithTimeout(ctx, d) // an earlier client deadline stays
	defer cancel()
	resp, err := h(ctx, req)
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		if _, isStatus := status.FromError(err); !isStatus {
			err = status.Error(codes.DeadlineExceeded, "the call took longer than the server's limit")
		}
	}
	return resp, err
}

// limitStream runs after authentication on every streaming MACP call: it
// charges opening StreamSession, WatchSessions and WatchSignals to the
// caller's message rate (their initial sync or catch-up grows with the
// sessions), takes one of the caller's stream slots (RATE_LIMITED when
// none is left), counts StreamSession streams against their session, and
// filters WatchSignals by visibility (runtime.MaySeeSignal).
func (s *Service) limitStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if !isMACPMethod(info.FullMethod) {
		return h(srv, ss)
	}
	ctx := ss.Context()
	id, authed := identityFrom(ctx)
	key, who := "id:"+id.Sender, id.Sender
	if !authed {
		who = "this client address"
		key = "addr:"
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			host, _, err := net.SplitHostPort(p.Addr.String())
			if err != nil {
				host = p.Addr.String()
			}
			key += host
		}
	}
	switch info.FullMethod {
	case macpv1.MACPRuntimeService_StreamSession_FullMethodName, macpv1.MACPRuntimeService_WatchSessions_FullMethodName,
		macpv1.MACPRuntimeService_WatchSignals_FullMethodName:
		if authed {
			if cerr := s.rt.ChargeCall(id); cerr != nil {
				return statusErr(cerr)
			}
		}
	}
	release, ok := s.lim.perIdentity.Acquire(key)
	if !ok {
		s.log.Info("stream limit reached", "identity", who, "method", info.FullMethod, "max", s.lim.perIdentity.Max())
		return statusErr(coord.Errorf(coord.CodeRateLimited, "%s already has %d streams open; close one before opening another", who, s.lim.perIdentity.Max()))
	}
	defer release()
	switch info.FullMethod {
	case macpv1.MACPRuntimeService_WatchSignals_FullMethodName:
		return h(srv, &signalFilter{ServerStream: ss, rt: s.rt, id: id})
	case macpv1.MACPRuntimeService_StreamSession_FullMethodName:
		w := &sessionSlot{ServerStream: ss, s: s, id: id}
		err := h(srv, w)
		if refused := w.done(); refused != nil {
			return refused
		}
		return err
	}
	return h(srv, ss)
}

// signalFilter drops the WatchSignals responses the subscriber may not see
// (docs/security.md: a Signal related to a session goes to its members and
// observers only).
type signalFilter struct {
	grpc.ServerStream
	rt *runtime.Runtime
	id coord.Identity
}

func (f *signalFilter) SendMsg(m any) error {
	if r, ok := m.(*macpv1.WatchSignalsResponse); ok && r.GetEnvelope() != nil && !f.rt.MaySeeSignal(f.Context(), f.id, r.GetEnvelope()) {
		return nil
	}
	return f.ServerStream.SendMsg(m)
}

// sessionSlot counts a StreamSession stream against the session its first
// frame names (a subscribe_session_id or an envelope's session_id), if the
// caller may read that session or it does not exist yet: outsiders, whom
// the handler refuses anyway, cannot use up a session's slots. When the
// session has Limits.MaxStreamsPerSession streams the frame is not
// delivered and the call ends with RATE_LIMITED.
type sessionSlot struct {
	grpc.ServerStream
	s  *Service
	id coord.Identity

	mu      sync.Mutex
	counted bool
	release func()
	refused error
}

func (w *sessionSlot) RecvMsg(m any) error {
	if err := w.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	req, ok := m.(*macpv1.StreamSessionRequest)
	if !ok {
		return nil
	}
	sid := req.GetSubscribeSessionId()
	if sid == "" {
		sid = req.GetEnvelope().GetSessionId()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if sid == "" || w.counted || w.refused != nil {
		return w.refused
	}
	if known, allowed := w.s.rt.MayRead(w.Context(), w.id, sid); known && !allowed {
		return nil // the handler refuses it
	}
	release, ok := w.s.lim.perSession.Acquire(sid)
	if !ok {
		w.s.log.Info("session stream limit reached", "session_id", sid, "identity", w.id.Sender, "max", w.s.lim.perSession.Max())
		w.refused = statusErr(coord.Errorf(coord.CodeRateLimited, "session %s already has %d streams open", sid, w.s.lim.perSession.Max()))
		return w.refused
	}
	w.counted, w.release = true, release
	return nil
}

// done releases the session slot and returns the refusal, if any.
func (w *sessionSlot) done() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.release != nil {
		w.release()
		w.release = nil
	}
	return w.refused
}
