package sdk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"time"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Version is the SDK version reported in Initialize's client_info.
const Version = "0.1.0-dev"

// ProtocolVersion is the MACP protocol version the SDK speaks.
const ProtocolVersion = "1.0"

// Option configures Dial.
type Option func(*options)

type options struct {
	token     string
	insecure  bool
	tls       *tls.Config
	retries   int
	dialOpts  []grpc.DialOption
	retryBase time.Duration
	retryMax  time.Duration
}

// WithBearer sends "authorization: Bearer <token>" with every call.
func WithBearer(token string) Option { return func(o *options) { o.token = token } }

// WithInsecure uses a plaintext connection (development only; macpd must run
// with MACP_ALLOW_INSECURE=1). It overrides WithTLSConfig.
func WithInsecure() Option { return func(o *options) { o.insecure = true } }

// WithTLSConfig uses cfg for TLS instead of the default (system roots).
func WithTLSConfig(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithRetry retries unary calls that fail with gRPC Unavailable up to n more
// times, with exponential backoff (see the package documentation).
func WithRetry(n int) Option { return func(o *options) { o.retries = max(n, 0) } }

// WithDialOptions appends gRPC dial options (interceptors, keepalive, ...).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// Client is a connection to a MACP runtime on behalf of one identity.
type Client struct {
	conn *grpc.ClientConn
	rpc  macpv1.MACPRuntimeServiceClient
	opts options
}

// Dial returns a Client for target ("host:port" or any gRPC target). It
// does not wait for the connection; ctx only aborts Dial if already done.
func Dial(ctx context.Context, target string, opts ...Option) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o := options{retryBase: 100 * time.Millisecond, retryMax: 2 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	var creds credentials.TransportCredentials
	switch {
	case o.insecure:
		creds = insecure.NewCredentials()
	case o.tls != nil:
		creds = credentials.NewTLS(o.tls)
	default:
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithUserAgent("macpd-go-sdk/" + Version),
	}
	if o.token != "" {
		dopts = append(dopts, grpc.WithPerRPCCredentials(bearer{token: o.token, secure: !o.insecure}))
	}
	conn, err := grpc.NewClient(target, append(dopts, o.dialOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("sdk: dial %s: %w", target, err)
	}
	return &Client{conn: conn, rpc: macpv1.NewMACPRuntimeServiceClient(conn), opts: o}, nil
}

type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }

// Close closes the connection; streams and calls in flight fail.
func (c *Client) Close() error { return c.conn.Close() }

// RPC returns the generated gRPC client on the same connection, for RPCs
// the Client does not wrap.
func (c *Client) RPC() macpv1.MACPRuntimeServiceClient { return c.rpc }

// unary runs call, retrying on Unavailable as WithRetry allows, and
// converts the final error.
func (c *Client) unary(ctx context.Context, call func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		err := call(ctx)
		if err == nil || attempt >= c.opts.retries || status.Code(err) != codes.Unavailable {
			return convert(err)
		}
		d := min(c.opts.retryBase<<attempt, c.opts.retryMax)
		d = d/2 + rand.N(d/2+1)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return convert(err)
		}
	}
}

