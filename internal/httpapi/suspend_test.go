package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/cmthash"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/httpapi"
	"google.golang.org/protobuf/encoding/protojson"
)

// Issue 31 on the HTTP binding: suspend/resume routes beside cancel, the
// states SUSPENDED and CANCELLED, ListSessions pages, the commitment hash
// and the protocol-mode notifications of suspend, resume and cancel.

// startProfile starts macpd binding new sessions to profile.
func startProfile(t *testing.T, profile string) *env {
	t.Helper()
	cfg := testConfig()
	cfg.Profile = profile
	return startApp(t, cfg)
}

// state reads the session's state over HTTP as agent.
func (e *env) state(t testing.TB, agent, sid string) string {
	t.Helper()
	code, b := e.do(t, "GET", "/macp/session/"+sid, agent, "", nil)
	if code != 200 {
		t.Fatalf("GET session: %d %s", code, b)
	}
	md := &macpv1.SessionMetadata{}
	if err := protojson.Unmarshal(b, md); err != nil {
		t.Fatalf("metadata %s: %v", b, err)
	}
	return md.State.String()
}

// control posts to /macp/session/{sid}/{op} and returns status and the
// MACP code ("" when 200) or the Ack's session_state.
func (e *env) control(t testing.TB, agent, sid, op string) (int, string) {
	t.Helper()
	code, b := e.do(t, "POST", "/macp/session/"+sid+"/"+op, agent, "application/json", []byte(`{"reason":"test"}`))
	if code != 200 {
		return code, macpError(t, b).Code
	}
	ack := &macpv1.Ack{}
	if err := protojson.Unmarshal(b, ack); err != nil || !ack.Ok {
		t.Fatalf("%s ack %s (%v)", op, b, err)
	}
	return code, ack.SessionState.String()
}

func TestHTTPSuspendResumeCancel(t *testing.T) {
	for _, tc := range []struct{ profile, cancelled string }{
		{coord.ProfileApril, "SESSION_STATE_EXPIRED"},
		{"latest", "SESSION_STATE_CANCELLED"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			e := startProfile(t, tc.profile)
			sid := e.startSession(t, "coord", "alice")
			type step struct {
				agent, sid, op string
				code           int
				want           string
			}
			for _, s := range []step{
				{"alice", sid, "suspend", 403, "FORBIDDEN"},
				{"coord", uuid.NewString(), "suspend", 404, "SESSION_NOT_FOUND"},
				{"coord", sid, "resume", 409, "SESSION_NOT_OPEN"},
				{"coord", sid, "suspend", 200, "SESSION_STATE_SUSPENDED"},
				{"coord", sid, "suspend", 409, "SESSION_NOT_OPEN"},
				{"alice", sid, "resume", 403, "FORBIDDEN"},
				{"coord", sid, "resume", 200, "SESSION_STATE_OPEN"},
				{"coord", sid, "suspend", 200, "SESSION_STATE_SUSPENDED"},
			} {
				if code, got := e.control(t, s.agent, s.sid, s.op); code != s.code || got != s.want {
					t.Fatalf("%s %s by %s: %d %s, want %d %s", s.op, s.sid, s.agent, code, got, s.code, s.want)
				}
			}
			if st := e.state(t, "alice", sid); st != "SESSION_STATE_SUSPENDED" {
				t.Fatalf("state %s", st)
			}
			// Session messages are refused while SUSPENDED (409).
			if code, b := e.post(t, "coord", proposalJSON(sid, uuid.NewString(), "p")); code != 409 || macpError(t, b).Code != "SESSION_NOT_OPEN" {
				t.Fatalf("proposal while suspended: %d %s", code, b)
			}
			// An SSE reader of a SUSPENDED session with nothing left is
			// not told 204 (that would stop EventSource): it waits.
			last, _ := e.a.Runtime().LastSeq(sid)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/macp/session/"+sid+"/events", nil)
			req.Header.Set("Authorization", "Bearer alice")
			req.Header.Set("Last-Event-ID", fmt.Sprint(last))
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("SSE of a suspended session: %v %v", resp, err)
			}
			resp.Body.Close()
			cancel()
			// Cancel from SUSPENDED: EXPIRED under 2026-04, CANCELLED under latest.
			if code, got := e.control(t, "coord", sid, "cancel"); code != 200 || got != tc.cancelled {
				t.Fatalf("cancel: %d %s, want %s", code, got, tc.cancelled)
			}
			if st := e.state(t, "alice", sid); st != tc.cancelled {
				t.Fatalf("state after cancel %s", st)
			}
			if code, got := e.control(t, "coord", sid, "resume"); code != 409 || got != "SESSION_NOT_OPEN" {
				t.Fatalf("resume after cancel: %d %s", code, got)
			}
			// The resolution route names the bound profile.
			res := e.resolution(t, "alice", sid)
			if want, _ := coord.ResolveProfile(tc.profile); res.Profile != want || res.State != tc.cancelled || res.CommitmentHash != "" {
				t.Fatalf("resolution %+v", res)
			}
			// Bad bodies change nothing.
			other := e.startSession(t, "coord", "alice")
			for _, body := range []string{`{"reasn":"x"}`, `[]`, `{"reason":"x"}{}`} {
				if code, b := e.do(t, "POST", "/macp/session/"+other+"/suspend", "coord", "application/json", []byte(body)); code != 400 {
					t.Fatalf("suspend body %s: %d %s", body, code, b)
				}
			}
			if code, _ := e.do(t, "POST", "/macp/session/"+other+"/suspend", "", "application/json", []byte(`{}`)); code != 401 {
				t.Fatalf("suspend without credentials: %d", code)
			}
			if st := e.state(t, "coord", other); st != "SESSION_STATE_OPEN" {
				t.Fatalf("refused suspends changed the session: %s", st)
			}
		})
	}
}

