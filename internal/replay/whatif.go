package replay

import (
	"errors"
	"fmt"
	"strings"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

// Rebind is a what-if: the same envelopes under another bound version.
// Zero fields keep the stored binding.
type Rebind struct {
	// Policy replaces the bound policy descriptor (RFC-MACP-0012).
	Policy *policy.Descriptor
	// ModeVersion replaces the bound mode version.
	ModeVersion string
	// Profile replaces the protocol profile the session is bound to
	// (coord.ResolveProfile's names: "2026-04", "2026-09", "latest"): the
	// same envelopes re-decided under the other profile's rules.
	Profile string
}

// Decision is one envelope's fate in a what-if.
type Decision struct {
	// Seq is the envelope's sequence number in the stored history.
	Seq      uint64
	Accepted bool
	// Code is the MACP error code of a rejection.
	Code string
	// State is the what-if session's state after the envelope (0 when the
	// SessionStart was refused); Stored the state the stored record
	// recorded after it (0 for a record written without one).
	State, Stored session.Status
}

// StateDiverged reports whether the envelope was accepted but left the
// what-if session in another state than the stored one (a cancel ending
// a session EXPIRED under one profile and CANCELLED under the other).
func (d Decision) StateDiverged() bool {
	return d.Accepted && d.Stored != 0 && d.State != d.Stored
}

// WhatIf is the result of replaying a history under a Rebind.
type WhatIf struct {
	// Session is the what-if session (nil when the SessionStart itself was
	// rejected).
	Session *session.Session
	// Decisions has one entry per stored envelope, in order.
	Decisions []Decision
	// FirstDivergence is the stored sequence number of the first envelope
	// the what-if rejects (every stored envelope was accepted) or accepts
	// into another state than the stored one (Decision.StateDiverged), 0
	// if none.
	FirstDivergence uint64
	// Accepted are the envelopes the what-if accepted, in order, as
	// rebound (for its snapshot).
	Accepted []*macpv1.Envelope
}

// Redecide re-decides every stored envelope of recs, with its recorded
// acceptance time, through the core's admission path (session.Start's
// replay twin Restore, Step, Cancel, ExpireIfDue) under rb. The
// SessionStart and every Commitment that named the stored mode or policy
// version are rewritten to name the new one, so that a divergence comes
// from the new rules rather than from the version check. Under another
// protocol profile (rb.Profile) nothing is rewritten: the session is
// restored bound to that profile and every envelope re-decided by its
// rules. A stored expiry is re-applied at its recorded time. Its only
// errors are for a history that does not begin with a decodable
// SessionStart and for an unknown profile name (a refused SessionStart is
// a divergence at 1, not an error).
func Redecide(recs []session.Record, modes session.Modes, lim session.Limits, rb Rebind) (*WhatIf, error) {
	if len(recs) == 0 || recs[0].Kind != session.KindStart || recs[0].Envelope == nil || recs[0].Start == nil {
		return nil, errors.New("history does not begin with a SessionStart")
	}
	w := &WhatIf{}
	start := recs[0]
	var sp macpv1.SessionStartPayload
	if err := proto.Unmarshal(start.Envelope.Payload, &sp); err != nil {
		return nil, fmt.Errorf("stored SessionStart payload: %v", err)
	}
	oldMode, oldPolicy := sp.ModeVersion, start.Start.Policy.ID
	info := *start.Start
	if rb.Policy != nil {
		info.Policy = *rb.Policy
		sp.PolicyVersion = rb.Policy.ID
	}
	if rb.ModeVersion != "" {
		sp.ModeVersion = rb.ModeVersion
	}
	if rb.Profile != "" {
		p, ok := coord.ResolveProfile(rb.Profile)
		if !ok {
			return nil, fmt.Errorf("unknown profile %q (want %s or latest)", rb.Profile, strings.Join(coord.Profiles, ", "))
		}
		info.Profile = p
	}
	env := proto.Clone(start.Envelope).(*macpv1.Envelope)
	env.Payload, _ = proto.MarshalOptions{Deterministic: true}.Marshal(&sp)
	start.Envelope, start.Start = env, &info
	s, err := session.Restore(start, modes)
	if err != nil {
		w.Decisions = append(w.Decisions, Decision{Seq: 1, Code: string(coord.AsError(err).Code)})
		w.FirstDivergence = 1
		return w, nil
	}
	w.Session = s
	first := Decision{Seq: 1, Accepted: true, State: s.Status, Stored: recs[0].Status}
	w.Decisions = append(w.Decisions, first)
	w.Accepted = append(w.Accepted, env)
	if first.StateDiverged() {
		w.FirstDivergence = 1
	}
	var rec session.Record
	decide := func(seq uint64, out session.Outcome, env *macpv1.Envelope) {
		d := Decision{Seq: seq, Accepted: out.Accepted(), State: s.Status, Stored: rec.Status}
		if out.Err != nil {
			d.Code = string(out.Err.Code)
		} else if out.Duplicate {
			d.Code = "DUPLICATE"
			d.Accepted = false
		}
		if d.Accepted {
			w.Accepted = append(w.Accepted, env)
		}
		if (!d.Accepted || d.StateDiverged()) && w.FirstDivergence == 0 {
			w.FirstDivergence = seq
		}
		w.Decisions = append(w.Decisions, d)
	}
	for _, rec = range recs[1:] {
		switch rec.Kind {
		case session.KindMessage:
			e := rebindCommitment(rec.Envelope, oldMode, oldPolicy, s.Binding.ModeVersion, s.Binding.PolicyVersion)
			decide(rec.Seq, s.Step(e, rec.AcceptedAtMs, lim), e)
		case session.KindCancel:
			var cp macpv1.SessionCancelPayload
			_ = proto.Unmarshal(rec.Envelope.GetPayload(), &cp)
			out := s.Cancel(cp.CancelledBy, cp.Reason, rec.Envelope.GetMessageId(), rec.AcceptedAtMs)
			if out.Err == nil && len(out.Records) == 0 {
				out.Err = coord.Errorf(coord.CodeSessionNotOpen, "session already ended")
			}
			if out.Err == nil && out.Records[0].Kind != session.KindCancel {
				out.Err = coord.Errorf(coord.CodeSessionNotOpen, "session expired first")
			}
			var ce *macpv1.Envelope
			if out.Err == nil {
				ce = out.Records[0].Envelope
			}
			decide(rec.Seq, out, ce)
		case session.KindSuspend, session.KindResume:
			// The runtime's control records are re-decided with their
			// recorded caller, message id and time, so the what-if session
			// is suspended, resumed and its deadline moved as the stored one
			// was (RFC-MACP-0001 §7.5).
			var out session.Outcome
			if rec.Kind == session.KindSuspend {
				var sp macpv1.SessionSuspendPayload
				_ = proto.Unmarshal(rec.Envelope.GetPayload(), &sp)
				out = s.Suspend(sp.SuspendedBy, sp.Reason, rec.Envelope.GetMessageId(), rec.AcceptedAtMs)
			} else {
				var rp macpv1.SessionResumePayload
				_ = proto.Unmarshal(rec.Envelope.GetPayload(), &rp)
				out = s.Resume(rp.ResumedBy, rp.Reason, rec.Envelope.GetMessageId(), rec.AcceptedAtMs)
			}
			if out.Err == nil && (len(out.Records) != 1 || out.Records[0].Kind != rec.Kind) {
				out.Err = coord.Errorf(coord.CodeSessionNotOpen, "the session is %s", s.Status)
			}
			var ce *macpv1.Envelope
			if out.Err == nil {
				ce = out.Records[0].Envelope
			}
			decide(rec.Seq, out, ce)
		case session.KindImplicit:
			out := s.ImplicitIfDue(rec.AcceptedAtMs, rec.Envelope.GetMessageId())
			if out.Err == nil && len(out.Records) != 1 {
				out.Err = coord.Errorf(coord.CodeSessionNotOpen, "no implicit action is due under the what-if policy")
			}
			var ie *macpv1.Envelope
			if out.Err == nil {
				ie = out.Records[0].Envelope
			}
			decide(rec.Seq, out, ie)
		case session.KindExpire:
			s.ExpireIfDue(rec.AcceptedAtMs)
		}
	}
	return w, nil
}

// rebindCommitment returns env, or for a Commitment naming the stored
// mode or policy version, a copy naming the what-if's.
func rebindCommitment(env *macpv1.Envelope, oldMode, oldPolicy, newMode, newPolicy string) *macpv1.Envelope {
	if env.GetMessageType() != coord.TypeCommitment || (oldMode == newMode && oldPolicy == newPolicy) {
		return env
	}
	var c macpv1.CommitmentPayload
	if err := proto.Unmarshal(env.Payload, &c); err != nil {
		return env
	}
	changed := false
	if c.ModeVersion == oldMode && oldMode != newMode {
		c.ModeVersion, changed = newMode, true
	}
	if c.PolicyVersion == oldPolicy && oldPolicy != newPolicy {
		c.PolicyVersion, changed = newPolicy, true
	}
	if !changed {
		return env
	}
	out := proto.Clone(env).(*macpv1.Envelope)
	out.Payload, _ = proto.MarshalOptions{Deterministic: true}.Marshal(&c)
	return out
}
