package config

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// HTTPConfig holds the HTTP/JSON, Server-Sent Events and WebSocket
// bindings' settings (RFC-MACP-0006 §4-5; README "HTTP and WebSocket
// bindings"). Authentication, TLS, rates, payload size and connection
// limits are the gRPC listener's settings, shared.
type HTTPConfig struct {
	// Addr is the HTTP listen address, "" = off (MACP_HTTP_ADDR,
	// --http-addr). Off by default: it is a second network surface, and
	// turning it on is one setting.
	Addr string
	// CORSOrigins are the browser origins allowed to call the API
	// cross-origin and to open WebSockets, comma-separated (exact
	// "scheme://host[:port]" strings, or "*"); none by default: only
	// same-origin pages (MACP_HTTP_CORS_ORIGINS, --http-cors-origins).
	// Origins splits it. A string keeps Config comparable.
	CORSOrigins string
	// KeepAlive is the interval of SSE keep-alive comments and WebSocket
	// pings (MACP_HTTP_KEEPALIVE_MS, --http-keepalive).
	KeepAlive time.Duration
	// WriteTimeout bounds each write to a streaming client (an SSE event,
	// a WebSocket message); a client that does not read for this long is
	// disconnected (MACP_HTTP_WRITE_TIMEOUT_MS, --http-write-timeout).
	WriteTimeout time.Duration
	// MaxSubscriptions caps the sessions one WebSocket connection follows
	// at once (MACP_WS_MAX_SUBSCRIPTIONS, --ws-max-subscriptions).
	MaxSubscriptions int
	// TicketTTL is how long a browser ticket (POST /macp/auth/ticket) stays
	// valid; tickets are single-use (MACP_HTTP_TICKET_TTL_MS,
	// --http-ticket-ttl).
	TicketTTL time.Duration
	// BodyTimeout bounds reading a request body, from the end of its
	// headers; a slower client is disconnected
	// (MACP_HTTP_BODY_TIMEOUT_MS, --http-body-timeout).
	BodyTimeout time.Duration
	// Hosts are the Host header values the listener answers besides its
	// own address (and, in development mode, the localhost forms),
	// comma-separated host or host:port; a request naming another host
	// gets 403 FORBIDDEN (DNS rebinding) (MACP_HTTP_HOSTS, --http-hosts).
	Hosts string
}

// DefaultHTTP returns the documented defaults.
func DefaultHTTP() HTTPConfig {
	return HTTPConfig{
		KeepAlive:        15 * time.Second,
		WriteTimeout:     10 * time.Second,
		MaxSubscriptions: 64,
		TicketTTL:        30 * time.Second,
		BodyTimeout:      30 * time.Second,
	}
}

// validateHTTP reports problems with the HTTP settings. Called by
// Config.Validate.
func (c *Config) validateHTTP() []error {
	h := &c.HTTP
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if h.Addr != "" {
		if _, port, err := net.SplitHostPort(h.Addr); err != nil {
			bad("MACP_HTTP_ADDR (--http-addr) %q: %v", h.Addr, err)
		} else if port != "0" && (h.Addr == c.BindAddr || h.Addr == c.AdminAddr) {
			bad("MACP_HTTP_ADDR (--http-addr) %q must differ from MACP_BIND_ADDR and MACP_ADMIN_ADDR", h.Addr)
		}
	}
	for _, o := range h.Origins() {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			bad("MACP_HTTP_CORS_ORIGINS (--http-cors-origins) %q: an origin is scheme://host[:port], e.g. https://console.example.com, or *", o)
		}
	}
	// Zero values take the defaults (DefaultHTTP); below the floors a
	// setting would spin or be useless.
	if h.KeepAlive != 0 && h.KeepAlive < 100*time.Millisecond {
		bad("MACP_HTTP_KEEPALIVE_MS (--http-keepalive) %v must be at least 100ms", h.KeepAlive)
	}
	if h.WriteTimeout != 0 && h.WriteTimeout < 100*time.Millisecond {
		bad("MACP_HTTP_WRITE_TIMEOUT_MS (--http-write-timeout) %v must be at least 100ms", h.WriteTimeout)
	}
	if h.BodyTimeout != 0 && h.BodyTimeout < 100*time.Millisecond {
		bad("MACP_HTTP_BODY_TIMEOUT_MS (--http-body-timeout) %v must be at least 100ms", h.BodyTimeout)
	}
	for _, host := range h.HostList() {
		if strings.ContainsAny(host, "/@?# ") {
			bad("MACP_HTTP_HOSTS (--http-hosts) %q: a host is name or name:port, e.g. macp.example.com", host)
		}
	}
	if h.MaxSubscriptions < 0 {
		bad("MACP_WS_MAX_SUBSCRIPTIONS (--ws-max-subscriptions) %d must not be negative", h.MaxSubscriptions)
	}
	if h.TicketTTL != 0 && (h.TicketTTL < time.Second || h.TicketTTL > 10*time.Minute) {
		bad("MACP_HTTP_TICKET_TTL_MS (--http-ticket-ttl) %v must be between 1s and 10m", h.TicketTTL)
	}
	return errs
}

