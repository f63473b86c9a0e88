package replay_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/decision"
	"github.com/macpd/macpd/internal/policy"
	"github.com/macpd/macpd/internal/replay"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/memstore"
	"google.golang.org/protobuf/proto"
)

const (
	sid    = "0f8fad5b-d9cb-469f-a165-70867728950e"
	baseMs = int64(1_770_000_000_000)
)

func modes() *mode.Registry {
	return mode.NewRegistry(mode.Entry{Mode: decision.New(), Kind: mode.Standard, BuiltIn: true})
}

func pb(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// history drives one decision session through the core as the runtime
// would, under profile, with every record kind the runtime writes for a
// decision session (start, messages, suspend, resume, commitment), and
// returns the live session and its records.
func history(t *testing.T, profile string) (*session.Session, []session.Record) {
	t.Helper()
	lim := session.DefaultLimits()
	lim.Profile = profile
	now := baseMs
	start := &macpv1.Envelope{
		MacpVersion: coord.ProtocolVersion, Mode: decision.ModeID, MessageType: coord.TypeSessionStart,
		MessageId: "m0", SessionId: sid, Sender: "coord", TimestampUnixMs: now,
		Payload: pb(t, &macpv1.SessionStartPayload{
			Intent: "choose", Participants: []string{"coord", "alice", "bob"}, ModeVersion: decision.New().Descriptor().ModeVersion,
			ConfigurationVersion: "cfg-1", TtlMs: 600_000,
		}),
	}
	s, rec, err := session.Start(start, now, session.Deps{Modes: modes(), Policies: policy.DefaultOnly{}, Limits: lim})
	if err != nil {
		t.Fatalf("SessionStart: %v", err)
	}
	recs := []session.Record{rec}
	add := func(out session.Outcome) {
		t.Helper()
		if out.Err != nil || len(out.Records) == 0 {
			t.Fatalf("refused: %v", out.Err)
		}
		recs = append(recs, out.Records...)
	}
	send := func(n int, sender, typ string, payload []byte) {
		now += 7
		add(s.Step(&macpv1.Envelope{MacpVersion: coord.ProtocolVersion, Mode: decision.ModeID, MessageType: typ,
			MessageId: fmt.Sprintf("m%d", n), SessionId: sid, Sender: sender, TimestampUnixMs: now, Payload: payload}, now, lim))
	}
	send(1, "coord", "Proposal", pb(t, &decisionv1.ProposalPayload{ProposalId: "p1", Option: "postgres"}))
	now += 7
	add(s.Suspend("coord", "lunch", "suspend-1", now))
	now += 1000
	add(s.Resume("coord", "back", "resume-1", now))
	send(2, "alice", "Vote", pb(t, &decisionv1.VotePayload{ProposalId: "p1", Vote: "APPROVE"}))
	send(3, "coord", coord.TypeCommitment, pb(t, &macpv1.CommitmentPayload{
		CommitmentId: "c1", Action: "decision.selected", AuthorityScope: "team", Reason: "ok",
		ModeVersion: s.Binding.ModeVersion, ConfigurationVersion: s.Binding.ConfigurationVersion,
		PolicyVersion: s.Binding.PolicyVersion, OutcomePositive: true,
	}))
	return s, recs
}

// same fails unless the replayed session equals the live one in what a
// client or a later decision can see.
func same(t *testing.T, live, got *session.Session) {
	t.Helper()
	switch {
	case got == nil:
		t.Fatal("no session")
	case !proto.Equal(live.Metadata(), got.Metadata()):
		t.Fatalf("metadata:\nlive     %v\nreplayed %v", live.Metadata(), got.Metadata())
	case live.Status != got.Status || live.Seq != got.Seq:
		t.Fatalf("status/seq: live %v/%d, replayed %v/%d", live.Status, live.Seq, got.Status, got.Seq)
	case !reflect.DeepEqual(live.SeenIDs(), got.SeenIDs()):
		t.Fatal("dedup sets differ")
	case live.Binding.Profile != got.Binding.Profile:
		t.Fatalf("profile: live %q, replayed %q", live.Binding.Profile, got.Binding.Profile)
	}
}

// A history folds back into the session that wrote it, control records
// included, under the profile its SessionStart record carries whatever
// the limits it is replayed under say (RFC-MACP-0003 §4).
func TestRecordsRebuildTheSession(t *testing.T) {
	for _, profile := range []string{coord.ProfileApril, coord.ProfileLatest} {
		live, recs := history(t, profile)
		other := session.DefaultLimits()
		other.Profile = coord.ProfileApril
		if profile == coord.ProfileApril {
			other.Profile = coord.ProfileLatest
		}
		got, err := replay.Records(recs, replay.Options{Modes: modes(), Limits: other})
		if err != nil {
			t.Fatalf("%s: %v", profile, err)
		}
		same(t, live, got)
	}
	if s, err := replay.Records(nil, replay.Options{Modes: modes()}); s != nil || err != nil {
		t.Fatalf("no records: %v, %v", s, err)
	}
}

// Stored reads the store and folds; Check sees every record once, in
// order, with the status before it and the session after it, and its
// error ends the fold as it is.
func TestStoredRunsCheckPerRecord(t *testing.T) {
	live, recs := history(t, coord.ProfileLatest)
	st := memstore.New()
	if err := st.Append(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	var steps []replay.Step
	check := func(s replay.Step) error { steps = append(steps, s); return nil }
	got, err := replay.Stored(context.Background(), st, sid, replay.Options{Modes: modes(), Limits: session.DefaultLimits(), Check: check})
	if err != nil {
		t.Fatal(err)
	}
	same(t, live, got)
	if len(steps) != len(recs) {
		t.Fatalf("%d checks for %d records", len(steps), len(recs))
	}
	for i, s := range steps {
		if s.N != uint64(i+1) || s.Record.Seq != recs[i].Seq || s.Session != got {
			t.Fatalf("step %d: %+v", i, s)
		}
	}
	if steps[0].Before != 0 || steps[2].Before != session.Open || steps[3].Before != session.Suspended ||
		steps[len(steps)-1].Before != session.Open || steps[len(steps)-1].Session.Status != session.Resolved {
		t.Fatalf("statuses before: %v %v %v %v", steps[0].Before, steps[2].Before, steps[3].Before, steps[len(steps)-1].Before)
	}

	stop := errors.New("stop here")
	n := 0
	_, err = replay.Stored(context.Background(), st, sid, replay.Options{Modes: modes(), Check: func(replay.Step) error {
		if n++; n == 2 {
			return stop
		}
		return nil
	}})
	if err != stop || n != 2 {
		t.Fatalf("Check's error: %v after %d records", err, n)
	}

	if _, err := replay.Stored(context.Background(), st, "7c9e6679-7425-40de-944b-e07fc1f90ae7", replay.Options{Modes: modes()}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
}

// A record the core refuses is an *Error naming its place, whose text is
// the core's and which unwraps to the core's *coord.Error; a history bound
// to a mode the lookup lacks fails at record 1.
func TestDivergenceIsAnError(t *testing.T) {
	_, recs := history(t, coord.ProfileLatest)
	forged := append([]session.Record(nil), recs...)
	vote := proto.Clone(forged[4].Envelope).(*macpv1.Envelope)
	vote.Sender = "mallory" // not a participant
	forged[4].Envelope = vote
	_, err := replay.Records(forged, replay.Options{Modes: modes(), Limits: session.DefaultLimits()})
	var re *replay.Error
	var ce *coord.Error
	if !errors.As(err, &re) || re.N != 5 || re.Seq != forged[4].Seq || !errors.As(err, &ce) || err.Error() != re.Err.Error() {
		t.Fatalf("forged vote: %v (%+v)", err, re)
	}
	_, err = replay.Records(recs, replay.Options{Modes: mode.NewRegistry()})
	if !errors.As(err, &re) || re.N != 1 {
		t.Fatalf("unknown mode: %v", err)
	}
}
