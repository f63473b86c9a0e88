package snapshot

import (
	"fmt"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"google.golang.org/protobuf/proto"
)

// InputFromHistory builds the Input from stored records without replaying
// them: the binding from the SessionStart record (its payload and the
// bound policy descriptor), the state from the last record. For a history
// that verifies (macpctl verify) it equals InputFromRecords; the running
// server uses it because its records were decided by this core already.
func InputFromHistory(recs []session.Record) (Input, error) {
	if len(recs) == 0 || recs[0].Kind != session.KindStart || recs[0].Envelope == nil || recs[0].Start == nil {
		return Input{}, fmt.Errorf("%w: history does not begin with a SessionStart record", ErrInput)
	}
	start := recs[0].Envelope
	var sp macpv1.SessionStartPayload
	if err := proto.Unmarshal(start.Payload, &sp); err != nil {
		return Input{}, fmt.Errorf("%w: SessionStart payload: %v", ErrInput, err)
	}
	in := Input{
		SessionID:            start.SessionId,
		Mode:                 start.Mode,
		ModeVersion:          sp.ModeVersion,
		ConfigurationVersion: sp.ConfigurationVersion,
		PolicyVersion:        recs[0].Start.Policy.ID,
		State:                lastStatus(recs).Proto(),
		Profile:              coord.StoredProfile(recs[0].Start.Profile),
		Initiator:            start.Sender,
		Participants:         sp.Participants,
		Envelopes:            make([]*macpv1.Envelope, 0, len(recs)),
	}
	for i, rec := range recs {
		if rec.Seq != uint64(i+1) {
			return Input{}, fmt.Errorf("%w: record %d has sequence number %d", ErrInput, i+1, rec.Seq)
		}
		if rec.Envelope != nil {
			in.Envelopes = append(in.Envelopes, rec.Envelope)
		}
	}
	return in, nil
}

// lastStatus is the session's state after its last record: the
// record's Status, or, for a record written without one, what its kind
// implies (an expiry ends the session EXPIRED, a cancel EXPIRED under
// profile 2026-04 and CANCELLED under 2026-09; a suspension leaves it
// SUSPENDED, a resume OPEN; an accepted Commitment always resolves it).
func lastStatus(recs []session.Record) session.Status {
	last := recs[len(recs)-1]
	if last.Status != 0 {
		return last.Status
	}
	switch {
	case last.Kind == session.KindCancel && coord.IsLatest(coord.StoredProfile(recs[0].Start.Profile)):
		return session.Cancelled
	case last.Kind == session.KindExpire || last.Kind == session.KindCancel:
		return session.Expired
	case last.Kind == session.KindSuspend:
		return session.Suspended
	case last.Kind == session.KindMessage && last.Envelope.GetMessageType() == coord.TypeCommitment:
		return session.Resolved
	}
	return session.Open
}
