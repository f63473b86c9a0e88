// Command task hands a task from one Go agent to another with Task Mode
// (RFC-MACP-0009) against a local macpd, and exits non-zero unless the
// session resolves task.completed with the worker's output.
//
// The requester starts the session and sends a TaskRequest addressed to
// the worker. The worker is an agent: it accepts the task, reports
// progress twice and completes it with an output. The requester's agent
// keeps a TaskProjection and commits task.completed when the projection
// says a positive outcome is eligible (task.failed if the worker fails).
//
//	MACP_ALLOW_INSECURE=1 go run ./cmd/macpd &
//	go run ./examples/task                # or -addr host:port, MACP_ADDR
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	taskv1 "github.com/macpd/macpd/gen/macp/modes/task/v1"
	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/sdk"
	"golang.org/x/sync/errgroup"
)

func main() {
	addr := flag.String("addr", envOr("MACP_ADDR", "127.0.0.1:50051"), "macpd gRPC address (plaintext, dev identities: MACP_ALLOW_INSECURE=1)")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *addr); err != nil {
		log.Fatalf("task example FAILED: %v", err)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func dial(ctx context.Context, addr, id string) (*sdk.Client, error) {
	return sdk.Dial(ctx, addr, sdk.WithInsecure(), sdk.WithBearer(id), sdk.WithRetry(5))
}

func run(ctx context.Context, addr string) error {
	req, err := dial(ctx, addr, "requester")
	if err != nil {
		return err
	}
	defer req.Close()
	if _, err := req.Initialize(ctx); err != nil {
		return fmt.Errorf("initialize (is macpd running at %s with MACP_ALLOW_INSECURE=1?): %w", addr, err)
	}
	wc, err := dial(ctx, addr, "worker")
	if err != nil {
		return err
	}
	defer wc.Close()

	ts := req.Task("")
	if _, err := ts.Start(ctx, "summarize the incident", []string{"worker"}, 5*time.Minute); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	fmt.Println("session", ts.ID)

	g, gctx := errgroup.WithContext(ctx)

	// The worker: accept, report progress, complete.
	worker := sdk.NewAgent(wc, ts.ID, sdk.WithSelf("worker"))
	worker.Handle(sdk.TypeTaskRequest, func(ctx context.Context, m *sdk.Message) error {
		var r taskv1.TaskRequestPayload
		if err := m.Decode(&r); err != nil {
			return err
		}
		w := wc.Task(ts.ID)
		if _, err := w.Accept(ctx, r.TaskId, "on it"); err != nil {
			return err
		}
		for _, p := range []float64{0.5, 0.9} {
			if _, err := w.Update(ctx, r.TaskId, "working", p, fmt.Sprintf("%.0f%% done", p*100)); err != nil {
				return err
			}
		}
		summary := strings.ToUpper(string(r.Input))
		_, err := w.Complete(ctx, r.TaskId, []byte(summary), "summary attached")
		return err
	})
	g.Go(func() error { return worker.Run(gctx) })

	// The requester: commit once the outcome is eligible.
	proj := sdk.NewTaskProjection()
	ra := sdk.NewAgent(req, ts.ID, sdk.WithProjection(proj))
	ra.HandleAny(func(ctx context.Context, m *sdk.Message) error {
		fmt.Printf("%-13s from %-9s status=%s progress=%.1f\n", m.Type(), m.Sender(), proj.Status(), proj.Progress())
		switch pos, neg := proj.Eligible(); {
		case pos:
			_, err := ts.CommitOutcome(ctx, "task.completed", true, "the worker completed the task")
			return err
		case neg:
			_, err := ts.CommitOutcome(ctx, "task.failed", false, "the task failed")
			return err
		}
		return nil
	})
	g.Go(func() error { return ra.Run(gctx) })

	if _, err := ts.Request(ctx, &taskv1.TaskRequestPayload{TaskId: "t-42", Title: "incident summary",
		Instructions: "summarize the log", RequestedAssignee: "worker", Input: []byte("disk full on db-3")}); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	if err := g.Wait(); err != nil {
		return err
	}

	md, err := ts.Metadata(ctx)
	if err != nil {
		return err
	}
	if md.GetState() != macpv1.SessionState_SESSION_STATE_RESOLVED || proj.Commitment.GetAction() != "task.completed" ||
		proj.Report == nil || string(proj.Report.Output) != "DISK FULL ON DB-3" || proj.Report.Assignee != "worker" {
		return fmt.Errorf("session %v, commitment %v, report %+v", md.GetState(), proj.Commitment, proj.Report)
	}
	fmt.Printf("RESOLVED: %s by %s, output %q\n", proj.Commitment.GetAction(), proj.Report.Assignee, proj.Report.Output)
	return nil
}
