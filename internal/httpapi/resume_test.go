package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/wire"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/protobuf/encoding/protojson"
)

// Protocol-mode sessions (issue: resumable sessions as a protocol;
// docs/resume.md "Protocol mode"): session/start, session/resume,
// session/end, session/get over JSON-RPC on /macp/ws.

// pconn is a JSON-RPC client on /macp/ws that keeps notifications
// arriving before a response for later.
type pconn struct {
	t       testing.TB
	c       *websocket.Conn
	id      int
	pending []*rpcMsg
	ids     eventIDs // every session-scoped notification's sessionEventId, as received
}

// eventIDs records the sessionEventId of every envelope and state
// notification a connection receives, per session, in arrival order.
type eventIDs map[string][]float64

func (e *eventIDs) note(t testing.TB, m *rpcMsg) {
	t.Helper()
	if m.Method != "notifications/macp/envelope" && m.Method != "notifications/macp/session" {
		return
	}
	var n struct {
		SessionID      string          `json:"sessionId"`
		SessionEventID json.RawMessage `json:"sessionEventId"`
	}
	var id float64
	if json.Unmarshal(m.Params, &n) != nil || json.Unmarshal(n.SessionEventID, &id) != nil {
		t.Fatalf("%s without a numeric sessionEventId: %s", m.Method, m.Params)
	}
	// Envelopes carry N, state notifications N.5 (docs/resume.md).
	if frac := id - float64(uint64(id)); (m.Method == "notifications/macp/envelope") != (frac == 0) || (frac != 0 && frac != 0.5) {
		t.Fatalf("%s with sessionEventId %s", m.Method, n.SessionEventID)
	}
	if *e == nil {
		*e = eventIDs{}
	}
	(*e)[n.SessionID] = append((*e)[n.SessionID], id)
}

// increasing fails unless every id of sid is above after and above the
// one before it: unique and strictly increasing in arrival order.
func (e eventIDs) increasing(t testing.TB, what, sid string, after float64) {
	t.Helper()
	prev := after
	for i, id := range e[sid] {
		if id <= prev {
			t.Fatalf("%s: sessionEventId %v after %v (notification %d of %v)", what, id, prev, i, e[sid])
		}
		prev = id
	}
}

func (e *env) pdial(t testing.TB, agent string) *pconn {
	return &pconn{t: t, c: e.dialWS(t, agent)}
}

// call sends a request and returns its response.
func (p *pconn) call(method string, params any) *rpcMsg {
	p.t.Helper()
	p.id++
	if err := wsCall(p.c, p.id, method, params); err != nil {
		p.t.Fatal(err)
	}
	for {
		m, err := wsRead(p.c)
		if err != nil {
			p.t.Fatalf("%s: %v", method, err)
		}
		if m.Method != "" {
			p.pending = append(p.pending, unbatch(p.t, m)...)
			continue
		}
		if string(m.ID) != fmt.Sprint(p.id) {
			p.t.Fatalf("%s: response to %s", method, m.ID)
		}
		return m
	}
}

// notif returns the next notification.
func (p *pconn) notif() *rpcMsg {
	p.t.Helper()
	if len(p.pending) > 0 {
		m := p.pending[0]
		p.pending = p.pending[1:]
		p.ids.note(p.t, m)
		return m
	}
	m, err := wsRead(p.c)
	if err != nil {
		p.t.Fatal(err)
	}
	if m.Method == "" {
		p.t.Fatalf("unexpected response %s", m.ID)
	}
	if ms := unbatch(p.t, m); len(ms) > 1 {
		p.pending = append(ms[1:], p.pending...)
		m = ms[0]
	}
	p.ids.note(p.t, m)
	return m
}

// batchesSeen counts the batches unbatch split (the trials check that
// batched catch-up was exercised).
var batchesSeen atomic.Int64

// unbatch splits a notifications/macp/envelopes (a "batch": true
// attachment, wsbatch.go) into the notifications/macp/envelope messages
// it stands for, in order; any other message is returned as it is. A
// batch must hold at least one envelope, each of the batch's session.
func unbatch(t testing.TB, m *rpcMsg) []*rpcMsg {
	t.Helper()
	if m.Method != "notifications/macp/envelopes" {
		return []*rpcMsg{m}
	}
	batchesSeen.Add(1)
	var b struct {
		SessionID string            `json:"sessionId"`
		Envelopes []json.RawMessage `json:"envelopes"`
	}
	if err := json.Unmarshal(m.Params, &b); err != nil || len(b.Envelopes) == 0 || b.SessionID == "" {
		t.Fatalf("malformed batch: %v %s", err, m.Params)
	}
	out := make([]*rpcMsg, 0, len(b.Envelopes))
	for _, item := range b.Envelopes {
		var it map[string]json.RawMessage
		if err := json.Unmarshal(item, &it); err != nil {
			t.Fatalf("batch item: %v %s", err, item)
		}
		it["sessionId"], _ = json.Marshal(b.SessionID)
		params, _ := json.Marshal(it)
		out = append(out, &rpcMsg{JSONRPC: "2.0", Method: "notifications/macp/envelope", Params: params})
	}
	return out
}

type envNote struct {
	SessionID      string          `json:"sessionId"`
	SessionEventID float64         `json:"sessionEventId"` // N (envelopes) or N.5 (state)
	Envelope       json.RawMessage `json:"envelope"`
	Metadata       json.RawMessage `json:"metadata"`
	Reason         string          `json:"reason"`
}