func (e *env) resolution(t testing.TB, agent, sid string) httpapi.Resolution {
	t.Helper()
	code, b := e.do(t, "GET", "/macp/session/"+sid+"/resolution", agent, "", nil)
	if code != 200 {
		t.Fatalf("resolution: %d %s", code, b)
	}
	var r httpapi.Resolution
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("resolution %s: %v", b, err)
	}
	return r
}

// TestHTTPCommitmentHash: the resolution route gives a RESOLVED session's
// commitment hash (RFC-MACP-0013, internal/cmthash) and a ready supersedes
// reference, which a Commitment of a later session accepts under latest.
func TestHTTPCommitmentHash(t *testing.T) {
	e := startProfile(t, "latest")
	r, err := e.c.RegisterPolicy(as("admin"), &macpv1.RegisterPolicyRequest{PolicyDescriptor: &macpv1.PolicyDescriptor{
		PolicyId: "policy.t.any", Mode: decisionMode, Description: "t", SchemaVersion: 1,
		Rules: `{"voting":{"algorithm":"majority"},"commitment":{"authority":"any_participant"}}`}})
	if err != nil || !r.Ok {
		t.Fatalf("RegisterPolicy %v %v", r, err)
	}
	resolve := func(supersedes string) string {
		sid := uuid.NewString()
		e.mustAck(t, "/macp/session/start", "coord", strings.Replace(startJSON(sid, "coord", "alice"), `"ttl_ms":600000`, `"ttl_ms":600000,"policy_version":"policy.t.any"`, 1))
		e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, uuid.NewString(), "p1"))
		e.mustAck(t, "/macp/envelope", "alice", fmt.Sprintf(`{"macp_version":"1.0","mode":%q,"message_type":"Vote","message_id":%q,"session_id":%q,"payload":{"proposal_id":"p1","vote":"APPROVE"}}`, decisionMode, uuid.NewString(), sid))
		extra := ""
		if supersedes != "" {
			extra = `,"supersedes":` + supersedes
		}
		e.mustAck(t, "/macp/envelope", "coord", fmt.Sprintf(`{"macp_version":"1.0","mode":%q,"message_type":"Commitment","message_id":%q,"session_id":%q,"payload":{"commitment_id":"c-%s","action":"decision.selected","authority_scope":"s","reason":"r","mode_version":"1.0.0","configuration_version":"cfg-1","policy_version":"policy.t.any","outcome_positive":true%s}}`, decisionMode, uuid.NewString(), sid, sid[:8], extra))
		return sid
	}
	first := resolve("")
	res := e.resolution(t, "alice", first)
	var payload macpv1.CommitmentPayload
	if err := protojson.Unmarshal(res.Commitment, &payload); err != nil {
		t.Fatalf("commitment %s: %v", res.Commitment, err)
	}
	want, err := cmthash.Hash(&payload)
	if err != nil || res.CommitmentHash != want || !cmthash.WellFormedHash(want) || res.State != "SESSION_STATE_RESOLVED" || res.Profile != coord.ProfileLatest {
		t.Fatalf("resolution %+v, hash %s %v", res, want, err)
	}
	last, _ := e.a.Runtime().LastSeq(first)
	if res.CommitmentSequence != last || res.SupersedesRef == nil || res.SupersedesRef.SessionID != first || res.SupersedesRef.CommitmentHash != want {
		t.Fatalf("resolution %+v (last seq %d)", res, last)
	}
	ref, _ := json.Marshal(res.SupersedesRef)
	second := resolve(string(ref))
	if r2 := e.resolution(t, "coord", second); !bytes.Contains(r2.Commitment, []byte(want)) {
		t.Fatalf("superseding commitment %s", r2.Commitment)
	}
	// The readable feeds' Commitment carries it: SSE ?payload=json and
	// macp/subscribe "payload": "json".
	if code, b := e.do(t, "GET", "/macp/session/"+first+"/events?payload=json", "alice", "", nil); code != 200 || !bytes.Contains(b, []byte(`"commitment_hash":"`+want+`"`)) {
		t.Fatalf("SSE view: %d %s", code, b)
	}
	ws := e.dialWS(t, "alice")
	if err := wsCall(ws, 1, "macp/subscribe", map[string]any{"sessionId": first, "afterSequence": last - 1, "payload": "json"}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := wsRead(ws)
		if err != nil {
			t.Fatal(err)
		}
		if m.Method == "notifications/macp/envelope" {
			if !bytes.Contains(m.Params, []byte(`"commitment_hash":"`+want+`"`)) {
				t.Fatalf("macp/subscribe view: %s", m.Params)
			}
			break
		}
	}
	_ = ws.CloseNow()
	// session/get carries the profile and the hash too.
	p := e.pdial(t, "alice")
	g := p.call("session/get", map[string]any{"sessionId": first})
	var gr struct {
		Profile        string `json:"profile"`
		CommitmentHash string `json:"commitmentHash"`
	}
	if g.Error != nil || json.Unmarshal(g.Result, &gr) != nil || gr.Profile != coord.ProfileLatest || gr.CommitmentHash != want {
		t.Fatalf("session/get %s %+v", g.Result, g.Error)
	}
	// An outsider may not read it.
	if code, _ := e.do(t, "GET", "/macp/session/"+first+"/resolution", "mallory", "", nil); code != 403 {
		t.Fatalf("outsider resolution: %d", code)
	}
	if code, _ := e.do(t, "GET", "/macp/session/"+uuid.NewString()+"/resolution", "coord", "", nil); code != 404 {
		t.Fatalf("unknown resolution: %d", code)
	}
}

