package clikit

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"

	"github.com/macpd/macpd/sdk"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// connValueFlags and connBoolFlags are the connection flags every command
// takes (registerConnFlags); they may also come before the command name:
// "macpctl --addr H:P list".
var (
	connValueFlags = map[string]bool{"addr": true, "agent": true, "token": true, "tls-ca": true,
		"tls-cert": true, "tls-key": true, "tls-server-name": true, "timeout": true}
	connBoolFlags = map[string]bool{"insecure": true}
)

// SplitGlobal separates leading connection flags from the command name and
// its arguments. It stops at the first argument that is not a connection
// flag: that is the command (or "help", "-h", "--version", or an unknown
// flag, which the caller reports).
func SplitGlobal(args []string) (pre []string, name string, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			return pre, a, args[i+1:], nil
		}
		flagName, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case connBoolFlags[flagName]:
			pre = append(pre, a)
		case connValueFlags[flagName] && hasValue:
			pre = append(pre, a)
		case connValueFlags[flagName]:
			if i+1 >= len(args) {
				return nil, "", nil, Usagef("flag %s needs a value", a)
			}
			pre = append(pre, a, args[i+1])
			i++
		default: // -h, --version, or a mistake: the caller decides
			return pre, a, args[i+1:], nil
		}
	}
	return pre, "", nil, nil
}

// clientCertificate loads --tls-cert/--tls-key (a client certificate for
// mTLS identities, docs/security.md).
func (c *CLI) clientCertificate() (*tls.Certificate, error) {
	f := c.Conn
	if f.TLSCert == "" && f.TLSKey == "" {
		return nil, nil
	}
	if f.TLSCert == "" || f.TLSKey == "" {
		return nil, Usagef("--tls-cert and --tls-key go together")
	}
	if c.Set("insecure") && f.Insecure {
		return nil, Usagef("--insecure and --tls-cert contradict each other: a client certificate needs TLS")
	}
	cert, err := tls.LoadX509KeyPair(f.TLSCert, f.TLSKey)
	if err != nil {
		return nil, Usagef("--tls-cert/--tls-key: %v", err)
	}
	return &cert, nil
}

// DefaultPort is the port an address without one is given: macpd's
// default gRPC port.
const DefaultPort = "50051"

// DialAddr returns addr with DefaultPort when it names a host without a
// port ("localhost", "10.0.0.7", "::1", "[::1]"); gRPC would otherwise
// dial port 443. Addresses with a port, and gRPC target URIs
// ("dns:///host:port", "unix:///path"), are returned as they are.
func DialAddr(addr string) string {
	if addr == "" || strings.Contains(addr, "://") || strings.HasPrefix(addr, "unix:") {
		return addr
	}
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	host := strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return addr // not a host name or an IP address: let the dialer say what is wrong
	}
	return net.JoinHostPort(host, DefaultPort)
}

// hint returns a sentence naming the likely fix for a failed call, or "".
func (c *CLI) hint(err error) string {
	var se *sdk.Error
	if errors.As(err, &se) {
		if se.Code == sdk.CodeUnauthenticated {
			return "pass --agent ID (with MACP_ALLOW_INSECURE on the runtime) or --token TOKEN, or a client certificate with --tls-cert/--tls-key"
		}
		return ""
	}
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	msg := st.Message()
	addr := c.Conn.Addr
	switch {
	case strings.Contains(msg, "certificate signed by unknown authority"), strings.Contains(msg, "certificate is not trusted"):
		return "the runtime's certificate is not signed by a CA this machine trusts: pass --tls-ca FILE with the CA (for a self-signed certificate, the certificate itself)"
	case strings.Contains(msg, "looked like an HTTP/1.1 header"), strings.Contains(msg, "HTTP/1.1 header"):
		// grpc-go read an HTTP/1.1 answer to its HTTP/2 preface: an HTTP
		// listener, most often macpd's own (MACP_HTTP_ADDR).
		return addr + " is macpd's HTTP port (or another HTTP/1.1 server), not its gRPC listener: use the gRPC address " +
			"(macpd's --addr / MACP_BIND_ADDR, default 127.0.0.1:50051) with --addr HOST:PORT or MACP_ADDR"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "the runtime at " + addr + " speaks plaintext: pass --insecure (or set MACP_ALLOW_INSECURE=1)"
	case c.Conn.Insecure && c.Conn.TLSCA == "" && (strings.Contains(msg, "server preface") || strings.Contains(msg, "EOF") ||
		strings.Contains(msg, "connection reset") || strings.Contains(msg, "frame too large") || strings.Contains(msg, "http2")):
		return "the runtime at " + addr + " may require TLS: drop --insecure/MACP_ALLOW_INSECURE and pass --tls-ca FILE if its certificate is not publicly trusted"
	case strings.Contains(msg, "certificate is valid for"), strings.Contains(msg, "doesn't contain any IP SANs"):
		return "the certificate does not name " + addr + ": connect by a name it lists, or pass --tls-server-name NAME"
	case strings.Contains(msg, "certificate required"), strings.Contains(msg, "bad certificate"):
		return "the runtime requires a client certificate: pass --tls-cert FILE --tls-key FILE"
	case !c.Conn.Insecure && c.Conn.TLSCert == "" && (strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF")):
		// With TLS 1.3 the server refuses a missing client certificate
		// after the client finished its handshake: the client sees the
		// connection drop.
		return "the runtime closed the TLS connection; if it requires a client certificate, pass --tls-cert FILE --tls-key FILE"
	case strings.Contains(msg, "connection refused"), strings.Contains(msg, "no such host"):
		return "nothing answers at " + addr + ": start macpd (MACP_ALLOW_INSECURE=1 go run ./cmd/macpd) or pass --addr HOST:PORT (env MACP_ADDR)"
	case st.Code() == codes.DeadlineExceeded:
		return "no answer within --timeout " + c.Conn.Timeout.String() + ": check --addr " + addr + " and the transport (--insecure vs TLS)"
	}
	return ""
}