// Initialize negotiates protocol version 1.0 (RFC-MACP-0001 §4) and returns
// the runtime's identity, capabilities and supported modes.
func (c *Client) Initialize(ctx context.Context) (*macpv1.InitializeResponse, error) {
	req := &macpv1.InitializeRequest{
		SupportedProtocolVersions: []string{ProtocolVersion},
		ClientInfo:                &macpv1.ClientInfo{Name: "macpd-go-sdk", Title: "macpd Go SDK", Version: Version},
		Capabilities:              &macpv1.Capabilities{},
	}
	var resp *macpv1.InitializeResponse
	err := c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.Initialize(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	if v := resp.GetSelectedProtocolVersion(); v != ProtocolVersion {
		return resp, &Error{Code: CodeUnsupportedProtocolVersion, Message: fmt.Sprintf("the runtime selected protocol version %q; this SDK speaks %q", v, ProtocolVersion)}
	}
	return resp, nil
}

// Send submits env and returns its Ack; see the package documentation for
// the three outcomes. env is not modified.
func (c *Client) Send(ctx context.Context, env *macpv1.Envelope) (*macpv1.Ack, error) {
	if env == nil {
		return nil, errors.New("sdk: Send: nil envelope")
	}
	if env.MacpVersion == "" || env.MessageId == "" || env.TimestampUnixMs == 0 {
		env = proto.CloneOf(env)
		if env.MacpVersion == "" {
			env.MacpVersion = ProtocolVersion
		}
		if env.MessageId == "" {
			env.MessageId = NewMessageID()
		}
		if env.TimestampUnixMs == 0 {
			env.TimestampUnixMs = time.Now().UnixMilli()
		}
	}
	req := &macpv1.SendRequest{Envelope: env}
	var resp *macpv1.SendResponse
	err := c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.Send(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	if resp.GetAck() == nil {
		return nil, &Error{Code: CodeInternalError, Message: "the runtime answered Send without an ack"}
	}
	return resp.Ack, ackError(resp.Ack)
}

// GetSession returns a session's metadata (visible to its initiator,
// declared participants and observers).
func (c *Client) GetSession(ctx context.Context, sessionID string) (*macpv1.SessionMetadata, error) {
	var resp *macpv1.GetSessionResponse
	err := c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.GetSession(ctx, &macpv1.GetSessionRequest{SessionId: sessionID})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetMetadata(), nil
}

// CancelSession ends an OPEN or SUSPENDED session (initiator only): as
// CANCELLED when the session is bound to profile 2026-09 (latest), as
// EXPIRED under 2026-04. A session that is already terminal is answered
// ok with its state; the Ack's session_state is the state reached.
func (c *Client) CancelSession(ctx context.Context, sessionID, reason string) (*macpv1.Ack, error) {
	var resp *macpv1.CancelSessionResponse
	err := c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.CancelSession(ctx, &macpv1.CancelSessionRequest{SessionId: sessionID, Reason: reason})
		return err
	})
	if err != nil {
		return nil, err
	}
	if resp.GetAck() == nil {
		return nil, &Error{Code: CodeInternalError, Message: "the runtime answered CancelSession without an ack"}
	}
	return resp.Ack, ackError(resp.Ack)
}

// ListSessions returns the metadata of the sessions the caller may see, in
// one page (see [Client.ListSessionsPage] for pagination).
func (c *Client) ListSessions(ctx context.Context) ([]*macpv1.SessionMetadata, error) {
	var resp *macpv1.ListSessionsResponse
	err := c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.ListSessions(ctx, &macpv1.ListSessionsRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetSessions(), nil
}

// ListModes returns the runtime's standards-track mode descriptors.
func (c *Client) ListModes(ctx context.Context) ([]*macpv1.ModeDescriptor, error) {
	var resp *macpv1.ListModesResponse
	err := c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.ListModes(ctx, &macpv1.ListModesRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetModes(), nil
}

// GetManifest returns the manifest of agentID, or the runtime's own when
// agentID is empty (RFC-MACP-0005).
func (c *Client) GetManifest(ctx context.Context, agentID string) (*macpv1.AgentManifest, error) {
	var resp *macpv1.GetManifestResponse
	err := c.unary(ctx, func(ctx context.Context) (err error) {
		resp, err = c.rpc.GetManifest(ctx, &macpv1.GetManifestRequest{AgentId: agentID})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetManifest(), nil
}

// WatchSessions streams session lifecycle events: first a CREATED event per
// OPEN or SUSPENDED session the caller may see, then CREATED, RESOLVED,
// EXPIRED, SUSPENDED, RESUMED and CANCELLED events as they happen.
func (c *Client) WatchSessions(ctx context.Context) iter.Seq2[*macpv1.SessionLifecycleEvent, error] {
	return watch(ctx, func(ctx context.Context) (grpc.ServerStreamingClient[macpv1.WatchSessionsResponse], error) {
		return c.rpc.WatchSessions(ctx, &macpv1.WatchSessionsRequest{})
	}, (*macpv1.WatchSessionsResponse).GetEvent)
}

// WatchSignals streams ambient Signal envelopes as the runtime accepts them.
// There is no backlog: signals sent before the stream is open are missed.
func (c *Client) WatchSignals(ctx context.Context) iter.Seq2[*macpv1.Envelope, error] {
	return watch(ctx, func(ctx context.Context) (grpc.ServerStreamingClient[macpv1.WatchSignalsResponse], error) {
		return c.rpc.WatchSignals(ctx, &macpv1.WatchSignalsRequest{})
	}, (*macpv1.WatchSignalsResponse).GetEnvelope)
}

func watch[R any, T any](ctx context.Context, open func(context.Context) (grpc.ServerStreamingClient[R], error), get func(*R) T) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := open(ctx)
		if err != nil {
			if ctx.Err() == nil {
				yield(zero, convert(err))
			}
			return
		}
		for {
			r, err := stream.Recv()
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, io.EOF) {
					yield(zero, convert(err))
				}
				return
			}
			if !yield(get(r), nil) {
				return
			}
		}
	}
}