// TestHTTPListSessionsPages: GET /macp/sessions?page_size=&page_token=
// walks the same list as one unpaged answer, without repeats or gaps.
func TestHTTPListSessionsPages(t *testing.T) {
	e := startApp(t, testConfig())
	for range 7 {
		e.startSession(t, "coord", "alice")
	}
	list := func(q string) (*macpv1.ListSessionsResponse, int, []byte) {
		code, b := e.do(t, "GET", "/macp/sessions"+q, "alice", "", nil)
		r := &macpv1.ListSessionsResponse{}
		if code == 200 {
			if err := protojson.Unmarshal(b, r); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
		}
		return r, code, b
	}
	all, _, b := list("")
	if len(all.Sessions) != 7 || all.NextPageToken != "" || !bytes.Contains(b, []byte(`"next_page_token":""`)) {
		t.Fatalf("unpaged: %s", b)
	}
	var walked []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 7 {
			t.Fatal("the walk does not end")
		}
		r, code, b := list("?page_size=3&page_token=" + token)
		if code != 200 || len(r.Sessions) > 3 {
			t.Fatalf("page: %d %s", code, b)
		}
		for _, s := range r.Sessions {
			walked = append(walked, s.SessionId)
		}
		if token = r.NextPageToken; token == "" {
			break
		}
	}
	if len(walked) != 7 {
		t.Fatalf("walked %v", walked)
	}
	for i, s := range all.Sessions {
		if walked[i] != s.SessionId {
			t.Fatalf("page order %v, unpaged %v", walked, all.Sessions)
		}
	}
	for _, q := range []string{"?page_size=-1", "?page_size=x", "?page_token=bogus", "?page_size=1&page_size=2"} {
		if _, code, b := list(q); code != 400 || macpError(t, b).Code != "INVALID_ENVELOPE" {
			t.Fatalf("%s: %d %s", q, code, b)
		}
	}
}

