package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/proto"
)

// EventStream is a gap-free, self-resuming stream of one session's
// accepted envelopes: Next returns them in order with their sequence
// numbers, io.EOF after the session ended and everything was delivered,
// and the context's error once the stream's context ends or Close is
// called. [*Subscription] is the gRPC implementation.
type EventStream interface {
	Next() (SessionEvent, error)
	Close()
}

// Transport is what an [Agent] needs from its connection to a runtime:
// sending envelopes and following a session. It is transport-agnostic on
// purpose: [*Client] implements it over gRPC (StreamSession's passive
// subscription with resume), and a WebSocket/JSON-RPC client implementing
// the same two methods (with the same resume guarantee: after a reconnect,
// continue after the last delivered sequence number) runs the same agents
// unchanged.
type Transport interface {
	Send(ctx context.Context, env *macpv1.Envelope) (*macpv1.Ack, error)
	Follow(ctx context.Context, sessionID string, after uint64) (EventStream, error)
}

// Follow implements [Transport] with [Client.Subscribe].
func (c *Client) Follow(ctx context.Context, sessionID string, after uint64) (EventStream, error) {
	return c.Subscribe(ctx, sessionID, after), nil
}

var _ Transport = (*Client)(nil)

// Handler reacts to one accepted envelope. An error stops the agent (see
// [Agent.Run]) unless the agent has an error hook.
type Handler func(ctx context.Context, m *Message) error

// Message is one accepted envelope delivered to a [Handler].
type Message struct {
	// Seq is the envelope's sequence number in the session's history.
	Seq      uint64
	Envelope *macpv1.Envelope
	agent    *Agent
}

// Type, Sender and SessionID are shorthands for the envelope's fields.
func (m *Message) Type() string      { return m.Envelope.GetMessageType() }
func (m *Message) Sender() string    { return m.Envelope.GetSender() }
func (m *Message) SessionID() string { return m.Envelope.GetSessionId() }

// Decode unmarshals the payload into p (the mode's payload message).
func (m *Message) Decode(p proto.Message) error {
	if err := proto.Unmarshal(m.Envelope.GetPayload(), p); err != nil {
		return fmt.Errorf("sdk: decoding %s payload: %w", m.Type(), err)
	}
	return nil
}

// Reply sends a message of type typ with payload into the same session
// and mode (as the agent's transport identity).
func (m *Message) Reply(ctx context.Context, typ string, payload proto.Message) (*macpv1.Ack, error) {
	env, err := NewEnvelope(m.SessionID(), m.Envelope.GetMode(), typ, payload)
	if err != nil {
		return nil, err
	}
	return m.agent.t.Send(ctx, env)
}

// Agent is a participant that follows one session and reacts to its
// messages: it subscribes (resuming by itself after connection failures),
// keeps an optional [Projection] up to date, and dispatches every accepted
// envelope, in history order and one at a time, to the handler registered
// for its message type. Register handlers before Run.
type Agent struct {
	t         Transport
	sessionID string
	self      string
	after     uint64
	proj      Projection
	handlers  map[string]Handler
	any       Handler
	onError   func(m *Message, err error) error

	mu        sync.Mutex
	stopped   bool
	stop      context.CancelFunc
	last      uint64
	suspended bool
}

// AgentOption configures [NewAgent].
type AgentOption func(*Agent)

// WithSelf names the agent's own identity: its own envelopes are folded
// into the projection but not dispatched.
func WithSelf(id string) AgentOption { return func(a *Agent) { a.self = id } }

// WithAfter starts after sequence number n instead of at the SessionStart
// (to resume an agent that stopped at [Agent.Last]). A projection then
// only sees the envelopes after n.
func WithAfter(n uint64) AgentOption { return func(a *Agent) { a.after = n } }

// WithProjection folds every delivered envelope into p before it is
// dispatched, so handlers can read the session's current state.
func WithProjection(p Projection) AgentOption { return func(a *Agent) { a.proj = p } }

// WithErrorHook calls fn with a handler's error (and the message) instead
// of stopping: fn returns nil to continue, or an error to stop Run with
// it.
func WithErrorHook(fn func(m *Message, err error) error) AgentOption {
	return func(a *Agent) { a.onError = fn }
}

