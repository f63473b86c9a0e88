package soak_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/conformance"
	"github.com/macpd/macpd/internal/server"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The abuser runs in a child process (this test binary again, running
// TestSoakAbuserProcess) limited to one CPU (GOMAXPROCS=1): an abusive
// client on its own core flooding as fast as it can. In the test's own
// process its busy goroutines would compete with the well-behaved client's
// for the same Go scheduler, which measures the test, not the runtime.

const (
	envAbuserAddr = "MACPD_SOAK_ABUSER_ADDR"
	envAbuserCA   = "MACPD_SOAK_ABUSER_CA"
	abuserStarted = "SOAK-ABUSER-STARTED"
	abuserSeenAll = "SOAK-ABUSER-SEEN-ALL"
	abuserTally   = "SOAK-ABUSER-TALLY "
)

// abuseAnswers are the answers the flood must have drawn (each at least
// once) before the well-behaved client is measured under it: every kind
// of abuse is under way and being refused by its limit. The abuser
// process has one CPU on a machine that may be busy, so how long that
// takes is not fixed; the test waits for it (bounded) rather than for a
// fixed time.
var abuseAnswers = []string{"rate limited", "stream limit", "RESOURCE_EXHAUSTED", "UNAUTHENTICATED", "malformed refused"}

// startAbuser starts the abuser process against addr (TLS verified with
// the CA certificate at caPath) and returns once every kind of abuse in
// abuseAnswers has been answered by its limit; the returned function stops
// it and returns what it got back.
func startAbuser(t *testing.T, addr, caPath string) func() tally {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSoakAbuserProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", envAbuserAddr+"="+addr, envAbuserCA+"="+caPath)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	wait := func(prefix string, within time.Duration) (string, bool) {
		timeout := time.After(within)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					return "", false
				}
				if strings.HasPrefix(l, prefix) {
					return strings.TrimPrefix(l, prefix), true
				}
			case <-timeout:
				return "", false
			}
		}
	}
	if _, ok := wait(abuserStarted, 30*time.Second); !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("abuser process did not start: %s", stderr.String())
	}
	if _, ok := wait(abuserSeenAll, 2*time.Minute); !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the flood did not draw every limit's answer (%v) within 2 minutes: %s", abuseAnswers, stderr.String())
	}
	return func() tally {
		stdin.Close()
		out, ok := wait(abuserTally, 30*time.Second)
		if err := cmd.Wait(); err != nil || !ok {
			t.Fatalf("abuser process: %v %s", err, stderr.String())
		}
		var counts tally
		if err := json.Unmarshal([]byte(out), &counts); err != nil {
			t.Fatal(err)
		}
		return counts
	}
}

// TestSoakAbuserProcess is the abuser process of
// TestSoakAbuseVersusWellBehaved; it does nothing when run on its own.
func TestSoakAbuserProcess(t *testing.T) {
	addr := os.Getenv(envAbuserAddr)
	if addr == "" {
		t.Skip("the abuser process of TestSoakAbuseVersusWellBehaved")
	}
	pem, err := os.ReadFile(os.Getenv(envAbuserCA))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	ab := &abuser{addr: addr, tls: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	for range 3 {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(ab.tls.Clone())))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ab.conns = append(ab.conns, conn)
	}
	stop := ab.start()
	fmt.Println(abuserStarted)
	go func() {
		for !ab.seenAll() {
			time.Sleep(20 * time.Millisecond) // polls its own counters
		}
		fmt.Println(abuserSeenAll)
	}()
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	b, _ := json.Marshal(stop())
	fmt.Println(abuserTally + string(b))
}

// abuser floods the runtime from several goroutines until stopped.
type abuser struct {
	addr  string
	tls   *tls.Config
	conns []*grpc.ClientConn

	mu     sync.Mutex
	counts map[string]int
}

type tally map[string]int

func (c tally) get(k string) int { return c[k] }
func (c tally) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b bytes.Buffer
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, c[k])
	}
	return b.String()
}

// seenAll reports whether every answer in abuseAnswers has come back.
func (ab *abuser) seenAll() bool {
	ab.mu.Lock()
	defer ab.mu.Unlock()
	for _, k := range abuseAnswers {
		if ab.counts[k] == 0 {
			return false
		}
	}
	return true
}

func (ab *abuser) count(k string) {
	ab.mu.Lock()
	ab.counts[k]++
	ab.mu.Unlock()
}

func (ab *abuser) code(err error, ack *macpv1.Ack) {
	switch {
	case err != nil:
		ab.count(errCode(err))
	case ack.GetOk():
		ab.count("accepted")
	case ack.GetError().GetCode() == "RATE_LIMITED" && strings.Contains(ack.GetError().GetMessage(), "per minute"):
		ab.count("rate limited")
	default:
		ab.count(ack.GetError().GetCode())
	}
}

// errCode is an error's MACP code, else its gRPC code
// (RESOURCE_EXHAUSTED for frames over the receive limit).
func errCode(err error) string {
	if c := conformance.CodeFromStatus(err); c != "" {
		return c
	}
	return strings.ToUpper(strcase(status.Code(err).String()))
}

