package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"google.golang.org/protobuf/proto"
)

// Profiles and the suspension lifecycle (issue 25): a store keeps what the
// core records for sessions of both profiles — the start record's Profile
// ("" for records written before profiles existed, "2026-04", "2026-09")
// and MaxSuspendMs, SessionSuspend and SessionResume records (status
// SUSPENDED, then OPEN again), and cancellations ending EXPIRED (April) or
// CANCELLED (latest) — and treats SUSPENDED as not terminal (ListOpen lists
// it, Purge refuses it) and CANCELLED as terminal.

// profileStart is startRec bound to profile with a suspension cap.
func profileStart(id string, at int64, profile string, maxSuspendMs int64) session.Record {
	r := startRec(id, at)
	r.Start.Profile = profile
	r.Start.MaxSuspendMs = maxSuspendMs
	return r
}

func controlRec(id string, seq uint64, at int64, kind session.Kind, payload proto.Message, typ string, st session.Status) session.Record {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(payload)
	return session.Record{
		SessionID: id, Seq: seq, Kind: kind, AcceptedAtMs: at, Status: st,
		Envelope: &macpv1.Envelope{
			MacpVersion: "1.0", Mode: "macp.mode.decision.v1", MessageType: typ,
			MessageId: fmt.Sprintf("%s-%d", kind, seq), SessionId: id, Sender: coord.RuntimeSender, TimestampUnixMs: at, Payload: b,
		},
	}
}

// suspendRec is a runtime SessionSuspend record: the session is SUSPENDED.
func suspendRec(id string, seq uint64, at int64) session.Record {
	return controlRec(id, seq, at, session.KindSuspend,
		&macpv1.SessionSuspendPayload{Reason: "waiting for input ✓", SuspendedBy: "initiator"}, coord.TypeSessionSuspend, session.Suspended)
}

// resumeRec is a runtime SessionResume record with the banked TTL: the
// session is OPEN again.
func resumeRec(id string, seq uint64, at, banked int64) session.Record {
	return controlRec(id, seq, at, session.KindResume,
		&macpv1.SessionResumePayload{Reason: "input arrived", ResumedBy: "initiator", BankedMs: banked}, coord.TypeSessionResume, session.Open)
}

// cancelAs is cancelRec ending the session in st (EXPIRED under April,
// CANCELLED under latest).
func cancelAs(id string, seq uint64, at int64, st session.Status) session.Record {
	r := cancelRec(id, seq, at)
	r.Status = st
	r.Final = finalMD(id, st, at)
	return r
}

// Session ids of the profile histories, in id order.
const (
	pidAprilLegacy    = "p1-april-legacy-cancelled"
	pidAprilSuspended = "p2-april-suspended"
	pidAprilResumed   = "p3-april-resumed-resolved"
	pidLatestCancel   = "p4-latest-suspended-cancelled"
	pidLatestSusp     = "p5-latest-suspended"
	pidLatestCapped   = "p6-latest-suspension-capped"
	pidLatestResumed  = "p7-latest-resumed-open"
)