// NewAgent returns an agent for sessionID over t (a [*Client], or any
// other [Transport]).
func NewAgent(t Transport, sessionID string, opts ...AgentOption) *Agent {
	a := &Agent{t: t, sessionID: sessionID, handlers: map[string]Handler{}}
	for _, o := range opts {
		o(a)
	}
	a.last = a.after
	return a
}

// Handle registers h for messageType (SessionStart, Commitment and the
// runtime's SessionCancel, SessionSuspend and SessionResume records
// included), replacing any earlier handler for it.
func (a *Agent) Handle(messageType string, h Handler) *Agent {
	a.handlers[messageType] = h
	return a
}

// HandleAny registers h for message types without their own handler.
func (a *Agent) HandleAny(h Handler) *Agent {
	a.any = h
	return a
}

// Last is the sequence number of the last envelope dispatched (or skipped
// as the agent's own): a new agent WithAfter(Last()) continues there.
func (a *Agent) Last() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// Suspended reports whether the session is SUSPENDED as far as the agent
// has followed its history: set when a SessionSuspend record is
// delivered, cleared by the next SessionResume (RFC-MACP-0001 §7.5). While
// it is set the runtime refuses every message of the session
// (SESSION_NOT_OPEN); see the package documentation, "Agents".
func (a *Agent) Suspended() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.suspended
}

// Stop shuts the agent down gracefully: a handler in progress finishes
// (its context stays valid) and Run then returns nil. Safe to call from
// any goroutine, also from a handler, and more than once.
func (a *Agent) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = true
	if a.stop != nil {
		a.stop()
	}
}

// Run follows the session until it ends and returns nil then (after the
// handlers of its Commitment or SessionCancel ran); a suspension does not
// end it: the SessionSuspend and SessionResume records are dispatched like
// any envelope and Run goes on waiting, nil after [Agent.Stop],
// ctx's error when ctx ends, the first handler error (wrapped with the
// message's sequence number and type; errors.Is and errors.As see through
// it) unless an error hook decides otherwise, and a subscription failure
// that resuming cannot fix (an [*Error] such as FORBIDDEN or
// SESSION_NOT_FOUND). Handlers run on Run's goroutine with ctx.
func (a *Agent) Run(ctx context.Context) error {
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return nil
	}
	a.stop = cancel
	after := a.last
	a.mu.Unlock()

	stream, err := a.t.Follow(streamCtx, a.sessionID, after)
	if err != nil {
		return err
	}
	defer stream.Close()
	for {
		ev, err := stream.Next()
		if err != nil {
			a.mu.Lock()
			stopped := a.stopped
			a.mu.Unlock()
			switch {
			case errors.Is(err, io.EOF), stopped:
				return nil
			case ctx.Err() != nil:
				return ctx.Err()
			}
			return err
		}
		if a.proj != nil {
			if err := a.proj.Apply(ev.Envelope); err != nil {
				return fmt.Errorf("sdk: agent: projection at seq %d: %w", ev.Seq, err)
			}
		}
		if t := ev.Envelope.GetMessageType(); t == TypeSessionSuspend || t == TypeSessionResume {
			a.mu.Lock()
			a.suspended = t == TypeSessionSuspend
			a.mu.Unlock()
		}
		m := &Message{Seq: ev.Seq, Envelope: ev.Envelope, agent: a}
		if err := a.dispatch(ctx, m); err != nil {
			return err
		}
		a.mu.Lock()
		a.last = ev.Seq
		stopped := a.stopped
		a.mu.Unlock()
		if stopped {
			return nil
		}
	}
}

func (a *Agent) dispatch(ctx context.Context, m *Message) error {
	if a.self != "" && m.Sender() == a.self {
		return nil
	}
	h := a.handlers[m.Type()]
	if h == nil {
		h = a.any
	}
	if h == nil {
		return nil
	}
	err := h(ctx, m)
	if err == nil {
		return nil
	}
	if a.onError != nil {
		return a.onError(m, err)
	}
	return &HandlerError{Seq: m.Seq, Type: m.Type(), Err: err}
}

// HandlerError is a handler's error as [Agent.Run] returns it.
type HandlerError struct {
	Seq  uint64
	Type string
	Err  error
}

func (e *HandlerError) Error() string {
	return fmt.Sprintf("sdk: agent: %s handler at seq %d: %v", e.Type, e.Seq, e.Err)
}

func (e *HandlerError) Unwrap() error { return e.Err }
