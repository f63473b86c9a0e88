package benchrec

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
)

// StartResult is one macpd start on a generated directory.
type StartResult struct {
	// ServingSeconds is from exec to the "macpd serving" log line (store
	// open, recovery, listener bound); AnsweredSeconds to the first
	// GetSession of the probe session answered ok over gRPC.
	ServingSeconds  float64 `json:"serving_s"`
	AnsweredSeconds float64 `json:"answered_s"`
	// RecoverySeconds is the "took" of macpd's "recovered" log line (list
	// the open sessions, or every stored one in a strict boot, and replay
	// the open ones); 0 if it logged none.
	RecoverySeconds float64 `json:"recovery_s"`
	OpenSessions    int     `json:"open_sessions"`
	// TerminalOnDisk is counted by a strict boot only (MACP_STRICT_RECOVERY:
	// the default boot does not list terminal sessions); 0 otherwise.
	TerminalOnDisk int `json:"terminal_sessions_on_disk"`
	Quarantined    int `json:"quarantined"`
	// CPUSeconds is the user+system CPU time macpd used up to the answer.
	CPUSeconds float64 `json:"cpu_s"`
	// RSSBytes and HWMBytes are VmRSS and VmHWM (peak) of the macpd
	// process right after the answer.
	RSSBytes int64 `json:"rss_bytes"`
	HWMBytes int64 `json:"hwm_bytes"`
}

// MeasureConfig describes a startup measurement.
type MeasureConfig struct {
	// Macpd is the macpd binary.
	Macpd string
	// Dir is a directory written by Generate.
	Dir string
	// Timeout bounds one start (default 10 minutes).
	Timeout time.Duration
	// Env is extra environment for macpd (KEY=VALUE), after the
	// benchmark's own settings; it must not set MACP_BIND_ADDR.
	Env []string
	// Log, if not nil, receives macpd's log.
	Log io.Writer
}

// MeasureStart starts macpd on cfg.Dir once (bound to a free port on
// 127.0.0.1, plaintext, dev identities), waits until it serves and answers
// a GetSession for man.ProbeSession, reads its CPU time and memory from
// /proc, and stops it with SIGTERM.
func MeasureStart(ctx context.Context, cfg MeasureConfig, man *Manifest) (*StartResult, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	for _, kv := range cfg.Env {
		if strings.HasPrefix(kv, "MACP_BIND_ADDR=") {
			return nil, errors.New("benchrec: macpd binds 127.0.0.1:0 here; do not set MACP_BIND_ADDR")
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	cmd := exec.Command(cfg.Macpd)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MACP_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"MACP_DATA_DIR="+cfg.Dir,
		"MACP_BIND_ADDR=127.0.0.1:0", // a free port, never the default 50051
		"MACP_ALLOW_INSECURE=1",
		"MACP_LOG_FORMAT=json",
		"MACP_LOG_LEVEL=info",
	)
	cmd.Env = append(env, cfg.Env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// The reader below owns the stderr pipe (and cfg.Log) until macpd
	// closes its end; Wait runs only after that, as os/exec requires, so
	// cfg.Log is complete and no longer written when MeasureStart returns.
	readerDone := make(chan struct{})
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		var killed error
		select {
		case <-readerDone:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-readerDone
			killed = errors.New("benchrec: macpd did not stop within 30s of SIGTERM; killed")
		}
		if err := cmd.Wait(); killed == nil {
			return err
		}
		return killed
	}
	defer stop()

	res := &StartResult{}
	lines := make(chan map[string]any, 64)
	go func() {
		defer close(readerDone)
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			if cfg.Log != nil {
				fmt.Fprintln(cfg.Log, sc.Text())
			}
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				select {
				case lines <- m:
				default: // nobody reads once serving; keep draining the pipe
				}
			}
		}
	}()
	var addr string
	for addr == "" {
		select {
		case m, ok := <-lines:
			if !ok {
				return nil, errors.New("benchrec: macpd exited before serving (see its log)")
			}
			switch m["msg"] {
			case "recovered":
				res.OpenSessions = intField(m, "open_sessions")
				res.TerminalOnDisk = intField(m, "terminal_sessions_on_disk")
				res.Quarantined = intField(m, "quarantined")
				if d, err := time.ParseDuration(fmt.Sprint(m["took"])); err == nil {
					res.RecoverySeconds = d.Seconds()
				} else if f, ok := m["took"].(float64); ok { // slog JSON durations are nanoseconds
					res.RecoverySeconds = f / 1e9
				}
			case "macpd serving":
				addr = fmt.Sprint(m["addr"])
				res.ServingSeconds = time.Since(start).Seconds()
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("benchrec: macpd did not serve: %w", ctx.Err())
		}
	}
	if err := probe(ctx, addr, man); err != nil {
		return nil, err
	}
	res.AnsweredSeconds = time.Since(start).Seconds()
	pid := cmd.Process.Pid
	if res.CPUSeconds, err = ProcCPU(pid); err != nil {
		return nil, err
	}
	if res.RSSBytes, res.HWMBytes, err = procMem(pid); err != nil {
		return nil, err
	}
	if err := stop(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return nil, err
		}
		return nil, fmt.Errorf("benchrec: macpd exited with %v on SIGTERM", err)
	}
	return res, nil
}

// probe asks for the probe session, as its initiator, until it is answered.
func probe(ctx context.Context, addr string, man *Manifest) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	cl := macpv1.NewMACPRuntimeServiceClient(conn)
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+man.ProbeInitiator)
	for {
		resp, err := cl.GetSession(ctx, &macpv1.GetSessionRequest{SessionId: man.ProbeSession})
		if err == nil {
			if got := resp.GetMetadata().GetSessionId(); got != man.ProbeSession {
				return fmt.Errorf("benchrec: GetSession answered for %q, not %q", got, man.ProbeSession)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("benchrec: GetSession %s: %w", man.ProbeSession, err)
		case <-time.After(time.Millisecond):
		}
	}
}

func intField(m map[string]any, k string) int {
	f, _ := m[k].(float64)
	return int(f)
}

// ProcCPU returns utime+stime of pid in seconds (/proc/PID/stat, clock
// ticks of 1/100 s).
func ProcCPU(pid int) (float64, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields count from ")".
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("benchrec: short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	stt, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return (ut + stt) / 100, nil
}

// procMem returns VmRSS and VmHWM of pid in bytes.
func procMem(pid int) (rss, hwm int64, err error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		fs := strings.Fields(v) // "123456 kB"
		if len(fs) != 2 || fs[1] != "kB" {
			return 0, 0, fmt.Errorf("benchrec: unexpected %s line %q", k, sc.Text())
		}
		n, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			hwm = n << 10
		}
	}
	return rss, hwm, sc.Err()
}