// TestLifecycleFeedSuspendResume: the lifecycle feed reports SUSPENDED,
// RESUMED and, under latest, CANCELLED; the sync lists a SUSPENDED session.
func TestLifecycleFeedSuspendResume(t *testing.T) {
	e := startProfile(t, "latest")
	sid := e.startSession(t, "alice")
	br := openLifecycle(t, e, "alice")
	if typ, got, _ := readLifecycle(t, br); typ != "EVENT_TYPE_CREATED" || got != sid {
		t.Fatalf("sync %s %s", typ, got)
	}
	for _, s := range []struct{ op, typ, state string }{
		{"suspend", "EVENT_TYPE_SUSPENDED", "SESSION_STATE_SUSPENDED"},
		{"resume", "EVENT_TYPE_RESUMED", "SESSION_STATE_OPEN"},
		{"suspend", "EVENT_TYPE_SUSPENDED", "SESSION_STATE_SUSPENDED"},
	} {
		if code, _ := e.control(t, "coord", sid, s.op); code != 200 {
			t.Fatalf("%s: %d", s.op, code)
		}
		if typ, got, st := readLifecycle(t, br); typ != s.typ || got != sid || st != s.state {
			t.Fatalf("after %s: %s %s %s", s.op, typ, got, st)
		}
	}
	// A new watcher's sync lists the SUSPENDED session.
	br2 := openLifecycle(t, e, "alice")
	if typ, got, st := readLifecycle(t, br2); typ != "EVENT_TYPE_CREATED" || got != sid || st != "SESSION_STATE_SUSPENDED" {
		t.Fatalf("sync of a suspended session: %s %s %s", typ, got, st)
	}
	if code, _ := e.control(t, "coord", sid, "cancel"); code != 200 {
		t.Fatal("cancel")
	}
	if typ, got, st := readLifecycle(t, br); typ != "EVENT_TYPE_CANCELLED" || got != sid || st != "SESSION_STATE_CANCELLED" {
		t.Fatalf("after cancel: %s %s %s", typ, got, st)
	}
}

