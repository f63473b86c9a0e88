// Command handoff transfers a responsibility between Go agents with
// Handoff Mode (RFC-MACP-0010) against a local macpd, and exits non-zero
// unless the session resolves with the responsibility accepted by the
// second target.
//
// The owner (the initiator) offers the on-call pager to bob with context;
// bob is away and declines; the owner's agent then offers it to carol with
// the same context, carol accepts, and the owner commits handoff.accepted
// once its HandoffProjection says a positive outcome is eligible.
//
//	MACP_ALLOW_INSECURE=1 go run ./cmd/macpd &
//	go run ./examples/handoff             # or -addr host:port, MACP_ADDR
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	handoffv1 "github.com/macpd/macpd/gen/macp/modes/handoff/v1"
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
		log.Fatalf("handoff example FAILED: %v", err)
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

// willing says which targets accept.
var willing = map[string]bool{"bob": false, "carol": true}

func run(ctx context.Context, addr string) error {
	oc, err := dial(ctx, addr, "owner")
	if err != nil {
		return err
	}
	defer oc.Close()
	if _, err := oc.Initialize(ctx); err != nil {
		return fmt.Errorf("initialize (is macpd running at %s with MACP_ALLOW_INSECURE=1?): %w", addr, err)
	}
	h := oc.Handoff("")
	if _, err := h.Start(ctx, "hand over the on-call pager", []string{"owner", "bob", "carol"}, 5*time.Minute); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	fmt.Println("session", h.ID)

	g, gctx := errgroup.WithContext(ctx)
	for id, yes := range willing {
		c, err := dial(ctx, addr, id)
		if err != nil {
			return err
		}
		defer c.Close()
		// Each target answers once the offer's context arrived (context
		// must precede the answer, RFC-MACP-0010 §2.1).
		tp := sdk.NewHandoffProjection()
		a := sdk.NewAgent(c, h.ID, sdk.WithSelf(id), sdk.WithProjection(tp))
		a.Handle(sdk.TypeHandoffContext, func(ctx context.Context, m *sdk.Message) error {
			var hc handoffv1.HandoffContextPayload
			if err := m.Decode(&hc); err != nil {
				return err
			}
			o := tp.Offer(hc.HandoffId)
			if o == nil || o.Target != id || o.Disposition != sdk.OfferPending {
				return nil // an offer to someone else
			}
			me := c.Handoff(h.ID)
			if yes {
				_, err := me.Accept(ctx, o.ID, "I have it")
				return err
			}
			_, err := me.Decline(ctx, o.ID, "on vacation")
			return err
		})
		g.Go(func() error { return a.Run(gctx) })
	}

	proj := sdk.NewHandoffProjection()
	oa := sdk.NewAgent(oc, h.ID, sdk.WithProjection(proj))
	next := []string{"carol"} // whom to ask after a decline
	respond := func(ctx context.Context, m *sdk.Message) error {
		fmt.Printf("%s from %s: phase %s\n", m.Type(), m.Sender(), proj.Phase())
		if pos, _ := proj.Eligible(); pos {
			o := proj.AcceptedOffer()
			_, err := h.CommitOutcome(ctx, "handoff.accepted", true, o.Target+" accepted "+o.Scope)
			return err
		}
		if proj.Phase() == sdk.PhaseDeclined && len(next) > 0 {
			target := next[0]
			next = next[1:]
			id := fmt.Sprintf("h%d", len(proj.Offers)+1)
			if _, err := h.Offer(ctx, id, target, "on-call pager", "bob declined"); err != nil {
				return err
			}
			_, err := h.Context(ctx, id, "text/plain", []byte("runbook: https://wiki.example/oncall"))
			return err
		}
		return nil
	}
	oa.Handle(sdk.TypeHandoffAccept, respond).Handle(sdk.TypeHandoffDecline, respond)
	g.Go(func() error { return oa.Run(gctx) })

	if _, err := h.Offer(ctx, "h1", "bob", "on-call pager", "going on leave"); err != nil {
		return fmt.Errorf("offer: %w", err)
	}
	if _, err := h.Context(ctx, "h1", "text/plain", []byte("runbook: https://wiki.example/oncall")); err != nil {
		return fmt.Errorf("context: %w", err)
	}
	if err := g.Wait(); err != nil {
		return err
	}

	md, err := h.Metadata(ctx)
	if err != nil {
		return err
	}
	if md.GetState() != macpv1.SessionState_SESSION_STATE_RESOLVED || proj.Owner != "carol" || len(proj.Offers) != 2 ||
		proj.Offers[0].Disposition != sdk.OfferDeclined || proj.Offers[1].Contexts != 1 || len(proj.Contexts) != 2 {
		return fmt.Errorf("session %v, owner %q, offers %+v", md.GetState(), proj.Owner, proj.Offers)
	}
	fmt.Printf("RESOLVED: %s; the pager is now %s's\n", proj.Commitment.GetAction(), proj.Owner)
	return nil
}