// profileHistories are sessions of both profiles in every lifecycle state
// the suspension and cancellation rules produce.
func profileHistories() map[string][]session.Record {
	at := int64(1_760_000_000_000)
	return map[string][]session.Record{
		// Written before profiles existed: Profile "" and no cap; an April
		// cancellation ends EXPIRED.
		pidAprilLegacy: {profileStart(pidAprilLegacy, at, "", 0), msgRec(pidAprilLegacy, 2, at+5), cancelAs(pidAprilLegacy, 3, at+9, session.Expired)},
		pidAprilSuspended: {profileStart(pidAprilSuspended, at, coord.ProfileApril, 3_600_000), msgRec(pidAprilSuspended, 2, at+5),
			suspendRec(pidAprilSuspended, 3, at+10)},
		pidAprilResumed: {profileStart(pidAprilResumed, at, coord.ProfileApril, 1), suspendRec(pidAprilResumed, 2, at+1),
			resumeRec(pidAprilResumed, 3, at+2, 59_996), msgRec(pidAprilResumed, 4, at+3), resolveRec(pidAprilResumed, 5, at+4)},
		pidLatestCancel: {profileStart(pidLatestCancel, at, coord.ProfileLatest, 86_400_000), suspendRec(pidLatestCancel, 2, at+1),
			cancelAs(pidLatestCancel, 3, at+2, session.Cancelled)},
		pidLatestSusp: {profileStart(pidLatestSusp, at, coord.ProfileLatest, 86_400_000), suspendRec(pidLatestSusp, 2, at+1),
			resumeRec(pidLatestSusp, 3, at+50, 59_996), suspendRec(pidLatestSusp, 4, at+60)},
		pidLatestCapped: {profileStart(pidLatestCapped, at, coord.ProfileLatest, 100), suspendRec(pidLatestCapped, 2, at+1),
			expireRec(pidLatestCapped, 3, at+102)},
		pidLatestResumed: {profileStart(pidLatestResumed, at, coord.ProfileLatest, 5_000), suspendRec(pidLatestResumed, 2, at+1),
			resumeRec(pidLatestResumed, 3, at+7, 59_996)},
	}
}

// The ids of profileHistories whose sessions are not terminal.
var profileOpen = []string{pidAprilSuspended, pidLatestSusp, pidLatestResumed}

// Every field of the profile histories survives the round trip, appended
// record by record (each suspend and resume changes the summary's status)
// and as one batch; Info's status follows SUSPENDED -> OPEN -> SUSPENDED
// and ends CANCELLED or EXPIRED per profile.
func (h *harness) profilesRoundTrip(t *testing.T) {
	s := h.fresh(t).s
	hs := profileHistories()
	for _, id := range slices.Sorted(maps.Keys(hs)) {
		want := hs[id]
		if id == pidLatestSusp || id == pidAprilResumed {
			mustAppend(t, s, want) // one batch
			wantHistory(t, s, want)
			continue
		}
		for i := range want {
			mustAppend(t, s, want[i:i+1])
			got := readAll(t, s, id, 1)
			wantInfo(t, s, got[len(got)-1])
			info, _ := s.Info(ctx, id)
			if info.Status != want[i].Status {
				t.Fatalf("%s after record %d (%s): Info status %s, want %s", id, i+1, want[i].Kind, info.Status, want[i].Status)
			}
		}
		wantHistory(t, s, want)
	}
	got := readAll(t, s, pidLatestCancel, 1)
	if got[0].Start.Profile != coord.ProfileLatest || got[0].Start.MaxSuspendMs != 86_400_000 ||
		got[2].Status != session.Cancelled || got[2].Final.State != macpv1.SessionState_SESSION_STATE_CANCELLED {
		t.Fatalf("latest cancelled session read back as %+v / %v / %v", got[0].Start, got[2].Status, got[2].Final.GetState())
	}
	if got := readAll(t, s, pidAprilLegacy, 1); got[0].Start.Profile != "" || got[2].Status != session.Expired {
		t.Fatalf("legacy April session read back with profile %q, status %s", got[0].Start.Profile, got[2].Status)
	}
	for id, st := range map[string]session.Status{
		pidAprilLegacy: session.Expired, pidAprilSuspended: session.Suspended, pidAprilResumed: session.Resolved,
		pidLatestCancel: session.Cancelled, pidLatestSusp: session.Suspended, pidLatestCapped: session.Expired, pidLatestResumed: session.Open,
	} {
		if info, err := s.Info(ctx, id); err != nil || info.Status != st || (info.Final != nil) != st.Terminal() {
			t.Fatalf("Info(%s) = %s (final %v), %v; want %s", id, info.Status, info.Final != nil, err, st)
		}
	}
	wantListOpen(t, s, profileOpen...)
}

