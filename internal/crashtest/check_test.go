package crashtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/bench/loadgen"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode/builtin"
	"github.com/macpd/macpd/internal/replay/verify"
	"github.com/macpd/macpd/internal/session"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/pebblestore"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// findings collects what the checks found.
type findings struct {
	problems []string
	// Sessions is the number of sessions a Send named; Present those that
	// exist.
	Sessions, Present int
	// Checked counts distinct acked (session, message) pairs checked
	// against history; Lost, Duplicated and OutOfOrder the acked ones that
	// are missing, appear more than once, or break ack order.
	Checked, Lost, Duplicated, OutOfOrder int
	// Phantom counts envelopes in history that were never sent, were
	// refused, or differ from what was sent; Gaps sessions whose envelope
	// count differs from their sequence number; BadState sessions whose
	// state disagrees with their history.
	Phantom, Gaps, BadState int
	// UnknownPresent and UnknownAbsent split the Sends that got no answer
	// by whether they made it into history (both are allowed).
	UnknownPresent, UnknownAbsent int
	Rejected                      int
	// Envelopes is the total number of envelopes read back.
	Envelopes int
}

func (f *findings) add(format string, args ...any) {
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
}

func (f *findings) ok() bool { return len(f.problems) == 0 }

// sessionView is one session as read back from the server.
type sessionView struct {
	meta *macpv1.SessionMetadata // nil: SESSION_NOT_FOUND
	hist []*macpv1.Envelope
	// seq is the macp-session-sequence header: the last sequence number.
	seq uint64
	err error
	// profile is the profile the session must be bound to ("": unknown).
	profile string
}

// readHistory reads a session's whole history with a StreamSession passive
// subscription from sequence 0, using the macp-session-sequence header to
// know when it has everything (an OPEN session's stream never ends).
func readHistory(ctx context.Context, cl macpv1.MACPRuntimeServiceClient, sid string) ([]*macpv1.Envelope, uint64, error) {
	ctx, cancel := context.WithTimeout(asIdentity(ctx, initiator), 30*time.Second)
	defer cancel()
	stream, err := cl.StreamSession(ctx)
	if err != nil {
		return nil, 0, err
	}
	if err := stream.Send(&macpv1.StreamSessionRequest{SubscribeSessionId: sid}); err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, err
	}
	hdr, err := stream.Header()
	if err != nil {
		return nil, 0, err
	}
	n, herr := headerUint(hdr, "macp-session-sequence")
	r, rerr := headerUint(hdr, "macp-resume-after")
	if herr != nil || rerr != nil {
		// A refused subscription: Recv has the status.
		_, err := stream.Recv()
		return nil, 0, fmt.Errorf("no sequence header (%v, %v): %v", herr, rerr, err)
	}
	if r != 0 {
		return nil, n, fmt.Errorf("macp-resume-after %d, want 0", r)
	}
	var envs []*macpv1.Envelope
	for {
		// Everything up to N is replayed from the store; an expired
		// session's last record (the expiry) has no envelope, but its
		// stream ends after the history.
		if uint64(len(envs)) >= n {
			return envs, n, nil
		}
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return envs, n, nil // a terminal session's stream ends after its history
		}
		if err != nil {
			return envs, n, err
		}
		if e := resp.GetError(); e != nil {
			return envs, n, fmt.Errorf("in-stream error %s: %s", e.GetCode(), e.GetMessage())
		}
		env := resp.GetEnvelope()
		if env == nil || env.GetSessionId() != sid {
			continue // heartbeats
		}
		envs = append(envs, env)
	}
}

func headerUint(md metadata.MD, key string) (uint64, error) {
	v := md.Get(key)
	if len(v) != 1 {
		return 0, fmt.Errorf("header %s: %q", key, v)
	}
	return strconv.ParseUint(v[0], 10, 64)
}

// readSessions reads every session a Send named: GetSession, then its
// history.
func readSessions(ctx context.Context, cl macpv1.MACPRuntimeServiceClient, ids []string) map[string]*sessionView {
	out := make(map[string]*sessionView, len(ids))
	var mu sync.Mutex
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, sid := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			v := &sessionView{}
			defer func() { mu.Lock(); out[sid] = v; mu.Unlock() }()
			gctx, cancel := context.WithTimeout(asIdentity(ctx, initiator), 10*time.Second)
			resp, err := cl.GetSession(gctx, &macpv1.GetSessionRequest{SessionId: sid})
			cancel()
			if err != nil {
				if macpCode(err) == "SESSION_NOT_FOUND" || status.Code(err) == codes.NotFound {
					return
				}
				v.err = fmt.Errorf("GetSession: %w", err)
				return
			}
			v.meta = resp.GetMetadata()
			v.hist, v.seq, err = readHistory(ctx, cl, sid)
			if err != nil {
				v.err = fmt.Errorf("history: %w", err)
			}
		}()
	}
	wg.Wait()
	return out
}

