package snapshot

import (
	"fmt"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
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
// passive StreamSession subscription from sequence 0, in order.
func InputFromWire(md *macpv1.SessionMetadata, envs []*macpv1.Envelope) Input {
	return Input{
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
