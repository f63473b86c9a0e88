package httpapi

import (
	"context"
	"errors"
	"strconv"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/streambudget"
)

// follow is this package's only use of the runtime's follower API
// (runtime.Follow): every feed (SSE, WebSocket subscriptions, the polling
// route) reads a session through it, so they share the gRPC subscribe's
// cursor and semantics: records after `after`, replay then live, no gap,
// no duplicate, only durable records, slow readers served from storage.
//
// onStart runs once before any delivery with the session's last sequence
// number and the effective after (which differs from the requested one
// only when that was beyond the end: then the feed is live from
// openedMs). deliver gets each accepted envelope with its sequence number;
// records without an envelope (a TTL expiry) are skipped. ended reports
// that the session is terminal and everything was delivered; err is
// deliver's error, ctx's, or a refusal (*coord.Error: SESSION_NOT_FOUND,
// FORBIDDEN, INTERNAL_ERROR; RATE_LIMITED for a stalled feed).
//
// With a window (feedwindow.go), every record is charged to it before it
// is read, and deliver gets the record's charge: done(true) once the
// message was written to the client, done(false) if it was not (it may be
// handed on to a writer that does). Without one (the polling route,
// which answers a bounded page), the charge is nil.
func (s *Server) follow(ctx context.Context, id coord.Identity, sessionID string, after uint64, openedMs int64, fw *feedWindow,
	onStart func(last, from uint64), deliver func(seq uint64, env *macpv1.Envelope, c *feedCharge) error) (ended bool, err error) {
	opts := runtime.FollowOptions{LiveSinceMs: openedMs, OnStartAfter: onStart}
	if fw != nil {
		opts.Window = fw.w
	}
	err = s.rt.Follow(ctx, id, sessionID, after, opts, func(rec session.Record) error {
		if fw == nil {
			if rec.Envelope == nil {
				return nil
			}
			return deliver(rec.Seq, rec.Envelope, nil)
		}
		cost := streambudget.Cost(rec)
		if rec.Envelope == nil {
			fw.w.Release(cost)
			return nil
		}
		return deliver(rec.Seq, rec.Envelope, fw.queued(cost))
	})
	if errors.Is(err, runtime.ErrFollowEnded) {
		return true, nil
	}
	return false, err
}

// followError maps a follow failure to a MACP error.
func followError(err error) *coord.Error {
	var ce *coord.Error
	if errors.As(err, &ce) {
		return ce
	}
	return coord.Errorf(coord.CodeInternalError, "following the session failed")
}

// parseSeq parses a sequence number (a cursor).
func parseSeq(name, v string) (uint64, *coord.Error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, coord.Errorf(coord.CodeInvalidEnvelope, "%s %q is not a sequence number (0, 1, 2, ...)", name, v)
	}
	return n, nil
}

// acquireStream takes one of id's stream slots and one of the session's
// (RATE_LIMITED when none is left) and charges opening a feed to id's
// message rate, as gRPC does for StreamSession.
func (s *Server) acquireStream(id coord.Identity, sessionID string) (release func(), cerr *coord.Error) {
	if cerr := s.rt.ChargeCall(id); cerr != nil {
		return nil, cerr
	}
	relID, ok := s.perID.Acquire("id:" + id.Sender)
	if !ok {
		return nil, coord.Errorf(coord.CodeRateLimited, "%s already has %d streams open on the HTTP listener; close one first", id.Sender, s.perID.Max())
	}
	if sessionID == "" {
		return relID, nil
	}
	relS, ok := s.perSess.Acquire(sessionID)
	if !ok {
		relID()
		return nil, coord.Errorf(coord.CodeRateLimited, "session %s already has %d feeds open on the HTTP listener", sessionID, s.perSess.Max())
	}
	return func() { relS(); relID() }, nil
}