// TestProtocolSuspendResumeCancel: the JSON-RPC control methods on
// WebSocket and HTTP, and what a protocol-mode attachment receives: the
// runtime's SessionSuspend / SessionResume / SessionCancel as envelope N,
// each followed by the state N.5 (SUSPENDED, OPEN, CANCELLED or EXPIRED),
// ids strictly increasing; a SUSPENDED session can be resumed
// (session/resume) and session/end by its initiator cancels it.
func TestProtocolSuspendResumeCancel(t *testing.T) {
	for _, tc := range []struct{ profile, cancelled string }{
		{coord.ProfileApril, "SESSION_STATE_EXPIRED"},
		{"latest", "SESSION_STATE_CANCELLED"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			e := startProfile(t, tc.profile)
			sid := e.startSession(t, "coord", "alice")
			watch := e.pdial(t, "alice")
			watch.resume(sid, 0)
			if seq, _ := watch.nextEnvelope(sid); seq != 1 {
				t.Fatalf("first envelope %d", seq)
			}
			// expect reads envelope seq of type typ, then its state seq.5.
			expect := func(seq uint64, typ, state string) {
				t.Helper()
				for {
					m := watch.notif()
					n := params(t, m)
					if m.Method == "notifications/macp/session" && n.SessionEventID < float64(seq) {
						continue // the state after an earlier record
					}
					if m.Method != "notifications/macp/envelope" || n.SessionEventID != float64(seq) {
						t.Fatalf("want envelope %d, got %s %s", seq, m.Method, m.Params)
					}
					env := &macpv1.Envelope{}
					if err := protojson.Unmarshal(n.Envelope, env); err != nil || env.MessageType != typ || env.Sender != "_runtime" {
						t.Fatalf("envelope %d: %s (%v)", seq, n.Envelope, err)
					}
					break
				}
				m := watch.notif()
				n := params(t, m)
				md := &macpv1.SessionMetadata{}
				if m.Method != "notifications/macp/session" || n.SessionEventID != float64(seq)+0.5 || protojson.Unmarshal(n.Metadata, md) != nil || md.State.String() != state {
					t.Fatalf("want state %v.5 %s, got %s %s", seq, state, m.Method, m.Params)
				}
			}
			ws := e.pdial(t, "coord")
			ctl := func(method, who string) (*rpcMsg, *macpv1.Ack) {
				t.Helper()
				var m *rpcMsg
				if who == "http" {
					_, m = e.hdial(t, "coord").call(method, map[string]any{"sessionId": sid, "reason": "t"})
				} else {
					m = ws.call(method, map[string]any{"sessionId": sid, "reason": "t"})
				}
				if m.Error != nil {
					return m, nil
				}
				ack := &macpv1.Ack{}
				if err := protojson.Unmarshal(m.Result, ack); err != nil || !ack.Ok {
					t.Fatalf("%s: %s (%v)", method, m.Result, err)
				}
				return m, ack
			}
			if _, ack := ctl("macp/suspendSession", "ws"); ack.SessionState != macpv1.SessionState_SESSION_STATE_SUSPENDED {
				t.Fatalf("suspend ack %v", ack)
			}
			expect(2, "SessionSuspend", "SESSION_STATE_SUSPENDED")
			if m, _ := ctl("macp/suspendSession", "ws"); true {
				if code, mc := rpcCode(t, m); code != -32000 || mc != "SESSION_NOT_OPEN" {
					t.Fatalf("second suspend: %d %s", code, mc)
				}
			}
			if m := e.pdial(t, "alice").call("macp/resumeSession", map[string]any{"sessionId": sid}); true {
				if code, mc := rpcCode(t, m); code != -32000 || mc != "FORBIDDEN" {
					t.Fatalf("resume by a participant: %d %s", code, mc)
				}
			}
			// A SUSPENDED session is live: session/resume attaches to it
			// and its state arrives after the catch-up.
			late := e.pdial(t, "bob")
			if m := late.call("session/resume", map[string]any{"sessionId": sid}); m.Error == nil || !strings.Contains(m.Error.Message, "FORBIDDEN") {
				t.Fatalf("outsider resume: %s %+v", m.Result, m.Error)
			}
			if _, ack := ctl("macp/resumeSession", "http"); ack.SessionState != macpv1.SessionState_SESSION_STATE_OPEN {
				t.Fatalf("resume ack %v", ack)
			}
			expect(3, "SessionResume", "SESSION_STATE_OPEN")
			ctl("macp/suspendSession", "http")
			expect(4, "SessionSuspend", "SESSION_STATE_SUSPENDED")
			again := e.pdial(t, "alice") // supersedes watch: alice's only attachment now
			if r := again.resume(sid, 2); !r.Catchup || r.SessionEventID != 2 {
				t.Fatalf("resume of a suspended session: %+v", r)
			}
			for _, want := range []uint64{3, 4} {
				if seq, _ := again.nextEnvelope(sid); seq != want {
					t.Fatalf("catch-up %d, want %d", seq, want)
				}
			}
			m := again.notif()
			if n := params(t, m); m.Method != "notifications/macp/session" || n.SessionEventID != 4.5 || !bytes.Contains(n.Metadata, []byte("SESSION_STATE_SUSPENDED")) {
				t.Fatalf("state after catch-up: %s %s", m.Method, m.Params)
			}
			if m := watch.notif(); m.Method != "notifications/macp/detached" {
				t.Fatalf("superseded attachment: %s", m.Method)
			}
			watch = again
			// session/end by the initiator cancels a SUSPENDED session.
			if m := ws.call("session/end", map[string]any{"sessionId": sid}); m.Error != nil || !bytes.Contains(m.Result, []byte(`"cancelled":true`)) {
				t.Fatalf("session/end: %s %+v", m.Result, m.Error)
			}
			expect(5, "SessionCancel", tc.cancelled)
			if m := watch.notif(); m.Method != "notifications/macp/end" {
				t.Fatalf("after cancel: %s %s", m.Method, m.Params)
			}
			watch.ids.increasing(t, "suspend/resume/cancel", sid, 0)
			// An ended (CANCELLED or EXPIRED) session cannot be resumed.
			m = e.pdial(t, "alice").call("session/resume", map[string]any{"sessionId": sid, "lastSessionEventId": 5})
			var me macpv1.MACPError
			var d struct {
				SessionEventID uint64 `json:"sessionEventId"`
				State          string `json:"state"`
			}
			if code, mc := rpcCode(t, m); code != -32000 || mc != "SESSION_NOT_OPEN" || protojson.Unmarshal(m.Error.Data, &me) != nil || json.Unmarshal(me.Details, &d) != nil || d.SessionEventID != 5 || d.State != tc.cancelled {
				t.Fatalf("resume of an ended session: %+v", m.Error)
			}
			// macp/cancelSession of the ended session answers its state.
			if _, ack := ctl("macp/cancelSession", "ws"); ack == nil || ack.SessionState.String() != tc.cancelled {
				t.Fatalf("cancel of an ended session: %v", ack)
			}
			// A fresh session cancelled with macp/cancelSession.
			sid = e.startSession(t, "coord", "alice")
			if _, ack := ctl("macp/cancelSession", "http"); ack.SessionState.String() != tc.cancelled {
				t.Fatalf("cancel ack %v", ack)
			}
			if m := ws.call("macp/cancelSession", map[string]any{"reason": "x"}); m.Error == nil || m.Error.Code != -32602 {
				t.Fatalf("cancel without sessionId: %+v", m.Error)
			}
		})
	}
}

