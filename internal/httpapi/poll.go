package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/wire"
)

// pollMax is the most envelopes one poll returns.
const pollMax = 1000

// pollItem is one element of the polling feed: the canonical envelope
// (decoded payload when its schema is known, else payload_b64), its
// sequence number as "seq", and the payload's proposal_id, if any, at top
// level: what the official Python SDK's HttpTransportAdapter reads.
type pollItem struct {
	Seq uint64 `json:"seq"`
	wire.CanonicalEnvelope
	ProposalID string `json:"proposal_id,omitempty"`
}

// poll is the compatibility feed GET /sessions/{id}/events?after=N of the
// official Python SDK's HttpTransportAdapter: a JSON array of the
// session's accepted envelopes with seq > N (N = -1 or 0: from the
// start), oldest first, at most ?limit= (default and cap 1000), returned
// at once (an empty array when there is nothing new). Same cursor as every
// other feed.
func (s *Server) poll(w http.ResponseWriter, r *http.Request) {
	id, _, cerr := s.Identify(r, true, false)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	q := r.URL.Query()
	var after uint64
	if v, ok, cerr := queryValue(q, "after"); cerr != nil {
		WriteError(w, cerr)
		return
	} else if ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < -1 {
			WriteError(w, coord.Errorf(coord.CodeInvalidEnvelope, "after=%q: use -1, 0 or a sequence number", v))
			return
		}
		after = uint64(max(n, 0))
	}
	limit := pollMax
	if v, ok, cerr := queryValue(q, "limit"); cerr != nil {
		WriteError(w, cerr)
		return
	} else if ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			WriteError(w, coord.Errorf(coord.CodeInvalidEnvelope, "limit=%q: use 1..%d", v, pollMax))
			return
		}
		limit = min(n, pollMax)
	}
	if cerr := s.rt.ChargeCall(id); cerr != nil {
		WriteError(w, cerr)
		return
	}
	items, cerr := s.readRange(r.Context(), id, r.PathValue("id"), after, limit)
	if cerr != nil {
		WriteError(w, cerr)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(items)
}

var errPollDone = errors.New("poll: done")

// readRange returns up to limit envelopes after `after` that are durable
// now, without waiting for more.
func (s *Server) readRange(ctx context.Context, id coord.Identity, sessionID string, after uint64, limit int) ([]pollItem, *coord.Error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.UnaryTimeout)
	defer cancel()
	items := []pollItem{}
	var end uint64
	_, err := s.follow(ctx, id, sessionID, after, 0, nil, func(last, from uint64) {
		end = last
		if from >= last {
			cancel() // caught up: nothing to read
		}
	}, func(seq uint64, env *macpv1.Envelope, _ *feedCharge) error {
		it := pollItem{Seq: seq, CanonicalEnvelope: wire.Canonical(env)}
		if it.Payload != nil {
			var p struct {
				ProposalID string `json:"proposal_id"`
			}
			if json.Unmarshal(it.Payload, &p) == nil {
				it.ProposalID = p.ProposalID
			}
		}
		items = append(items, it)
		if seq >= end || len(items) >= limit {
			return errPollDone
		}
		return nil
	})
	if err != nil && !errors.Is(err, errPollDone) && !(errors.Is(err, context.Canceled) && end > 0) {
		if ctx.Err() != nil && end > 0 {
			return items, nil
		}
		return nil, followError(err)
	}
	return items, nil
}
