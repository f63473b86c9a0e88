package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/macpd/macpd/internal/coord"
)

// The Host check (docs/security.md "HTTP listener", DNS rebinding): a
// page on a domain that an attacker resolves to this server's address
// sends requests whose Host (and Origin) name the attacker's domain; the
// browser counts them as same-origin, so CORS never applies. The listener
// answers only Host values it serves:
//
//   - its own address: the IP literal of the local address the request
//     came in on (with that port, or none);
//   - the values of Options.Hosts (MACP_HTTP_HOSTS): name or name:port,
//     a name without a port matching any port;
//   - in development mode (Options.DevHosts, MACP_ALLOW_INSECURE) also the
//     localhost forms: localhost, *.localhost and loopback IP literals.
//
// Any other Host gets 403 FORBIDDEN before any route runs, and a request
// without one too.

// hostAllowed reports whether r's Host is one the listener serves.
func (s *Server) hostAllowed(r *http.Request) bool {
	host := strings.ToLower(r.Host)
	if host == "" {
		return false
	}
	name, port := host, ""
	if h, p, err := net.SplitHostPort(host); err == nil {
		name, port = h, p
	}
	name = strings.TrimSuffix(strings.Trim(name, "[]"), ".")
	for _, a := range s.opts.Hosts {
		a = strings.ToLower(a)
		if a == host {
			return true
		}
		if _, _, err := net.SplitHostPort(a); err != nil && strings.TrimSuffix(strings.Trim(a, "[]"), ".") == name {
			return true // no port in the setting: any port
		}
	}
	ip, ipErr := netip.ParseAddr(name)
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && ipErr == nil {
		if lh, lp, err := net.SplitHostPort(la.String()); err == nil {
			if lip, err := netip.ParseAddr(lh); err == nil && lip.Unmap().WithZone("") == ip.Unmap().WithZone("") && (port == "" || port == lp) {
				return true
			}
		}
	}
	if s.opts.DevHosts {
		if name == "localhost" || strings.HasSuffix(name, ".localhost") || (ipErr == nil && ip.IsLoopback()) {
			return true
		}
	}
	return false
}

// checkHost refuses requests whose Host the listener does not serve.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r) {
			s.conns.log.Warn("http-host", "HTTP listener: request for a host it does not serve refused (DNS rebinding? MACP_HTTP_HOSTS)",
				"host", r.Host, "remote", r.RemoteAddr)
			WriteError(w, coord.Errorf(coord.CodeForbidden,
				"host %q is not served here; add it to MACP_HTTP_HOSTS if clients reach this server by that name", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}