// toggleSuspend suspends and resumes each of sids as their initiator
// "coord" over HTTP, again and again (suspended 5-14 ms, open 2-6 ms),
// until stop closes; each session is left OPEN. It returns the count of
// accepted suspensions and resumptions.
func (e *env) toggleSuspend(t *testing.T, sids []string, seed uint64, stop <-chan struct{}, wg *sync.WaitGroup) *atomic.Int64 {
	var n atomic.Int64
	for i, sid := range sids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(i)+1))
			for {
				for _, op := range []string{"suspend", "resume"} {
					d := time.Duration(2+r.IntN(5)) * time.Millisecond
					if op == "resume" {
						d = time.Duration(5+r.IntN(10)) * time.Millisecond
					}
					select {
					case <-stop:
						if op == "resume" { // leave it OPEN
							e.do(t, "POST", "/macp/session/"+sid+"/resume", "coord", "application/json", []byte(`{}`))
						}
						return
					case <-time.After(d):
					}
					if code, b := e.do(t, "POST", "/macp/session/"+sid+"/"+op, "coord", "application/json", []byte(`{"reason":"trial"}`)); code != 200 {
						t.Errorf("%s: %d %s", op, code, b)
						return
					}
					n.Add(1)
				}
			}
		}()
	}
	return &n
}
