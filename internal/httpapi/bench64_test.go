package httpapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	decisionv1 "github.com/macpd/macpd/gen/macp/modes/decision/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/proto"
)

// bench64 is the concurrency of BenchmarkTransports64.
const bench64 = 64

// BenchmarkTransports64 (issue 33): 64 sessions, each with one client, in
// the same run and against the same runtime (in-memory store):
//
//   - grpc64: unary gRPC Send, 64 concurrent callers, each waiting for its Ack;
//   - http64: POST /macp/envelope, 64 concurrent keep-alive clients, each
//     waiting for its Ack;
//   - ws64: WebSocket macp/send on 64 connections, each pipelined (the
//     client writes without waiting; the server admits up to its window
//     per connection and answers by id);
//   - wsbin64: the same with the macp.v1+proto subprotocol (protobuf send
//     and ack frames).
//
// b.N envelopes per transport, in six rounds whose order rotates.
// Reported: each rate and the ratios ws64/grpc64, wsbin64/grpc64 and
// http64/grpc64.
func BenchmarkTransports64(b *testing.B) {
	cfg := testConfig()
	cfg.Limits.MaxConnectionsPerAddr = 1024 // 64 WebSocket and up to 128 HTTP/1.1 connections from 127.0.0.1
	e := startApp(b, cfg)
	sids := make([]string, bench64)
	for i := range sids {
		sids[i] = e.startSession(b, "coord", "alice")
	}
	payload := func(id string) []byte {
		p, _ := proto.Marshal(&decisionv1.ProposalPayload{ProposalId: id, Option: "option " + id, Rationale: strings.Repeat("r", 64)})
		return p
	}
	envJSON := func(sid, id string) []byte {
		return []byte(fmt.Sprintf(`{"macp_version":"1.0","mode":%q,"message_type":"Proposal","message_id":%q,"session_id":%q,"timestamp_unix_ms":"%d","payload":%q}`,
			decisionMode, id, sid, time.Now().UnixMilli(), base64.StdEncoding.EncodeToString(payload(id))))
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: bench64, MaxConnsPerHost: bench64}}
	var seq atomic.Int64
	// run gives each of the 64 workers n/64 envelopes (its session's).
	run := func(n int, work func(w int, sid string, k int) error) time.Duration {
		var wg sync.WaitGroup
		errs := make(chan error, bench64)
		t0 := time.Now()
		for w := range bench64 {
			k := n / bench64
			if w < n%bench64 {
				k++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := work(w, sids[w], k); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		el := time.Since(t0)
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		return el
	}
	grpcWork := func(_ int, sid string, k int) error {
		for range k {
			id := fmt.Sprintf("g-%d", seq.Add(1))
			r, err := e.c.Send(as("coord"), &macpv1.SendRequest{Envelope: &macpv1.Envelope{MacpVersion: "1.0", Mode: decisionMode,
				MessageType: "Proposal", MessageId: id, SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: payload(id)}})
			if err != nil || !r.Ack.Ok {
				return fmt.Errorf("grpc: %v %v", r, err)
			}
		}
		return nil
	}
	httpWork := func(_ int, sid string, k int) error {
		for range k {
			req, _ := http.NewRequest("POST", e.base+"/macp/envelope", bytes.NewReader(envJSON(sid, fmt.Sprintf("h-%d", seq.Add(1)))))
			req.Header.Set("Authorization", "Bearer coord")
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("http: %d %s", resp.StatusCode, body)
			}
		}
		return nil
	}
	wsConns := make([]*websocket.Conn, bench64)
	for i := range wsConns {
		wsConns[i] = e.dialWS(b, "coord")
		defer wsConns[i].CloseNow()
	}
	wsWork := func(w int, sid string, k int) error {
		c := wsConns[w]
		werr := make(chan error, 1)
		go func() {
			for i := range k {
				msg := append(append([]byte(`{"jsonrpc":"2.0","id":`+fmt.Sprint(i)+`,"method":"macp/send","params":{"envelope":`), envJSON(sid, fmt.Sprintf("w-%d", seq.Add(1)))...), "}}"...)
				if err := c.Write(context.Background(), websocket.MessageText, msg); err != nil {
					werr <- err
					return
				}
			}
			werr <- nil
		}()
		for range k {
			_, resp, err := c.Read(context.Background())
			if err != nil {
				return err
			}
			if !bytes.Contains(resp, []byte(`"ok":true`)) {
				return fmt.Errorf("ws: %s", resp)
			}
		}
		return <-werr
	}
	wsbConns := make([]*websocket.Conn, bench64)
	for i := range wsbConns {
		wsbConns[i] = e.dialWSProto(b, "coord")
		defer wsbConns[i].CloseNow()
	}
	wsbWork := func(w int, sid string, k int) error {
		c := wsbConns[w]
		werr := make(chan error, 1)
		go func() {
			for i := range k {
				id := fmt.Sprintf("b-%d", seq.Add(1))
				eb, _ := proto.Marshal(&macpv1.Envelope{MacpVersion: "1.0", Mode: decisionMode, MessageType: "Proposal", MessageId: id,
					SessionId: sid, TimestampUnixMs: time.Now().UnixMilli(), Payload: payload(id)})
				if err := c.Write(context.Background(), websocket.MessageBinary, sendFrame(uint64(i), eb)); err != nil {
					werr <- err
					return
				}
			}
			werr <- nil
		}()
		for range k {
			_, resp, err := c.Read(context.Background())
			if err != nil {
				return err
			}
			ack := &macpv1.Ack{}
			if len(resp) < 9 || resp[0] != 0x02 || proto.Unmarshal(resp[9:], ack) != nil || !ack.Ok {
				return fmt.Errorf("wsb: %x", resp)
			}
		}
		return <-werr
	}
	b.ResetTimer()
	const rounds = 6
	var tg, th, tw, tb time.Duration
	per := max(b.N/rounds, bench64)
	for r := range rounds {
		steps := []func(){
			func() { tg += run(per, grpcWork) },
			func() { th += run(per, httpWork) },
			func() { tw += run(per, wsWork) },
			func() { tb += run(per, wsbWork) },
		}
		for i := range steps {
			steps[(i+r)%len(steps)]()
		}
	}
	b.StopTimer()
	total := float64(per * rounds)
	g, h, w, wb := total/tg.Seconds(), total/th.Seconds(), total/tw.Seconds(), total/tb.Seconds()
	b.ReportMetric(g, "grpc64-env/s")
	b.ReportMetric(h, "http64-env/s")
	b.ReportMetric(w, "ws64-env/s")
	b.ReportMetric(h/g, "http64/grpc64")
	b.ReportMetric(w/g, "ws64/grpc64")
	b.ReportMetric(wb, "wsbin64-env/s")
	b.ReportMetric(wb/g, "wsbin64/grpc64")
}