// listSessions returns the ids ListSessions shows the initiator.
func listSessions(ctx context.Context, cl macpv1.MACPRuntimeServiceClient) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(asIdentity(ctx, initiator), 30*time.Second)
	defer cancel()
	resp, err := cl.ListSessions(ctx, &macpv1.ListSessionsRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, m := range resp.GetSessions() {
		out[m.GetSessionId()] = true
	}
	return out, nil
}

// checkOnline checks what the running server serves against everything
// that was sent (tracker) and acked (the acked logs' entries).
//
// profileOf names the profile each macpd incarnation bound new sessions to
// (daemon.profileOf); nil: every session is April.
func checkOnline(ctx context.Context, cl macpv1.MACPRuntimeServiceClient, tr *tracker, entries []loadgen.Acked, profileOf func(int) string) (*findings, map[string]*sessionView) {
	f := &findings{}
	sends, order, attempted := tr.snapshot()
	ctrls := tr.controls()

	// The acked logs hold exactly the ok Acks the interceptor saw.
	logged := map[string]bool{}
	for _, a := range entries {
		rec := sends[a.MessageID]
		switch {
		case rec == nil:
			f.Phantom++
			f.add("acked log line %d: message %s of session %s was never sent", a.Line, a.MessageID, a.SessionID)
		case rec.out != acked || rec.sid != a.SessionID:
			f.Phantom++
			f.add("acked log line %d: message %s of session %s is logged as acked but its Send was %s %s in session %s", a.Line, a.MessageID, a.SessionID, rec.out, rec.code, rec.sid)
		}
		logged[a.MessageID] = true
	}
	for _, rec := range order {
		switch rec.out {
		case acked:
			if !logged[rec.mid] {
				f.add("%s %s of session %s was acked but is not in the acked log", rec.typ, rec.mid, rec.sid)
			}
			if rec.dup {
				f.add("%s %s of session %s was sent once but acked as a duplicate", rec.typ, rec.mid, rec.sid)
			}
		case pending:
			f.add("%s %s of session %s never returned", rec.typ, rec.mid, rec.sid)
		case rejected:
			f.Rejected++
		}
	}

	ids := make([]string, 0, len(attempted))
	for sid := range attempted {
		ids = append(ids, sid)
	}
	sort.Strings(ids)
	f.Sessions = len(ids)
	listed, err := listSessions(ctx, cl)
	if err != nil {
		f.add("ListSessions: %v", err)
	}
	for sid := range listed {
		if !attempted[sid] {
			f.Phantom++
			f.add("ListSessions shows session %s, which no Send named", sid)
		}
	}
	views := readSessions(ctx, cl, ids)

	recsBySession := map[string][]*sendRec{}
	for _, rec := range order {
		recsBySession[rec.sid] = append(recsBySession[rec.sid], rec)
	}
	entriesBySession := map[string][]loadgen.Acked{}
	for _, a := range entries {
		entriesBySession[a.SessionID] = append(entriesBySession[a.SessionID], a)
	}
	for _, sid := range ids {
		v := views[sid]
		v.profile = expectedProfile(recsBySession[sid], profileOf)
		checkSession(f, sid, v, recsBySession[sid], ctrls[sid], entriesBySession[sid], sends, listed != nil && listed[sid], listed != nil)
	}
	return f, views
}

// expectedProfile is the profile a session must be bound to: that of the
// incarnation that answered its SessionStart, when one incarnation both
// received and answered it; "" when that is not known (the SessionStart's
// answer straddled a restart).
func expectedProfile(recs []*sendRec, profileOf func(int) string) string {
	for _, rec := range recs {
		if rec.typ != sdk.TypeSessionStart || rec.out == rejected {
			continue
		}
		switch {
		case profileOf == nil:
			return coord.ProfileApril
		case rec.inc0 == rec.inc1 && rec.inc0 > 0:
			return profileOf(rec.inc0)
		}
	}
	return ""
}