// httpFromEnv applies the MACP_HTTP_* and MACP_WS_* variables.
func (c *Config) httpFromEnv(lookup Env) []error {
	h := &c.HTTP
	var errs []error
	if v, ok := lookup("MACP_HTTP_ADDR"); ok {
		h.Addr = v
	}
	if v, ok := lookup("MACP_HTTP_CORS_ORIGINS"); ok && v != "" {
		h.CORSOrigins = v
	}
	millis := func(name string, dst *time.Duration) {
		if v, ok := lookup(name); ok && v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || n > int64(math.MaxInt64/time.Millisecond) {
				errs = append(errs, fmt.Errorf("%s: %q is not a number of milliseconds", name, v))
				return
			}
			*dst = time.Duration(n) * time.Millisecond
		}
	}
	millis("MACP_HTTP_KEEPALIVE_MS", &h.KeepAlive)
	millis("MACP_HTTP_WRITE_TIMEOUT_MS", &h.WriteTimeout)
	millis("MACP_HTTP_TICKET_TTL_MS", &h.TicketTTL)
	millis("MACP_HTTP_BODY_TIMEOUT_MS", &h.BodyTimeout)
	if v, ok := lookup("MACP_HTTP_HOSTS"); ok && v != "" {
		h.Hosts = v
	}
	if v, ok := lookup("MACP_WS_MAX_SUBSCRIPTIONS"); ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, errors.New("MACP_WS_MAX_SUBSCRIPTIONS: "+strconv.Quote(v)+" is not an integer"))
		} else {
			h.MaxSubscriptions = n
		}
	}
	return errs
}

// Origins returns the allowed CORS origins, one per entry.
func (h HTTPConfig) Origins() []string {
	var out []string
	for _, o := range strings.Split(h.CORSOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, strings.TrimSuffix(o, "/"))
		}
	}
	return out
}

// HostList returns the configured Host values, one per entry.
func (h HTTPConfig) HostList() []string {
	var out []string
	for _, v := range strings.Split(h.Hosts, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// registerHTTPFlags binds the HTTP flags.
func (c *Config) registerHTTPFlags(fs *flag.FlagSet) {
	h := &c.HTTP
	fs.StringVar(&h.Addr, "http-addr", h.Addr, "HTTP/JSON, SSE and WebSocket listen address, empty = off; same TLS and authentication as gRPC (MACP_HTTP_ADDR)")
	fs.StringVar(&h.CORSOrigins, "http-cors-origins", h.CORSOrigins, "comma-separated browser origins allowed cross-origin (CORS, WebSocket), * = any; empty = same-origin only (MACP_HTTP_CORS_ORIGINS)")
	fs.DurationVar(&h.KeepAlive, "http-keepalive", h.KeepAlive, "SSE keep-alive comment and WebSocket ping interval (MACP_HTTP_KEEPALIVE_MS)")
	fs.DurationVar(&h.WriteTimeout, "http-write-timeout", h.WriteTimeout, "disconnect a streaming HTTP/WebSocket client that does not read an event for this long (MACP_HTTP_WRITE_TIMEOUT_MS)")
	fs.IntVar(&h.MaxSubscriptions, "ws-max-subscriptions", h.MaxSubscriptions, "sessions one WebSocket connection may follow at once (MACP_WS_MAX_SUBSCRIPTIONS)")
	fs.DurationVar(&h.BodyTimeout, "http-body-timeout", h.BodyTimeout, "disconnect a client whose request body takes longer than this to arrive (MACP_HTTP_BODY_TIMEOUT_MS)")
	fs.StringVar(&h.Hosts, "http-hosts", h.Hosts, "comma-separated Host values the HTTP listener answers besides its own address (MACP_HTTP_HOSTS)")
	fs.DurationVar(&h.TicketTTL, "http-ticket-ttl", h.TicketTTL, "lifetime of single-use browser tickets from POST /macp/auth/ticket (MACP_HTTP_TICKET_TTL_MS)")
}