// strcase turns gRPC's "ResourceExhausted" into "Resource_Exhausted".
func strcase(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// start launches the flood; the returned function stops it and returns
// what the abuser got back.
func (ab *abuser) start() func() tally {
	ab.counts = map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token(mallory))
	var wg sync.WaitGroup
	loop := func(f func(ctx context.Context, c macpv1.MACPRuntimeServiceClient)) {
		for _, conn := range ab.conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := macpv1.NewMACPRuntimeServiceClient(conn)
				for ctx.Err() == nil {
					f(ctx, c)
				}
			}()
		}
	}
	payload := func(p proto.Message) []byte { b, _ := proto.Marshal(p); return b }
	// SessionStarts and messages far over the rates.
	loop(func(ctx context.Context, c macpv1.MACPRuntimeServiceClient) {
		env := &macpv1.Envelope{MacpVersion: "1.0", Mode: mode, MessageType: "SessionStart", MessageId: "m0", SessionId: uuid.NewString(),
			TimestampUnixMs: time.Now().UnixMilli(), Payload: payload(&macpv1.SessionStartPayload{Intent: "flood",
				Participants: []string{goodPeer(0)}, ModeVersion: "1.0.0", ConfigurationVersion: "cfg-1", TtlMs: 60000})}
		r, err := c.Send(ctx, &macpv1.SendRequest{Envelope: env})
		ab.code(err, r.GetAck())
	})
	loop(func(ctx context.Context, c macpv1.MACPRuntimeServiceClient) {
		env := &macpv1.Envelope{MacpVersion: "1.0", MessageType: "Signal", MessageId: uuid.NewString(),
			TimestampUnixMs: time.Now().UnixMilli(), Payload: payload(&macpv1.SignalPayload{SignalType: "spam", Data: bytes.Repeat([]byte{1}, 512)})}
		r, err := c.Send(ctx, &macpv1.SendRequest{Envelope: env})
		ab.code(err, r.GetAck())
	})
	// Frames over the receive limit (refused before decoding).
	huge := bytes.Repeat([]byte{7}, 1<<20+128<<10) // just over the receive limit (payload limit + 64 KiB)
	loop(func(ctx context.Context, c macpv1.MACPRuntimeServiceClient) {
		env := &macpv1.Envelope{MacpVersion: "1.0", Mode: mode, MessageType: "Proposal", MessageId: "x", SessionId: uuid.NewString(), Payload: huge}
		r, err := c.Send(ctx, &macpv1.SendRequest{Envelope: env})
		ab.code(err, r.GetAck())
	})
	// Calls without credentials and with a bad token.
	loop(func(ctx context.Context, c macpv1.MACPRuntimeServiceClient) {
		bare, cancel := context.WithCancel(context.Background())
		defer context.AfterFunc(ctx, cancel)()
		_, err := c.ListSessions(bare, &macpv1.ListSessionsRequest{})
		ab.code(err, nil)
		bad := metadata.AppendToOutgoingContext(bare, "authorization", "Bearer not-a-token-at-all-0000")
		_, err = c.GetSession(bad, &macpv1.GetSessionRequest{SessionId: uuid.NewString()})
		ab.code(err, nil)
		cancel()
	})
	// More streams than allowed (MACP_MAX_STREAMS_PER_IDENTITY, 256), left
	// idle: opened by several goroutines, spread over the connections (each
	// takes at most MACP_MAX_CONCURRENT_STREAMS, 100).
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; ctx.Err() == nil; i++ {
				c := macpv1.NewMACPRuntimeServiceClient(ab.conns[i%len(ab.conns)])
				s, err := c.WatchSessions(ctx, &macpv1.WatchSessionsRequest{})
				if err == nil {
					var md metadata.MD
					if md, err = s.Header(); err == nil && len(md.Get(server.HeaderWatchSubscribed)) == 0 {
						_, err = s.Recv() // refused: a trailers-only answer
					}
				}
				if err != nil {
					if errCode(err) == "RATE_LIMITED" {
						ab.count("stream limit")
					} else {
						ab.code(err, nil)
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				ab.count("idle stream")
			}
		}()
	}
	// Invalid protobuf over raw HTTP/2.
	wg.Add(1)
	go func() {
		defer wg.Done()
		cfg := ab.tls.Clone()
		cfg.NextProtos = []string{"h2"}
		tr := &http2.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		body := make([]byte, 5+64)
		binary.BigEndian.PutUint32(body[1:], 64)
		for i := 5; i < len(body); i++ {
			body[i] = 0xff
		}
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+ab.addr+"/macp.v1.MACPRuntimeService/Send", bytes.NewReader(body))
			req.Header.Set("content-type", "application/grpc")
			req.Header.Set("te", "trailers")
			req.Header.Set("authorization", "Bearer "+token(mallory))
			resp, err := tr.RoundTrip(req)
			if err != nil {
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if st := resp.Header.Get("grpc-status") + resp.Trailer.Get("grpc-status"); st != "" && st != "0" {
				ab.count("malformed refused")
			}
		}
	}()
	// Idle TCP connections that never handshake.
	wg.Add(1)
	go func() {
		defer wg.Done()
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for ctx.Err() == nil && len(held) < 50 {
			if c, err := net.Dial("tcp", ab.addr); err == nil {
				held = append(held, c)
				ab.count("idle connection")
			}
			time.Sleep(20 * time.Millisecond)
		}
		<-ctx.Done()
	}()
	return func() tally {
		cancel()
		wg.Wait()
		ab.mu.Lock()
		defer ab.mu.Unlock()
		return tally(ab.counts)
	}
}
