package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/clikit"
	"github.com/macpd/macpd/internal/snapshot/snapshotio"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/sdk"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func init() {
	commands = append(commands,
		cmd("suspend", "SESSION_ID [--reason TEXT]",
			"suspend an OPEN session (initiator only) and print the ack; its session_state is the state reached (SUSPENDED)", (*cli).suspend),
		cmd("resume", "SESSION_ID [--reason TEXT]",
			"resume a SUSPENDED session (initiator only) and print the ack; its session_state is the state reached (OPEN)", (*cli).resume),
		cmd("commitment-hash", "--payload-json JSON | --payload-file FILE | SESSION_ID [--seq N] [--data-dir DIR]",
			"print the RFC-MACP-0013 commitment hash of a Commitment payload, or of a session's Commitment, as the {session_id, commitment_hash} reference a superseding Commitment carries", (*cli).commitmentHash),
	)
}

func (c *cli) suspend(args []string) error {
	return c.control(args, "why the session is suspended", (*sdk.Client).SuspendSession)
}

func (c *cli) resume(args []string) error {
	return c.control(args, "why the session is resumed", (*sdk.Client).ResumeSession)
}

// control runs one lifecycle RPC (suspend, resume, cancel) on SESSION_ID
// and prints its ack, whose session_state is the state reached.
func (c *cli) control(args []string, reasonHelp string, call func(*sdk.Client, context.Context, string, string) (*macpv1.Ack, error)) error {
	reason := c.FS.String("reason", "", reasonHelp)
	pos, err := c.Parse(args, 1)
	if err != nil {
		return err
	}
	return c.Call(func(ctx context.Context, cl *sdk.Client) error {
		return c.printAck(call(cl, ctx, pos[0], *reason))
	})
}

// commitmentHash hashes a payload given on the command line or in a file,
// or the Commitment of a session read from a running runtime (a passive
// subscription from sequence 0) or, with --data-dir, from a stopped
// macpd's data directory.
func (c *cli) commitmentHash(args []string) error {
	payloadJSON := c.FS.String("payload-json", "", "a CommitmentPayload as JSON with proto field names")
	payloadFile := c.FS.String("payload-file", "", `a file holding a CommitmentPayload as JSON, or an object whose "payload" member is one (an RFC-MACP-0013 vector)`)
	seq := c.FS.Uint64("seq", 0, "the sequence number of the session's Commitment (0: the Commitment that resolved it)")
	dataDir := c.FS.String("data-dir", "", "read the session from this data directory offline instead of a running runtime (stop macpd first)")
	pos, err := c.Parse(args, -1)
	if err != nil {
		return err
	}
	given := 0
	for _, b := range []bool{*payloadJSON != "", *payloadFile != "", len(pos) > 0} {
		if b {
			given++
		}
	}
	switch {
	case given != 1 || len(pos) > 1:
		return clikit.Usagef("name exactly one of --payload-json, --payload-file and one SESSION_ID")
	case len(pos) == 0 && (*seq != 0 || *dataDir != ""):
		return clikit.Usagef("--seq and --data-dir select a session's Commitment: name the SESSION_ID")
	}
	ref := &macpv1.CommitmentRef{}
	var p *macpv1.CommitmentPayload
	switch {
	case *payloadJSON != "":
		if p, err = parseCommitment([]byte(*payloadJSON)); err != nil {
			return clikit.Usagef("--payload-json: %v", err)
		}
	case *payloadFile != "":
		b, err := os.ReadFile(*payloadFile)
		if err != nil {
			return clikit.Usagef("--payload-file: %v", err)
		}
		if p, err = parseCommitment(b); err != nil {
			return clikit.Usagef("--payload-file %s: %v", *payloadFile, err)
		}
	default:
		ref.SessionId = pos[0]
		var env *macpv1.Envelope
		if *dataDir != "" {
			env, err = c.storedCommitment(*dataDir, pos[0], *seq)
		} else {
			err = c.Call(func(ctx context.Context, cl *sdk.Client) error {
				var err error
				env, err = liveCommitment(ctx, cl, pos[0], *seq)
				return err
			})
		}
		if err != nil {
			return err
		}
		p = &macpv1.CommitmentPayload{}
		if err := proto.Unmarshal(env.GetPayload(), p); err != nil {
			return fmt.Errorf("the Commitment of session %s does not decode: %v", pos[0], err)
		}
	}
	if ref.CommitmentHash, err = sdk.CommitmentHash(p); err != nil {
		return err
	}
	return c.print(ref)
}

// parseCommitment reads a CommitmentPayload from JSON, or from the
// "payload" member of an RFC-MACP-0013 vector.
func parseCommitment(b []byte) (*macpv1.CommitmentPayload, error) {
	var wrapper struct {
		Payload json.RawMessage `json:"payload"`
	}
	if json.Unmarshal(b, &wrapper) == nil && len(wrapper.Payload) > 0 {
		b = wrapper.Payload
	}
	p := &macpv1.CommitmentPayload{}
	if err := protojson.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("not a macp.v1.CommitmentPayload: %v", err)
	}
	return p, nil
}

// pickCommitment returns the envelope at seq (0: the first Commitment).
func pickCommitment(sessionID string, seq uint64, next func() (uint64, *macpv1.Envelope, error)) (*macpv1.Envelope, error) {
	for {
		n, env, err := next()
		if errors.Is(err, io.EOF) {
			if seq != 0 {
				return nil, fmt.Errorf("session %s has no envelope at sequence %d", sessionID, seq)
			}
			return nil, fmt.Errorf("session %s has no Commitment", sessionID)
		}
		if err != nil {
			return nil, err
		}
		if seq != 0 && n != seq {
			continue
		}
		if env.GetMessageType() != sdk.TypeCommitment {
			if seq != 0 {
				return nil, fmt.Errorf("sequence %d of session %s is a %s, not a Commitment", seq, sessionID, env.GetMessageType())
			}
			continue
		}
		return env, nil
	}
}

// liveCommitment reads the Commitment from a running runtime. A session
// that is still OPEN or SUSPENDED has no Commitment yet unless --seq names
// an envelope already accepted, so the state is checked first rather than
// waiting on a live subscription.
func liveCommitment(ctx context.Context, cl *sdk.Client, sessionID string, seq uint64) (*macpv1.Envelope, error) {
	md, err := cl.GetSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if md.GetState() != macpv1.SessionState_SESSION_STATE_RESOLVED {
		return nil, fmt.Errorf("session %s is %s: only a RESOLVED session has a Commitment", sessionID, md.GetState())
	}
	after := uint64(0)
	if seq > 0 {
		after = seq - 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub := cl.Subscribe(ctx, sessionID, after)
	defer sub.Close()
	return pickCommitment(sessionID, seq, func() (uint64, *macpv1.Envelope, error) {
		ev, err := sub.Next()
		return ev.Seq, ev.Envelope, err
	})
}

// storedCommitment reads the Commitment from a data directory.
func (c *cli) storedCommitment(dir, sessionID string, seq uint64) (*macpv1.Envelope, error) {
	st, _, err := c.openDataDir(dir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	recs, err := snapshotio.StoreSource{Store: st}.Records(c.Ctx, sessionID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("SESSION_NOT_FOUND: session %s is not in %s", sessionID, dir)
	}
	if err != nil {
		return nil, err
	}
	i := 0
	return pickCommitment(sessionID, seq, func() (uint64, *macpv1.Envelope, error) {
		if i == len(recs) {
			return 0, nil, io.EOF
		}
		r := recs[i]
		i++
		return r.Seq, r.Envelope, nil
	})
}
