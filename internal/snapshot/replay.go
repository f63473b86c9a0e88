package snapshot

import (
	"fmt"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/replay"
	"github.com/macpd/macpd/internal/session"
)

// Replay folds a stored history (records 1..N of one session, in order)
// through the pure core with package replay's fold, as recovery and
// macpctl verify do (Restore, then Apply with the
// recorded times), and
// returns the replayed session. It fails when the history does not replay
// (divergence, or a bound mode this build lacks).
func Replay(recs []session.Record, modes session.Modes, lim session.Limits) (*session.Session, error) {
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: no records", ErrInput)
	}
	return replay.Records(recs, replay.Options{Modes: modes, Limits: lim})
}

// InputOf is the snapshot Input of a replayed session s and its records.
func InputOf(s *session.Session, recs []session.Record) Input {
	in := Input{
		SessionID:            s.ID,
		Mode:                 s.Binding.Mode,
		ModeVersion:          s.Binding.ModeVersion,
		ConfigurationVersion: s.Binding.ConfigurationVersion,
		PolicyVersion:        s.Binding.PolicyVersion,
		State:                s.Status.Proto(),
		Initiator:            s.Binding.Initiator,
		Participants:         s.Binding.Participants,
		Profile:              s.Binding.Profile,
		Envelopes:            make([]*macpv1.Envelope, 0, len(recs)),
	}
	for _, rec := range recs {
		if rec.Envelope != nil {
			in.Envelopes = append(in.Envelopes, rec.Envelope)
		}
	}
	return in
}

// InputFromRecords replays recs (Replay) and returns the Input.
func InputFromRecords(recs []session.Record, modes session.Modes, lim session.Limits) (Input, *session.Session, error) {
	s, err := Replay(recs, modes, lim)
	if err != nil {
		return Input{}, nil, err
	}
	return InputOf(s, recs), s, nil
}

// InputFromWire builds the Input from what a client can read: the
// session's metadata (GetSession) and its accepted envelopes from a
// passive StreamSession subscription from sequence 0, in order. The wire
// does not say which protocol profile a session is bound to; the Input's
// Profile is WireProfile(md, envs, serverProfile), serverProfile being
// the profile the runtime binds new sessions to (its manifest's
// "profile"; "" for 2026-04).
func InputFromWire(md *macpv1.SessionMetadata, envs []*macpv1.Envelope, serverProfile string) Input {
	return Input{
		Profile:              WireProfile(md, envs, serverProfile),
		SessionID:            md.GetSessionId(),
		Mode:                 md.GetMode(),
		ModeVersion:          md.GetModeVersion(),
		ConfigurationVersion: md.GetConfigurationVersion(),
		PolicyVersion:        md.GetPolicyVersion(),
		State:                md.GetState(),
		Initiator:            md.GetInitiator(),
		Participants:         md.GetParticipants(),
		Envelopes:            envs,
	}
}

// WireProfile is a session's protocol profile as far as a client can tell
// it: a session that ended CANCELLED is bound to 2026-09, one that ended
// EXPIRED by its SessionCancel to 2026-04 (the profiles' only visible
// difference in a history); any other is taken to be bound to
// serverProfile, the profile the runtime binds new sessions to. That is
// exact unless the runtime's MACP_PROFILE changed since the session
// started; it is the fallback for a runtime that does not name the
// recorded profile in GetSession's response header
// (coord.HeaderSessionProfile, snapshotio.FromRuntime). The stored
// history (offline, the runtime's own Service and files) always has the
// recorded profile.
func WireProfile(md *macpv1.SessionMetadata, envs []*macpv1.Envelope, serverProfile string) string {
	switch md.GetState() {
	case macpv1.SessionState_SESSION_STATE_CANCELLED:
		return coord.ProfileLatest
	case macpv1.SessionState_SESSION_STATE_EXPIRED:
		if len(envs) > 0 && envs[len(envs)-1].GetMessageType() == coord.TypeSessionCancel {
			return coord.ProfileApril
		}
	}
	if p, ok := coord.ResolveProfile(serverProfile); ok {
		return p
	}
	return serverProfile
}

// Rebind, Decision and WhatIf are package replay's what-if (Redecide).
type (
	Rebind   = replay.Rebind
	Decision = replay.Decision
	WhatIf   = replay.WhatIf
)

// ReplayWhatIf re-decides every stored envelope of recs under rb
// (replay.Redecide). A history that does not begin with a decodable
// SessionStart is ErrInput.
func ReplayWhatIf(recs []session.Record, modes session.Modes, lim session.Limits, rb Rebind) (*WhatIf, error) {
	w, err := replay.Redecide(recs, modes, lim, rb)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInput, err)
	}
	return w, nil
}
