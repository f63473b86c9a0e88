package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestOutsidePythonResume drives protocol-mode sessions from Python's
// websockets library: unknown method (-32601), session/resume from the
// start, a dropped connection, session/resume from the cut on a new one,
// session/end. Every envelope arrives once, in order, byte-equal to
// storage.
func TestOutsidePythonResume(t *testing.T) {
	py := requireTool(t, "/usr/bin/python3", "-c", "import websockets")
	e := startApp(t, testConfig())
	sid := e.startSession(t, "coord", "alice")
	const total = 8
	for i := 2; i <= total; i++ {
		e.mustAck(t, "/macp/envelope", "coord", proposalJSON(sid, fmt.Sprint("m", i), fmt.Sprint("p", i)))
	}
	cmd := exec.Command(py, "testdata/ws_resume_client.py", "ws://"+e.a.HTTPAddr()+"/macp/ws", "alice", sid, "3", fmt.Sprint(total))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ws_resume_client.py: %v\n%s\n%s", err, out.String(), errOut.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("ws_resume_client.py did not finish:\n%s\n%s", out.String(), errOut.String())
	}
	var seqs []uint64
	var envs [][]byte
	type result struct {
		Catchup        bool   `json:"catchup"`
		Resumed        bool   `json:"resumed"`
		Ended          bool   `json:"ended"`
		SessionEventID uint64 `json:"sessionEventId"`
	}
	results := map[int]result{}
	unknown := 0
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m struct {
			ID     int             `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code int `json:"code"`
			} `json:"error"`
			Params struct {
				SessionEventID float64         `json:"sessionEventId"`
				Envelope       json.RawMessage `json:"envelope"`
			} `json:"params"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		switch {
		case m.Method == "notifications/macp/envelope":
			seqs = append(seqs, uint64(m.Params.SessionEventID))
			envs = append(envs, m.Params.Envelope)
		case m.ID == 1 && m.Error != nil:
			unknown = m.Error.Code
		case m.ID != 0:
			var r result
			if err := json.Unmarshal(m.Result, &r); err != nil {
				t.Fatalf("result %s: %v", m.Result, err)
			}
			results[m.ID] = r
		}
	}
	if unknown != -32601 {
		t.Fatalf("unknown method answered %d:\n%s", unknown, out.String())
	}
	if r := results[2]; !r.Resumed || !r.Catchup || r.SessionEventID != 0 {
		t.Fatalf("first resume %+v", r)
	}
	if r := results[3]; !r.Resumed || !r.Catchup || r.SessionEventID != 3 || !results[4].Ended {
		t.Fatalf("results %v", results)
	}
	checkStream(t, e, sid, "python websockets resume", seqs, envs)
}