// ListOpen lists SUSPENDED sessions (they are not terminal) and leaves
// CANCELLED ones out; a suspended session that resumes stays listed, one
// that is cancelled or expires by its cap leaves; Purge refuses a
// SUSPENDED session (ErrNotTerminal, history kept) and takes a CANCELLED
// one; with WithReopen, the same after a reopen, and the suspended
// sessions' histories continue across it.
func (h *harness) profilesOpenSet(t *testing.T) {
	hd := h.fresh(t)
	hs := profileHistories()
	for _, id := range slices.Sorted(maps.Keys(hs)) {
		mustAppend(t, hd.s, hs[id][:1])
		mustAppend(t, hd.s, hs[id][1:])
	}
	wantListOpen(t, hd.s, profileOpen...)

	for _, id := range []string{pidAprilSuspended, pidLatestSusp} {
		if err := hd.s.Purge(ctx, id); !errors.Is(err, store.ErrNotTerminal) {
			t.Fatalf("Purge(SUSPENDED %s) = %v, want ErrNotTerminal", id, err)
		}
		wantHistory(t, hd.s, hs[id])
	}
	if err := hd.s.Purge(ctx, pidLatestResumed); !errors.Is(err, store.ErrNotTerminal) {
		t.Fatalf("Purge(resumed OPEN session) = %v, want ErrNotTerminal", err)
	}
	if err := hd.s.Purge(ctx, pidLatestCancel); err != nil {
		t.Fatalf("Purge(CANCELLED): %v", err)
	}
	lastSeqNotFound(t, hd.s, pidLatestCancel)
	wantListOpen(t, hd.s, profileOpen...)

	if h.cfg.reopen != nil {
		h.reopen(t, hd)
		wantListOpen(t, hd.s, profileOpen...)
		for _, id := range slices.Sorted(maps.Keys(hs)) {
			if id != pidLatestCancel {
				wantHistory(t, hd.s, hs[id])
			}
		}
	}

	// One batch: the April suspended session resumes (stays listed), the
	// latest suspended one is cancelled (CANCELLED: leaves), the resumed
	// one is suspended again (stays).
	at := int64(1_760_000_001_000)
	aprilMore := []session.Record{resumeRec(pidAprilSuspended, 4, at, 59_995)}
	latestMore := []session.Record{cancelAs(pidLatestSusp, 5, at+1, session.Cancelled)}
	resumedMore := []session.Record{suspendRec(pidLatestResumed, 4, at+2)}
	mustAppend(t, hd.s, slices.Concat(aprilMore, latestMore, resumedMore))
	wantListOpen(t, hd.s, pidAprilSuspended, pidLatestResumed)
	if info, _ := hd.s.Info(ctx, pidLatestResumed); info.Status != session.Suspended {
		t.Fatalf("re-suspended session: Info status %s", info.Status)
	}
	if err := hd.s.Purge(ctx, pidLatestResumed); !errors.Is(err, store.ErrNotTerminal) {
		t.Fatalf("Purge(re-suspended) = %v, want ErrNotTerminal", err)
	}
	// The re-suspended session exceeds its cap: EXPIRED, leaves.
	mustAppend(t, hd.s, []session.Record{expireRec(pidLatestResumed, 5, at+6_000)})
	wantListOpen(t, hd.s, pidAprilSuspended)
	if err := hd.s.Purge(ctx, pidLatestSusp); err != nil {
		t.Fatalf("Purge(cancelled after suspension): %v", err)
	}
	if h.cfg.reopen != nil {
		h.reopen(t, hd)
	}
	wantListOpen(t, hd.s, pidAprilSuspended)
	wantHistory(t, hd.s, slices.Concat(hs[pidAprilSuspended], aprilMore))
	wantHistory(t, hd.s, slices.Concat(hs[pidLatestResumed], resumedMore, []session.Record{expireRec(pidLatestResumed, 5, at+6_000)}))
	lastSeqNotFound(t, hd.s, pidLatestSusp)
	var ids []string
	for _, info := range list(t, hd.s) {
		ids = append(ids, info.SessionID)
	}
	if want := []string{pidAprilLegacy, pidAprilSuspended, pidAprilResumed, pidLatestCapped, pidLatestResumed}; !slices.Equal(ids, want) {
		t.Fatalf("List = %v, want %v", ids, want)
	}
}