// isControl reports whether env is a runtime-emitted control record
// (SessionCancel, SessionSuspend, SessionResume).
func isControl(env *macpv1.Envelope) bool {
	switch env.GetMessageType() {
	case coord.TypeSessionCancel, coord.TypeSessionSuspend, coord.TypeSessionResume:
		return env.GetSender() == coord.RuntimeSender
	}
	return false
}

// checkSession checks one session as read back.
func checkSession(f *findings, sid string, v *sessionView, recs []*sendRec, ctrls []*ctrlRec, entries []loadgen.Acked, sends map[string]*sendRec, isListed, haveList bool) {
	ackedIDs := map[string]bool{}
	for _, rec := range recs {
		if rec.out == acked {
			ackedIDs[rec.mid] = true
		}
	}
	ackedCtrl := map[string]*ctrlRec{}
	unknownCtrl := map[string]int{} // by record type
	for _, c := range ctrls {
		switch {
		case c.out == acked && c.mid != "":
			ackedCtrl[c.mid] = c
		case c.out == acked:
			f.add("session %s: %s acked (%s) without naming its record", sid, c.typ, c.state)
		case c.out == unknown:
			unknownCtrl[c.typ]++
		}
	}
	if v.err != nil {
		f.Checked += len(ackedIDs) + len(ackedCtrl)
		f.add("session %s: unreadable: %v", sid, v.err)
		return
	}
	if v.meta == nil {
		// The session does not exist: nothing of it may have been acked.
		var lost []string
		for _, rec := range recs {
			switch rec.out {
			case acked:
				f.Lost++
				lost = append(lost, fmt.Sprintf("%s %s acked at %s", rec.typ, rec.mid, rec.end.Format(tsFmt)))
			case unknown:
				f.UnknownAbsent++
			}
		}
		for _, c := range ackedCtrl {
			f.Lost++
			lost = append(lost, fmt.Sprintf("%s %s acked at %s", c.typ, c.mid, c.end.Format(tsFmt)))
		}
		if len(lost) > 0 {
			f.add("LOST: session %s does not exist, but %d of its envelopes were acked: %s", sid, len(lost), strings.Join(lost, ", "))
		}
		f.Checked += len(ackedIDs) + len(ackedCtrl)
		if isListed {
			f.add("session %s: ListSessions shows it, GetSession says SESSION_NOT_FOUND", sid)
		}
		return
	}
	f.Present++
	if haveList && !isListed {
		f.add("session %s: GetSession finds it, ListSessions does not show it", sid)
	}
	hist := v.hist
	f.Envelopes += len(hist)
	state := v.meta.GetState()

	// Sequence numbers: the envelopes delivered from 0 are 1..k; the
	// session's last sequence is k, or k+1 for a TTL expiry.
	want := v.seq
	if state == macpv1.SessionState_SESSION_STATE_EXPIRED && want > 0 &&
		(len(hist) == 0 || hist[len(hist)-1].GetMessageType() != coord.TypeSessionCancel) {
		want-- // a TTL expiry (an April cancellation has its envelope)
	}
	if uint64(len(hist)) != want {
		f.Gaps++
		f.add("session %s (%s): %d envelope(s) delivered for last sequence %d", sid, state, len(hist), v.seq)
	}
	if len(hist) == 0 {
		f.add("session %s exists (%s) with an empty history", sid, state)
	} else if hist[0].GetMessageType() != sdk.TypeSessionStart {
		f.add("session %s: history starts with %s %s, not SessionStart", sid, hist[0].GetMessageType(), hist[0].GetMessageId())
	}

	// Every envelope was sent, to this session, was not refused, and is
	// what was sent; no message id twice.
	pos := map[string]int{}
	count := map[string]int{}
	unmatched := map[string]int{} // runtime records no ok Ack named, by type
	for i, env := range hist {
		id := env.GetMessageId()
		count[id]++
		if count[id] == 1 {
			pos[id] = i
		} else if !ackedIDs[id] && ackedCtrl[id] == nil { // acked duplicates are counted below
			f.Duplicated++
			f.add("DUPLICATED: session %s: unacked message %s appears %d times (positions %d and %d)", sid, id, count[id], pos[id]+1, i+1)
		}
		if isControl(env) {
			// Written by the runtime for a control call: an acked one
			// names it; otherwise it must be the record of a call that got
			// no answer.
			if c := ackedCtrl[id]; c != nil {
				if c.typ != env.GetMessageType() {
					f.Phantom++
					f.add("ALTERED: session %s seq %d: %s %s was acked as a %s", sid, i+1, env.GetMessageType(), id, c.typ)
				}
			} else if count[id] == 1 {
				unmatched[env.GetMessageType()]++
			}
			continue
		}
		rec := sends[id]
		switch {
		case rec == nil:
			f.Phantom++
			f.add("PHANTOM: session %s seq %d: %s %s from %q was never sent", sid, i+1, env.GetMessageType(), id, env.GetSender())
			continue
		case rec.sid != sid:
			f.Phantom++
			f.add("PHANTOM: session %s seq %d: message %s was sent to session %s", sid, i+1, id, rec.sid)
			continue
		case rec.out == rejected:
			f.Phantom++
			f.add("PHANTOM: session %s seq %d: %s %s was refused (%s) but is in history", sid, i+1, rec.typ, id, rec.code)
		case rec.out == pending:
			f.add("session %s seq %d: %s %s is in history, its Send never returned", sid, i+1, rec.typ, id)
		}
		if env.GetMessageType() != rec.typ || env.GetSender() != rec.sender || !bytes.Equal(env.GetPayload(), rec.payload) || env.GetSessionId() != sid {
			f.Phantom++
			f.add("ALTERED: session %s seq %d: message %s is %s from %q (%d bytes), sent as %s from %q (%d bytes)",
				sid, i+1, id, env.GetMessageType(), env.GetSender(), len(env.GetPayload()), rec.typ, rec.sender, len(rec.payload))
		}
	}
	for _, rec := range recs {
		if rec.out == unknown {
			if count[rec.mid] > 0 {
				f.UnknownPresent++
			} else {
				f.UnknownAbsent++
			}
		}
	}
	for typ, n := range unmatched {
		f.UnknownPresent += min(n, unknownCtrl[typ])
		f.UnknownAbsent += max(unknownCtrl[typ]-n, 0)
		if n > unknownCtrl[typ] {
			f.Phantom += n - unknownCtrl[typ]
			f.add("PHANTOM: session %s: %d %s record(s) no call asked for (%d unanswered %s call(s))", sid, n, typ, unknownCtrl[typ], typ)
		}
	}
	for typ, n := range unknownCtrl {
		if unmatched[typ] == 0 {
			f.UnknownAbsent += n
		}
	}
	// Acked control calls: their record exactly once.
	for id, c := range ackedCtrl {
		f.Checked++
		switch count[id] {
		case 0:
			f.Lost++
			f.add("LOST: session %s: %s %s acked at %s (%s) is not in history", sid, c.typ, id, c.end.Format(tsFmt), c.state)
		case 1:
		default:
			f.Duplicated++
			f.add("DUPLICATED: session %s: %s %s appears %d times", sid, c.typ, id, count[id])
		}
	}

	// Acked: exactly once, in each sender stream's ack order.
	problems, n := loadgen.CheckHistory(sid, entries, hist)
	f.Checked += n
	for _, p := range problems {
		switch p.Kind {
		case loadgen.Missing:
			f.Lost++
			p.Kind = "LOST"
		case loadgen.Duplicated:
			f.Duplicated++
			p.Kind = "DUPLICATED"
		case loadgen.OutOfOrder:
			f.OutOfOrder++
			p.Kind = "OUT-OF-ORDER"
		}
		f.add("%s", p)
	}
	inLog := map[string]bool{}
	for _, a := range entries {
		inLog[a.MessageID] = true
	}
	for id := range ackedIDs {
		// Not logged (reported above), so CheckHistory did not see it.
		switch {
		case inLog[id]:
		case count[id] == 0:
			f.Lost++
			f.add("LOST: session %s: acked message %s is not in history", sid, id)
		case count[id] > 1:
			f.Duplicated++
			f.add("DUPLICATED: session %s: acked message %s appears %d times", sid, id, count[id])
		}
	}
	// Real time: a Send or control call acked before another one started
	// precedes it (a control call's record is named by its ok Ack only).
	ops := make([]*sendRec, 0, len(recs)+len(ctrls))
	ops = append(ops, recs...)
	for _, c := range ctrls {
		if c.out == acked && c.mid != "" {
			ops = append(ops, &sendRec{sid: c.sid, mid: c.mid, typ: c.typ, start: c.start, end: c.end, out: acked})
		}
	}
	var ackedRecs []*sendRec
	for _, rec := range ops {
		if rec.out == acked && count[rec.mid] > 0 {
			ackedRecs = append(ackedRecs, rec)
		}
	}
	for _, a := range ackedRecs {
		for _, b := range ops {
			if b == a || count[b.mid] == 0 || !a.end.Before(b.start) {
				continue
			}
			if pos[a.mid] > pos[b.mid] {
				f.OutOfOrder++
				f.add("OUT-OF-ORDER: session %s: %s %s acked at %s is at seq %d, after %s %s (%s) sent at %s at seq %d",
					sid, a.typ, a.mid, a.end.Format(tsFmt), pos[a.mid]+1, b.typ, b.mid, b.out, b.start.Format(tsFmt), pos[b.mid]+1)
			}
		}
	}

	// State: what the history implies. A Commitment resolves the session,
	// SessionSuspend suspends it, SessionResume reopens it, SessionCancel
	// ends it EXPIRED (2026-04) or CANCELLED (latest), by the profile the
	// session is bound to; the ending record is the last one; nothing here
	// expires by TTL.
	cancelled := macpv1.SessionState_SESSION_STATE_EXPIRED
	if v.profile == coord.ProfileLatest {
		cancelled = macpv1.SessionState_SESSION_STATE_CANCELLED
	}
	wantState := macpv1.SessionState_SESSION_STATE_OPEN
	ends, ended := 0, -1
	for i, env := range hist {
		switch env.GetMessageType() {
		case sdk.TypeCommitment:
			wantState = macpv1.SessionState_SESSION_STATE_RESOLVED
		case coord.TypeSessionSuspend:
			wantState = macpv1.SessionState_SESSION_STATE_SUSPENDED
		case coord.TypeSessionResume:
			wantState = macpv1.SessionState_SESSION_STATE_OPEN
		case coord.TypeSessionCancel:
			wantState = cancelled
			if v.profile == "" && (state == macpv1.SessionState_SESSION_STATE_EXPIRED || state == macpv1.SessionState_SESSION_STATE_CANCELLED) {
				wantState = state // the profile is not known: either is right
			}
		default:
			continue
		}
		if wantState != macpv1.SessionState_SESSION_STATE_OPEN && wantState != macpv1.SessionState_SESSION_STATE_SUSPENDED {
			ends++
			ended = i
		}
	}
	last := ""
	if len(hist) > 0 {
		last = hist[len(hist)-1].GetMessageType()
	}
	if state != wantState || ends > 1 || ends == 1 && ended != len(hist)-1 {
		f.BadState++
		f.add("session %s (profile %q): state %s, its history of %d (%d ending records) ending with %s says %s", sid, v.profile, state, len(hist), ends, last, wantState)
	}
	for _, rec := range recs {
		if rec.typ == sdk.TypeCommitment && rec.out == acked && state != macpv1.SessionState_SESSION_STATE_RESOLVED {
			f.BadState++
			f.add("session %s: Commitment %s acked but the session is %s", sid, rec.mid, state)
		}
	}
	// An acked control call answered with the state its record gives.
	for _, c := range ctrls {
		if c.out != acked {
			continue
		}
		want := map[string]macpv1.SessionState{
			coord.TypeSessionSuspend: macpv1.SessionState_SESSION_STATE_SUSPENDED,
			coord.TypeSessionResume:  macpv1.SessionState_SESSION_STATE_OPEN,
			coord.TypeSessionCancel:  cancelled,
		}[c.typ]
		if c.typ == coord.TypeSessionCancel && v.profile == "" && c.state == macpv1.SessionState_SESSION_STATE_CANCELLED {
			want = c.state
		}
		if c.state != want {
			f.BadState++
			f.add("session %s (profile %q): %s %s acked with state %s, want %s", sid, v.profile, c.typ, c.mid, c.state, want)
		}
	}
	if v.meta.GetSessionId() != sid || v.meta.GetInitiator() != initiator {
		f.BadState++
		f.add("session %s: GetSession answers for %q, initiator %q", sid, v.meta.GetSessionId(), v.meta.GetInitiator())
	}
}