func params(t testing.TB, m *rpcMsg) envNote {
	t.Helper()
	var n envNote
	if err := json.Unmarshal(m.Params, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

type resumeResult struct {
	Resumed        bool   `json:"resumed"`
	Catchup        bool   `json:"catchup"`
	SessionID      string `json:"sessionId"`
	SessionEventID uint64 `json:"sessionEventId"`
}

func (p *pconn) resume(sid string, last uint64) resumeResult {
	p.t.Helper()
	m := p.call("session/resume", map[string]any{"sessionId": sid, "lastSessionEventId": last})
	if m.Error != nil {
		p.t.Fatalf("session/resume: %+v", m.Error)
	}
	var r resumeResult
	if err := json.Unmarshal(m.Result, &r); err != nil || !r.Resumed || r.SessionID != sid {
		p.t.Fatalf("session/resume result %s (%v)", m.Result, err)
	}
	return r
}

// nextEnvelope skips session notifications and returns the next envelope
// notification of sid.
func (p *pconn) nextEnvelope(sid string) (uint64, []byte) {
	p.t.Helper()
	for {
		m := p.notif()
		switch m.Method {
		case "notifications/macp/session":
			continue
		case "notifications/macp/envelope":
			n := params(p.t, m)
			if n.SessionID != sid {
				p.t.Fatalf("envelope of session %s, want %s", n.SessionID, sid)
			}
			env := &macpv1.Envelope{}
			if err := protojson.Unmarshal(n.Envelope, env); err != nil {
				p.t.Fatal(err)
			}
			return uint64(n.SessionEventID), wireBytes(p.t, env)
		default:
			p.t.Fatalf("unexpected %s %s", m.Method, m.Params)
		}
	}
}

func rpcCode(t testing.TB, m *rpcMsg) (int, string) {
	t.Helper()
	if m.Error == nil {
		t.Fatalf("want an error, got result %s", m.Result)
	}
	code := ""
	if len(m.Error.Data) > 0 {
		var me macpv1.MACPError
		if err := protojson.Unmarshal(m.Error.Data, &me); err == nil {
			code = me.Code
		}
	}
	return m.Error.Code, code
}

func TestProtocolStartResumeEnd(t *testing.T) {
	e := startApp(t, testConfig())
	c := e.pdial(t, "coord")
	sid := uuid.NewString()
	var env map[string]any
	_ = json.Unmarshal([]byte(startJSON(sid, "coord", "alice", "bob")), &env)
	m := c.call("session/start", map[string]any{"envelope": env})
	var sr struct {
		SessionID string          `json:"sessionId"`
		Ack       json.RawMessage `json:"ack"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &sr) != nil || sr.SessionID != sid {
		t.Fatalf("session/start: %+v %s", m.Error, m.Result)
	}
	ack := &macpv1.Ack{}
	if err := protojson.Unmarshal(sr.Ack, ack); err != nil || !ack.Ok {
		t.Fatalf("ack %s", sr.Ack)
	}
	// Attached from the start: the SessionStart is sessionEventId 1.
	if seq, b := c.nextEnvelope(sid); seq != 1 || !bytes.Equal(b, e.stored(t, sid)[1]) {
		t.Fatalf("first notification seq %d", seq)
	}
	// Missing / wrong params name the problem.
	if code, _ := rpcCode(t, c.call("session/start", map[string]any{})); code != -32602 {
		t.Fatalf("session/start without envelope: %d", code)
	}
	if code, _ := rpcCode(t, c.call("session/start", map[string]any{"envelope": json.RawMessage(proposalJSON(sid, uuid.NewString(), "p"))})); code != -32602 {
		t.Fatalf("session/start with a Proposal: %d", code)
	}
	// Unknown method (JSON-RPC 2.0 §5.1).
	if code, _ := rpcCode(t, c.call("session/nope", map[string]any{})); code != -32601 {
		t.Fatalf("unknown method: %d", code)
	}
	// Unknown session; non-participant (RFC-MACP-0006 §3.2 authorization).
	if code, mc := rpcCode(t, c.call("session/resume", map[string]any{"sessionId": uuid.NewString()})); code != -32000 || mc != "SESSION_NOT_FOUND" {
		t.Fatalf("unknown session: %d %s", code, mc)
	}
	if code, mc := rpcCode(t, e.pdial(t, "mallory").call("session/resume", map[string]any{"sessionId": sid})); code != -32000 || mc != "FORBIDDEN" {
		t.Fatalf("non-participant: %d %s", code, mc)
	}

	// session/end by a participant only detaches: nothing more arrives
	// on that connection while the session goes on.
	a := e.pdial(t, "alice")
	a.resume(sid, 1)
	b := e.pdial(t, "bob")
	b.resume(sid, 1)
	m = a.call("session/end", map[string]any{"sessionId": sid})
	if m.Error != nil || !bytes.Contains(m.Result, []byte(`"cancelled":false`)) {
		t.Fatalf("session/end: %+v %s", m.Error, m.Result)
	}
	pending := len(a.pending)
	for i := range 3 {
		e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, uuid.NewString(), fmt.Sprint("p", i)))
	}
	for range 3 {
		b.nextEnvelope(sid) // bob, still attached, sees them
	}
	a.call("session/get", map[string]any{"sessionId": sid}) // a barrier on a's connection
	for _, n := range a.pending[pending:] {
		t.Fatalf("notification after session/end: %s %s", n.Method, n.Params)
	}
	// session/end by the initiator cancels (as CancelSession: EXPIRED).
	m = c.call("session/end", map[string]any{"sessionId": sid})
	if m.Error != nil || !bytes.Contains(m.Result, []byte(`"cancelled":true`)) {
		t.Fatalf("initiator session/end: %+v %s", m.Error, m.Result)
	}
	md, err := e.c.GetSession(as("coord"), &macpv1.GetSessionRequest{SessionId: sid})
	if err != nil || md.GetMetadata().GetState() != macpv1.SessionState_SESSION_STATE_EXPIRED {
		t.Fatalf("after the initiator's session/end: %v %v", md, err)
	}
}

func TestProtocolSingleActiveAttachment(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice", "bob")
	a1 := e.pdial(t, "alice")
	a1.resume(sid, 1)
	bob := e.pdial(t, "bob")
	bob.resume(sid, 1)
	a2 := e.pdial(t, "alice")
	a2.resume(sid, 1)
	// a1 gets a final detached notification, then nothing.
	for {
		m := a1.notif()
		if m.Method == "notifications/macp/session" {
			continue
		}
		if m.Method != "notifications/macp/detached" || params(t, m).Reason == "" {
			t.Fatalf("superseded attachment got %s %s", m.Method, m.Params)
		}
		break
	}
	e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, uuid.NewString(), "x"))
	if seq, _ := a2.nextEnvelope(sid); seq != 2 {
		t.Fatalf("new attachment got seq %d", seq)
	}
	if seq, _ := bob.nextEnvelope(sid); seq != 2 { // other participants untouched
		t.Fatalf("bob got seq %d", seq)
	}
	n := len(a1.pending)
	a1.call("session/get", map[string]any{"sessionId": sid})
	if len(a1.pending) != n {
		t.Fatalf("superseded attachment got %s", a1.pending[n].Method)
	}
}

func TestProtocolCoalescing(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice", "bob")
	a := e.pdial(t, "alice")
	a.resume(sid, 1)
	a.call("session/end", map[string]any{"sessionId": sid})
	a.pending = nil // the first attachment's notifications
	// Ten state changes while alice is away.
	for i := range 10 {
		agent := []string{"coord", "bob"}[i%2]
		e.mustAck(t, "/macp/envelope", agent, proposalJSON(sid, uuid.NewString(), fmt.Sprint("p", i)))
	}
	r := a.resume(sid, 1)
	if !r.Catchup {
		t.Fatal("catchup false with no window")
	}
	var metas [][]byte
	envs := 0
	for envs < 10 || len(metas) == 0 {
		m := a.notif()
		switch m.Method {
		case "notifications/macp/envelope":
			envs++ // history is never coalesced
		case "notifications/macp/session":
			metas = append(metas, params(t, m).Metadata)
		default:
			t.Fatalf("unexpected %s", m.Method)
		}
	}
	g := a.call("session/get", map[string]any{"sessionId": sid})
	a.call("session/get", map[string]any{"sessionId": sid})
	for _, m := range a.pending {
		if m.Method == "notifications/macp/session" {
			metas = append(metas, params(t, m).Metadata)
		} else {
			envs++
		}
	}
	if envs != 10 || len(metas) != 1 {
		t.Fatalf("got %d envelopes and %d session notifications, want 10 and 1", envs, len(metas))
	}
	var gr envNote
	_ = json.Unmarshal(g.Result, &gr)
	if gr.SessionEventID != 11 || !bytes.Equal(gr.Metadata, metas[0]) {
		t.Fatalf("session notification %s differs from session/get %s", metas[0], g.Result)
	}
}

func TestProtocolMixedModes(t *testing.T) {
	e := startApp(t, testConfig())
	s1, s2 := e.startSession(t, "coord", "alice"), e.startSession(t, "coord", "alice")
	c := e.pdial(t, "alice")
	if m := c.call("macp/subscribe", map[string]any{"sessionId": s1}); m.Error != nil {
		t.Fatal(m.Error)
	}
	if code, mc := rpcCode(t, c.call("session/resume", map[string]any{"sessionId": s1})); code != -32000 || mc != "INVALID_ENVELOPE" {
		t.Fatalf("protocol mode over a transport-mode subscription: %d %s", code, mc)
	}
	c.resume(s2, 0) // the other session in protocol mode on the same connection
	if code, mc := rpcCode(t, c.call("macp/subscribe", map[string]any{"sessionId": s2})); code != -32000 || mc != "INVALID_ENVELOPE" {
		t.Fatalf("transport mode over a protocol-mode attachment: %d %s", code, mc)
	}
}

// TestProtocolResumeTrials: random cut points on every transport's
// cursor (gRPC after_sequence, SSE id, WebSocket sessionEventId, polling
// seq, a protocol-mode attachment), resumed with session/resume over
// WebSocket or HTTP (POST /macp/rpc and its stream) while
// several senders write. Within the window: exactly the missed envelopes,
// in order, byte-equal to storage, then live. Outside: catchup false and
// none of the missed.
func TestProtocolResumeTrials(t *testing.T) {
	trials := 500
	if testing.Short() {
		trials = 100
	}
	const window = 100
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MACP_RESUME_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (MACP_RESUME_SEED to replay the choices)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	cfg := testConfig()
	cfg.Resume.ReplayWindow = window
	e := startApp(t, cfg)
	sids := []string{e.startSession(t, "coord", "alice", "bob"), e.startSession(t, "coord", "alice", "bob")}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent atomic.Int64
	for i, sid := range sids {
		for j, via := range []string{"grpc", "http", "ws"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var ws *pconn
				if via == "ws" {
					ws = &pconn{t: t, c: e.dialWS(t, "coord")}
				}
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("s%d-%s-%d-%d", i, via, j, n)
					// While the controller below holds the session
					// SUSPENDED, sends are refused SESSION_NOT_OPEN.
					ok := true
					switch via {
					case "grpc":
						if ack := e.grpcProposal(t, "coord", sid, id); !ack.Ok {
							if ack.GetError().GetCode() != "SESSION_NOT_OPEN" {
								t.Errorf("grpc send: %v", ack)
								return
							}
							ok = false
						}
					case "http":
						if code, b := e.post(t, "coord", proposalJSON(sid, id, id)); code == 409 && bytes.Contains(b, []byte("SESSION_NOT_OPEN")) {
							ok = false
						} else if code != 200 {
							t.Errorf("http send: %d %s", code, b)
							return
						}
					case "ws":
						m := ws.call("macp/send", map[string]any{"envelope": json.RawMessage(proposalJSON(sid, id, id))})
						if m.Error == nil && bytes.Contains(m.Result, []byte("SESSION_NOT_OPEN")) {
							ok = false
						} else if m.Error != nil || !bytes.Contains(m.Result, []byte(`"ok":true`)) {
							t.Errorf("ws send: %+v %s", m.Error, m.Result)
							return
						}
					}
					if ok {
						sent.Add(1)
					}
					time.Sleep(time.Millisecond)
				}
			}()
		}
	}
	// The initiator suspends and resumes each session again and again, so
	// that trials cut, resume and catch up across SessionSuspend and
	// SessionResume records and attach to SUSPENDED sessions.
	toggles := e.toggleSuspend(t, sids, seed, stop, &wg)
	defer func() { close(stop); wg.Wait() }()
	for sent.Load() < 3*window {
		time.Sleep(time.Millisecond)
	}

	cutVia := append([]string{"proto"}, transports...)
	counts := map[string]int{}
	for trial := range trials {
		sid := sids[rng.IntN(len(sids))]
		agent := []string{"alice", "bob"}[rng.IntN(2)]
		last, _ := e.a.Runtime().LastSeq(sid)
		lo := uint64(0)
		if last > 2*window {
			lo = last - 2*window
		}
		start := lo + rng.Uint64N(last-lo+1)
		via := cutVia[rng.IntN(len(cutVia))]
		// Read 1..4 envelopes on via, then cut: the cursor is the last seq.
		cursor := start
		var cursorID any // what the resume sends: N, or a state notification's N.5
		var cursorF float64
		n1 := 1 + rng.IntN(4)
		if via == "proto" {
			p := e.pdial(t, agent)
			p.resume(sid, start)
			for range n1 {
				cursor, _ = p.nextEnvelope(sid)
			}
			// Sometimes the cursor is the id of a state notification:
			// read on until one arrives.
			if rng.IntN(2) == 0 {
				for range 400 {
					if m := p.notif(); m.Method == "notifications/macp/session" {
						ids := p.ids[sid]
						cursorF = ids[len(ids)-1]
						cursor, cursorID = uint64(cursorF), json.Number(fmt.Sprintf("%.1f", cursorF))
						counts["state-cursor"]++
						break
					}
				}
			}
			p.ids.increasing(t, fmt.Sprintf("trial %d cut", trial), sid, float64(start))
			_ = p.c.CloseNow()
		} else {
			f := e.open(t, via, agent, sid, start)
			for range n1 {
				seq, _, err := f.next()
				if err != nil {
					t.Fatalf("trial %d %s: %v", trial, via, err)
				}
				cursor = seq
			}
			f.close()
		}
		if cursorID == nil {
			cursorID, cursorF = cursor, float64(cursor)
		}
		// Let some more envelopes through sometimes, so that some
		// cursors fall outside the window.
		if rng.IntN(3) == 0 {
			target := cursor + uint64(window) + uint64(rng.IntN(window))
			for l, _ := e.a.Runtime().LastSeq(sid); l < target; l, _ = e.a.Runtime().LastSeq(sid) {
				time.Sleep(time.Millisecond)
			}
		}
		before, _ := e.a.Runtime().LastSeq(sid)
		if md, err := e.c.GetSession(as(agent), &macpv1.GetSessionRequest{SessionId: sid}); err == nil && md.GetMetadata().GetState() == macpv1.SessionState_SESSION_STATE_SUSPENDED {
			counts["suspended-at-resume"]++
		}
		n2 := 1 + rng.IntN(4)
		var got []uint64
		var gotB [][]byte
		var r resumeResult
		var ids eventIDs
		resumeVia := []string{"ws", "ws-batch", "ws-binary", "http"}[rng.IntN(4)]
		counts["resume-"+resumeVia]++
		if resumeVia != "http" {
			// ws-batch asks for batched catch-up (wsbatch.go), ws-binary
			// resumes on a macp.v1+proto connection (ws_binary.go): the
			// envelopes each receives, unbatched or decoded from frames,
			// must be exactly those a plain resume receives, with the same
			// ids.
			p := e.pdial(t, agent)
			if resumeVia == "ws-binary" {
				p = &pconn{t: t, c: e.dialWSProto(t, agent)}
			}
			m := p.call("session/resume", map[string]any{"sessionId": sid, "lastSessionEventId": cursorID, "batch": resumeVia == "ws-batch"})
			if m.Error != nil || json.Unmarshal(m.Result, &r) != nil || !r.Resumed {
				t.Fatalf("trial %d: resume from %v: %+v %s", trial, cursorID, m.Error, m.Result)
			}
			for range n2 {
				seq, b := p.nextEnvelope(sid)
				got = append(got, seq)
				gotB = append(gotB, b)
			}
			_ = p.c.CloseNow()
			ids = p.ids
		} else {
			h := e.hdial(t, agent)
			code, m := h.call("session/resume", map[string]any{"sessionId": sid, "lastSessionEventId": cursorID})
			if code != 200 || m.Error != nil || json.Unmarshal(m.Result, &r) != nil || !r.Resumed {
				t.Fatalf("trial %d: HTTP resume %d %+v %s", trial, code, m.Error, m.Result)
			}
			for range n2 {
				seq, b := h.nextEnvelopeBytes()
				got = append(got, seq)
				gotB = append(gotB, b)
			}
			h.close()
			ids = h.ids
		}
		// Every notification's sessionEventId, envelopes and state alike:
		// unique and strictly increasing, above the cursor (catch-up) or
		// above the end at resume.
		from := cursorF
		if !r.Catchup {
			from = float64(r.SessionEventID)
		}
		ids.increasing(t, fmt.Sprintf("trial %d resume", trial), sid, from)
		after, _ := e.a.Runtime().LastSeq(sid)
		if r.Catchup {
			counts["catchup"]++
			if r.SessionEventID != cursor || before-cursor > window {
				t.Fatalf("trial %d: catchup true from %d (cursor %d, last before %d, window %d)", trial, r.SessionEventID, cursor, before, window)
			}
		} else {
			counts["outside"]++
			if r.SessionEventID < before || r.SessionEventID-cursor <= window || r.SessionEventID > after {
				t.Fatalf("trial %d: catchup false at %d (cursor %d, last before %d, window %d)", trial, r.SessionEventID, cursor, before, window)
			}
		}
		// Delivery starts right after sessionEventId: the cursor (every
		// missed envelope) or the end at resume (none of the missed).
		stored := e.storedRange(t, sid, r.SessionEventID+1, len(got))
		for i, seq := range got {
			if want := r.SessionEventID + uint64(i) + 1; seq != want {
				t.Fatalf("trial %d (cut on %s at %d, catchup %v): envelope %d has seq %d, want %d", trial, via, cursor, r.Catchup, i, seq, want)
			}
			if !bytes.Equal(gotB[i], stored[seq]) {
				t.Fatalf("trial %d: seq %d differs from storage", trial, seq)
			}
		}
		counts[via]++
	}
	if counts["catchup"] == 0 || counts["outside"] == 0 || counts["state-cursor"] == 0 || counts["suspended-at-resume"] == 0 {
		t.Fatalf("trials did not cover both outcomes and suspended sessions: %v", counts)
	}
	if counts["resume-ws-batch"] >= 10 && batchesSeen.Load() == 0 {
		t.Fatalf("%d batched resumes and not one batch: batched catch-up was not exercised", counts["resume-ws-batch"])
	}
	if counts["resume-ws-binary"] >= 10 && framesSeen.Load() == 0 {
		t.Fatalf("%d resumes on macp.v1+proto and not one envelope frame: the binary path was not exercised", counts["resume-ws-binary"])
	}
	t.Logf("%d trials %v, %d envelopes sent and %d suspensions/resumptions meanwhile; %d batches unbatched, %d envelope frames", trials, counts, sent.Load(), toggles.Load(), batchesSeen.Load(), framesSeen.Load())
}

var _ = context.Background

// The manifest advertises protocol-mode sessions and the replay window.
func TestProtocolAdvertised(t *testing.T) {
	cfg := testConfig()
	cfg.Resume.ReplayWindow = 250
	e := startApp(t, cfg)
	code, b := e.do(t, "GET", "/.well-known/macp.json", "", "", nil)
	m := &macpv1.AgentManifest{}
	if err := protojson.Unmarshal(b, m); code != 200 || err != nil {
		t.Fatalf("%d %s %v", code, b, err)
	}
	if m.Metadata["experimental.macp.session-resume"] != "1" || m.Metadata["experimental.macp.session-resume.replay_window"] != "250" {
		t.Fatalf("manifest metadata %v", m.Metadata)
	}
	found := false
	for _, ep := range m.TransportEndpoints {
		if ep.Transport == "macp.transport.websocket.v1" {
			found = ep.Metadata["macp.session-resume.replay_window"] == "250"
		}
	}
	if !found {
		t.Fatalf("websocket endpoint does not advertise it: %v", m.TransportEndpoints)
	}
}

// TestProtocolEventIDs: on a resume, every session-scoped notification's
// sessionEventId is unique and strictly increasing (envelopes N, state
// N.5), the state is the state at its id, and a resume from a state
// notification's id repeats nothing. Before, the state notification
// reused an envelope's id and could arrive before that envelope.
func TestProtocolEventIDs(t *testing.T) {
	cfg := testConfig()
	cfg.Resume.ReplayWindow = 5
	e := startApp(t, cfg)
	sid := e.startSession(t, "coord", "alice", "bob")
	for i := range 5 {
		e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, uuid.NewString(), fmt.Sprint("p", i)))
	}
	for range 24 {
		p := e.pdial(t, "alice")
		p.resume(sid, 1)
		var state []byte
		for {
			if m := p.notif(); m.Method == "notifications/macp/session" {
				n := params(t, m)
				if n.SessionEventID != 6.5 {
					t.Fatalf("state notification %v, want 6.5 (ids %v)", n.SessionEventID, p.ids[sid])
				}
				state = n.Metadata
				break
			}
		}
		p.ids.increasing(t, "resume from 1", sid, 1)
		if got := p.ids[sid]; len(got) != 6 || got[0] != 2 || got[4] != 6 {
			t.Fatalf("ids %v, want 2..6 then 6.5", got)
		}
		// The state notification equals session/get at 6.
		var gr envNote
		g := p.call("session/get", map[string]any{"sessionId": sid})
		if json.Unmarshal(g.Result, &gr) != nil || gr.SessionEventID != 6 || !bytes.Equal(gr.Metadata, state) {
			t.Fatalf("state notification %s, session/get %s", state, g.Result)
		}
		_ = p.c.CloseNow()

		// Resuming from 6.5 sends neither envelope 6 nor state 6.5 again.
		q := e.pdial(t, "alice")
		m := q.call("session/resume", map[string]any{"sessionId": sid, "lastSessionEventId": json.Number("6.5")})
		if m.Error != nil {
			t.Fatalf("resume from 6.5: %+v", m.Error)
		}
		q.call("session/get", map[string]any{"sessionId": sid}) // a barrier
		for _, n := range q.pending {
			t.Fatalf("resume from 6.5 got %s %s", n.Method, n.Params)
		}
		_ = q.c.CloseNow()
	}
	// Malformed ids are refused.
	p := e.pdial(t, "alice")
	for _, bad := range []any{json.Number("6.4"), "6.5.5", json.Number("-1"), "x"} {
		if code, _ := rpcCode(t, p.call("session/resume", map[string]any{"sessionId": sid, "lastSessionEventId": bad})); code != -32602 {
			t.Fatalf("lastSessionEventId %v: %d", bad, code)
		}
	}
}

// TestProtocolEndedSessions: session/resume of an ended session is an
// error carrying SESSION_NOT_OPEN and the final sessionEventId (before, a
// cancelled session resumed with catchup true); session/end of an unknown
// session or by a caller who may not observe it is an error (before:
// "ended": true), on WebSocket and HTTP alike.
func TestProtocolEndedSessions(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice", "bob")
	e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, uuid.NewString(), "p"))
	c := e.pdial(t, "coord")
	if m := c.call("session/end", map[string]any{"sessionId": sid}); m.Error != nil || !bytes.Contains(m.Result, []byte(`"cancelled":true`)) {
		t.Fatalf("initiator session/end: %+v %s", m.Error, m.Result)
	}
	last, _ := e.a.Runtime().LastSeq(sid) // the runtime's SessionCancel
	if last != 3 {
		t.Fatalf("last seq %d, want 3", last)
	}
	check := func(what string, m *rpcMsg, want string) {
		t.Helper()
		code, mc := rpcCode(t, m)
		if code != -32000 || mc != want {
			t.Fatalf("%s: %d %s, want -32000 %s", what, code, mc, want)
		}
	}
	for _, cursor := range []uint64{0, 1, 3} {
		p := e.pdial(t, "alice")
		m := p.call("session/resume", map[string]any{"sessionId": sid, "lastSessionEventId": cursor})
		check("resume of an ended session", m, "SESSION_NOT_OPEN")
		var me macpv1.MACPError
		var d struct {
			SessionEventID uint64 `json:"sessionEventId"`
			State          string `json:"state"`
		}
		if protojson.Unmarshal(m.Error.Data, &me) != nil || me.SessionId != sid || json.Unmarshal(me.Details, &d) != nil || d.SessionEventID != 3 || d.State != "SESSION_STATE_EXPIRED" {
			t.Fatalf("ended error data %s", m.Error.Data)
		}
		p.call("session/get", map[string]any{"sessionId": sid}) // a barrier
		for _, n := range p.pending {
			t.Fatalf("notification after a refused resume: %s", n.Method)
		}
	}
	h := e.hdial(t, "bob")
	if _, m := h.call("session/resume", map[string]any{"sessionId": sid}); true {
		check("HTTP resume of an ended session", m, "SESSION_NOT_OPEN")
	}
	// session/end: unknown session, a caller who may not observe it.
	check("session/end of an unknown session", c.call("session/end", map[string]any{"sessionId": uuid.NewString()}), "SESSION_NOT_FOUND")
	open := e.startSession(t, "coord", "alice")
	check("session/end by a non-participant", e.pdial(t, "mallory").call("session/end", map[string]any{"sessionId": open}), "FORBIDDEN")
	if _, m := h.call("session/end", map[string]any{"sessionId": uuid.NewString()}); true {
		check("HTTP session/end of an unknown session", m, "SESSION_NOT_FOUND")
	}
	md, err := e.c.GetSession(as("coord"), &macpv1.GetSessionRequest{SessionId: open})
	if err != nil || md.GetMetadata().GetState() != macpv1.SessionState_SESSION_STATE_OPEN {
		t.Fatalf("refused session/end changed the session: %v %v", md, err)
	}
}

// TestProtocolJSONRPCStrict: session/resume and session/start sent as
// notifications (no id) act but get no response, on WebSocket and HTTP
// (before: a response with "id": null); names are case-sensitive and a
// duplicated member is refused -32600.
func TestProtocolJSONRPCStrict(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	p := e.pdial(t, "alice")
	raw := func(msg string) {
		t.Helper()
		if err := p.c.Write(context.Background(), websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	raw(`{"jsonrpc":"2.0","method":"session/resume","params":{"sessionId":"` + sid + `","lastSessionEventId":0}}`)
	sid2 := uuid.NewString()
	raw(`{"jsonrpc":"2.0","method":"session/start","params":{"envelope":` + startJSON(sid2, "alice", "bob") + `}}`)
	raw(`{"jsonrpc":"2.0","method":"session/nope","params":{}}`)
	p.call("session/get", map[string]any{"sessionId": sid}) // a barrier: its response is the first
	// The notifications acted: both sessions are attached.
	seen := map[string]bool{}
	for len(seen) < 2 {
		m := p.notif()
		if m.Method == "notifications/macp/envelope" {
			seen[params(t, m).SessionID] = true
		}
	}
	if !seen[sid] || !seen[sid2] {
		t.Fatalf("attached to %v", seen)
	}
	for _, c := range []struct {
		msg  string
		code int
	}{
		{`{"jsonrpc":"2.0","id":5,"Method":"session/get","params":{"sessionId":"` + sid + `"}}`, -32600},
		{`{"jsonrpc":"2.0","id":5,"method":"Session/Get","params":{"sessionId":"` + sid + `"}}`, -32601},
		{`{"jsonrpc":"2.0","id":5,"method":"session/get","params":{"SessionId":"` + sid + `"}}`, -32602},
		{`{"jsonrpc":"2.0","id":5,"method":"session/end","method":"session/get","params":{"sessionId":"` + sid + `"}}`, -32600},
		{`{"jsonrpc":"2.0","id":5,"method":"session/get","params":{"sessionId":"x","sessionId":"` + sid + `"}}`, -32600},
	} {
		raw(c.msg)
		m, err := wsRead(p.c)
		for err == nil && m.Method != "" {
			m, err = wsRead(p.c)
		}
		if err != nil || m.Error == nil || m.Error.Code != c.code {
			t.Fatalf("%s: %+v %v, want %d", c.msg, m, err, c.code)
		}
	}
	// HTTP: a notification is 204 with no body.
	h := e.hdial(t, "alice")
	code, body := e.do(t, "POST", "/macp/rpc", "alice", "application/json",
		[]byte(`{"jsonrpc":"2.0","method":"session/resume","params":{"sessionId":"`+sid+`"}}`), "X-MACP-RPC-Stream", h.key)
	if code != 204 || len(body) != 0 {
		t.Fatalf("HTTP notification: %d %s", code, body)
	}
	if seq, _ := h.nextEnvelopeBytes(); seq != 1 { // it acted
		t.Fatalf("HTTP notification attached at %d", seq)
	}
}

// TestProtocolMixedModeCursors: a transport-mode cursor (Last-Event-ID,
// after_sequence, after) on a protocol-mode route is refused whole,
// including on the WebSocket upgrade (before: the upgrade with
// Last-Event-ID was accepted and so was POST /macp/rpc?after_sequence=1
// carrying session/resume); two Last-Event-ID headers on SSE are refused.
func TestProtocolMixedModeCursors(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	h := e.hdial(t, "alice")
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"session/resume","params":{"sessionId":"` + sid + `"}}`)
	for _, c := range []struct {
		path string
		hdr  []string
	}{
		{"/macp/rpc?after_sequence=1", nil},
		{"/macp/rpc?after=1", nil},
		{"/macp/rpc", []string{"Last-Event-ID", ""}},
		{"/macp/rpc", []string{"Last-Event-ID", "1"}},
	} {
		code, b := e.do(t, "POST", c.path, "alice", "application/json", body, append([]string{"X-MACP-RPC-Stream", h.key}, c.hdr...)...)
		if code != 400 || macpError(t, b).Code != "INVALID_ENVELOPE" {
			t.Fatalf("POST %s %v: %d %s", c.path, c.hdr, code, b)
		}
	}
	if code, b := e.do(t, "GET", "/macp/rpc/stream?after_sequence=0", "alice", "", nil); code != 400 || macpError(t, b).Code != "INVALID_ENVELOPE" {
		t.Fatalf("stream with after_sequence: %d %s", code, b)
	}
	// Nothing was attached by the refused requests.
	if _, m := h.call("session/get", map[string]any{"sessionId": sid}); m.Error != nil {
		t.Fatal(m.Error)
	}
	// The WebSocket upgrade with a cursor is closed with the MACP code.
	for _, c := range []struct {
		q   string
		hdr http.Header
	}{
		{"", http.Header{"Last-Event-ID": {"1"}}},
		{"?after_sequence=1", nil},
		{"?after=0", nil},
	} {
		hdr := http.Header{"Authorization": {"Bearer alice"}}
		for k, v := range c.hdr {
			hdr[k] = v
		}
		conn, _, err := websocket.Dial(context.Background(), "ws://"+e.a.HTTPAddr()+"/macp/ws"+c.q, &websocket.DialOptions{HTTPHeader: hdr})
		if err != nil {
			t.Fatal(err)
		}
		_ = wsCall(conn, 1, "session/resume", map[string]any{"sessionId": sid})
		_, err = wsRead(conn)
		if websocket.CloseStatus(err) == -1 || !strings.Contains(err.Error(), "INVALID_ENVELOPE") {
			t.Fatalf("upgrade %s %v: %v", c.q, c.hdr, err)
		}
	}
	// SSE: two Last-Event-ID headers.
	req, _ := http.NewRequest("GET", e.base+"/macp/session/"+sid+"/events", nil)
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Add("Last-Event-ID", "1")
	req.Header.Add("Last-Event-ID", "0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || macpError(t, b).Code != "INVALID_ENVELOPE" {
		t.Fatalf("two Last-Event-ID headers: %d %s", resp.StatusCode, b)
	}
}

// TestServerMintedSessionIDs: a SessionStart without session_id gets a
// server-minted id (128 CSPRNG bits, the spec's format) on session/start,
// POST /macp/session/start and gRPC Send, returned in the Ack/result
// (before: INVALID_ENVELOPE). A client-chosen id still works.
func TestServerMintedSessionIDs(t *testing.T) {
	e := startApp(t, testConfig())
	noID := strings.Replace(startJSON("", "alice"), `"session_id":"",`, "", 1)
	seen := map[string]bool{}
	check := func(via, sid string) {
		t.Helper()
		if !coord.ValidSessionID(sid) || len(sid) != 22 || seen[sid] {
			t.Fatalf("%s minted %q", via, sid)
		}
		seen[sid] = true
		md, err := e.c.GetSession(as("coord"), &macpv1.GetSessionRequest{SessionId: sid})
		if err != nil || md.GetMetadata().GetInitiator() != "coord" {
			t.Fatalf("%s: session %s: %v %v", via, sid, md, err)
		}
	}
	// JSON-RPC session/start: the result and the ack name it, and the
	// connection is attached to it.
	c := e.pdial(t, "coord")
	m := c.call("session/start", map[string]any{"envelope": json.RawMessage(noID)})
	var sr struct {
		SessionID string          `json:"sessionId"`
		Ack       json.RawMessage `json:"ack"`
	}
	ack := &macpv1.Ack{}
	if m.Error != nil || json.Unmarshal(m.Result, &sr) != nil || protojson.Unmarshal(sr.Ack, ack) != nil || !ack.Ok || ack.SessionId != sr.SessionID {
		t.Fatalf("session/start without session_id: %+v %s", m.Error, m.Result)
	}
	check("session/start", sr.SessionID)
	if seq, _ := c.nextEnvelope(sr.SessionID); seq != 1 {
		t.Fatalf("attached at %d", seq)
	}
	// POST /macp/session/start.
	code, b := e.do(t, "POST", "/macp/session/start", "coord", "application/json", []byte(strings.Replace(startJSON("", "alice"), `"session_id":"",`, "", 1)))
	if code != 200 || protojson.Unmarshal(b, ack) != nil || !ack.Ok {
		t.Fatalf("POST /macp/session/start without session_id: %d %s", code, b)
	}
	check("POST /macp/session/start", ack.SessionId)
	// gRPC Send.
	env, cerr := wire.DecodeEnvelope([]byte(strings.Replace(startJSON("", "alice"), `"session_id":"",`, "", 1)))
	if cerr != nil {
		t.Fatal(cerr)
	}
	r, err := e.c.Send(as("coord"), &macpv1.SendRequest{Envelope: env})
	if err != nil || !r.GetAck().GetOk() {
		t.Fatalf("gRPC Send without session_id: %v %v", r, err)
	}
	check("gRPC Send", r.GetAck().GetSessionId())
	// A client-chosen id is kept.
	sid := uuid.NewString()
	e.mustAck(t, "/macp/session/start", "coord", startJSON(sid, "alice"))
	if _, err := e.c.GetSession(as("coord"), &macpv1.GetSessionRequest{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
}

// TestResumeOnlyActiveConnection: session/resume makes its connection the
// only active one of that identity and session on every transport that
// holds a follow: the same identity's SSE follow ends with a final
// "superseded" event, its WebSocket macp/subscribe with
// notifications/macp/detached, its protocol attachment likewise, and its
// SDK Subscribe (gRPC) returns sdk.ErrSuperseded without reconnecting
// (before: SSE and macp/subscribe kept receiving, and the SDK reconnected
// on ABORTED). Another identity's follows are untouched.
func TestResumeOnlyActiveConnection(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice", "bob")
	sse := e.openSSE(t, "alice", sid, 0, nil)
	bobSSE := e.openSSE(t, "bob", sid, 0, nil)
	if _, _, _, err := sse.event(); err != nil { // the SessionStart: the follow is started
		t.Fatal(err)
	}
	ws := e.pdial(t, "alice")
	if m := ws.call("macp/subscribe", map[string]any{"sessionId": sid}); m.Error != nil {
		t.Fatal(m.Error)
	}
	proto := e.pdial(t, "alice")
	proto.resume(sid, 1)
	reconnects := 0
	sub := e.sdkClient(t, "alice").Subscribe(context.Background(), sid, 0,
		sdk.WithReconnectBackoff(time.Millisecond, 10*time.Millisecond), sdk.WithReconnectHook(func(int, error) { reconnects++ }))
	defer sub.Close()
	if _, err := sub.Next(); err != nil { // started
		t.Fatal(err)
	}

	last := e.pdial(t, "alice")
	last.resume(sid, 1) // the only active connection from now on

	for {
		_, typ, data, err := sse.event()
		if err != nil {
			t.Fatalf("SSE ended without the superseded event: %v", err)
		}
		if typ == "superseded" {
			if !strings.Contains(data, `"reason":"superseded:`) {
				t.Fatalf("superseded event %s", data)
			}
			break
		}
	}
	if _, _, _, err := sse.event(); err == nil {
		t.Fatal("the SSE response went on after the superseded event")
	}
	for _, p := range []*pconn{ws, proto} {
		for {
			m := p.notif()
			if m.Method == "notifications/macp/detached" {
				if r := params(t, m).Reason; !strings.HasPrefix(r, sdk.SupersededPrefix) {
					t.Fatalf("detached reason %q", r)
				}
				break
			}
		}
	}
	for {
		_, err := sub.Next()
		if err == nil {
			continue
		}
		if !errors.Is(err, sdk.ErrSuperseded) || reconnects != 0 {
			t.Fatalf("SDK Subscribe ended with %v after %d reconnects", err, reconnects)
		}
		break
	}
	// Bob's follow, and the new attachment, still receive.
	e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, uuid.NewString(), "x"))
	if seq, _ := last.nextEnvelope(sid); seq != 2 {
		t.Fatalf("the resumed attachment got %d", seq)
	}
	for {
		id, typ, _, err := bobSSE.event()
		if err != nil || typ != "" {
			t.Fatalf("bob's SSE: %s %v", typ, err)
		}
		if id == "2" {
			break
		}
	}
}

// A notice from another node of a cluster (runtime Attachments.
// SupersedeLocal, what internal/cluster calls) ends a protocol-mode
// attachment here with notifications/macp/detached: protocol attachments
// are tracked like every other follow.
func TestProtocolAttachmentSupersededByNotice(t *testing.T) {
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	p := e.pdial(t, "alice")
	p.resume(sid, 1)
	if n := e.a.Runtime().Attachments().SupersedeLocal("alice", sid); n != 1 {
		t.Fatalf("%d tracked follows ended, want 1", n)
	}
	for {
		m := p.notif()
		if m.Method == "notifications/macp/detached" {
			if r := params(t, m).Reason; !strings.HasPrefix(r, sdk.SupersededPrefix) {
				t.Fatalf("reason %q", r)
			}
			return
		}
		if m.Method != "notifications/macp/session" {
			t.Fatalf("unexpected %s", m.Method)
		}
	}
}