const tsFmt = "15:04:05.000000"

// checkOffline opens the stopped macpd's data directory read-only and
// checks the store against what the server served: the same sessions,
// records numbered 1..N with a SessionStart first, the same envelopes in
// the same order, the chain intact (Read checks it), nothing quarantined.
// Then it runs what "macpctl verify --data-dir" runs (internal/replay/verify:
// chain check and full replay of every session against the stored status,
// final metadata and summary) and returns its counts.
func checkOffline(f *findings, dir string, views map[string]*sessionView) (verified, failed int) {
	st, err := pebblestore.Open(dir, pebblestore.Options{ReadOnly: true})
	if err != nil {
		f.add("offline: opening the store read-only: %v", err)
		return 0, 0
	}
	defer st.Close()
	ctx := context.Background()
	stored := map[string]bool{}
	err = st.List(ctx, func(info store.SessionInfo) error {
		sid := info.SessionID
		stored[sid] = true
		if info.Quarantined != "" {
			f.add("offline: session %s is quarantined: %s", sid, info.Quarantined)
			return nil
		}
		v := views[sid]
		if v == nil || v.meta == nil {
			f.Phantom++
			f.add("offline: session %s is stored but was not served", sid)
			return nil
		}
		var seq uint64
		var lastStatus session.Status
		rerr := st.Read(ctx, sid, 1, func(r session.Record) error {
			seq++
			if r.Seq != seq {
				return fmt.Errorf("record seq %d, want %d", r.Seq, seq)
			}
			if (r.Seq == 1) != (r.Kind == session.KindStart) {
				return fmt.Errorf("record %d is %s", r.Seq, r.Kind)
			}
			if r.Kind == session.KindStart {
				if p := coord.StoredProfile(r.Start.Profile); v.profile != "" && p != v.profile {
					f.BadState++
					f.add("offline: session %s is bound to profile %s; the macpd that started it serves %s", sid, p, v.profile)
				}
			}
			lastStatus = r.Status
			if r.Kind == session.KindExpire {
				return nil
			}
			i := int(r.Seq) - 1
			if i >= len(v.hist) || v.hist[i].GetMessageId() != r.Envelope.GetMessageId() {
				return fmt.Errorf("record %d is message %s, the server served %s", r.Seq, r.Envelope.GetMessageId(), msgAt(v.hist, i))
			}
			return nil
		})
		if rerr != nil {
			f.add("offline: session %s: %v", sid, rerr)
			return nil
		}
		if seq != info.LastSeq || seq != v.seq {
			f.Gaps++
			f.add("offline: session %s: %d records, summary says %d, the server said %d", sid, seq, info.LastSeq, v.seq)
		}
		if lastStatus.Proto() != v.meta.GetState() || info.Status != lastStatus {
			f.BadState++
			f.add("offline: session %s: last record %s, summary %s, the server said %s", sid, lastStatus, info.Status, v.meta.GetState())
		}
		return nil
	})
	if err != nil {
		f.add("offline: listing: %v", err)
	}
	for sid, v := range views {
		if v.meta != nil && !stored[sid] {
			f.Lost++
			f.add("offline: LOST: session %s was served but is not in the store", sid)
		}
	}
	// What recovery loads: ListOpen lists the OPEN and SUSPENDED sessions,
	// no terminal one.
	listedOpen := map[string]bool{}
	if err := st.ListOpen(ctx, func(info store.SessionInfo) error { listedOpen[info.SessionID] = true; return nil }); err != nil {
		f.add("offline: ListOpen: %v", err)
	}
	for sid, v := range views {
		if v.meta == nil {
			continue
		}
		st := v.meta.GetState()
		if open := st == macpv1.SessionState_SESSION_STATE_OPEN || st == macpv1.SessionState_SESSION_STATE_SUSPENDED; open != listedOpen[sid] {
			f.BadState++
			f.add("offline: session %s is %s; ListOpen lists it: %v", sid, st, listedOpen[sid])
		}
	}

	modes, err := verify.StoredModes(ctx, st, builtin.Modes())
	if err != nil {
		f.add("verify: stored modes: %v", err)
		return 0, 0
	}
	verified, failed, err = verify.Verify(ctx, st, modes, session.DefaultLimits(), func(r verify.SessionResult) {
		if !r.OK() {
			f.add("verify: session %s (%d records): %v", r.SessionID, r.Records, r.Err)
		}
	})
	if err != nil {
		f.add("verify: %v", err)
	}
	return verified, failed
}

func msgAt(h []*macpv1.Envelope, i int) string {
	if i < len(h) {
		return h[i].GetMessageId()
	}
	return "nothing"
}
