package main

import (
	"strings"
	"testing"

	"github.com/macpd/macpd/internal/clikit"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/tlsconf/tlstest"
)

// Connection flags before the command name work like after it.
func TestFlagsBeforeCommand(t *testing.T) {
	a := startApp(t)
	r := runner{t, nil}
	before := r.ok("--addr", a.Addr(), "--insecure", "--agent", "coord", "list")
	after := r.ok("list", "--addr", a.Addr(), "--insecure", "--agent", "coord")
	mixed := r.ok("--addr="+a.Addr(), "list", "--insecure", "--agent=coord")
	if before.out != after.out || mixed.out != after.out || !strings.Contains(after.out, `"sessions"`) {
		t.Fatalf("before %q after %q mixed %q", before.out, after.out, mixed.out)
	}
	res := r.run("--addr")
	if res.code != clikit.ExitUsage || !strings.Contains(res.errOut, "needs a value") {
		t.Fatalf("dangling --addr: %+v", res)
	}
	res = r.run("--addr", a.Addr())
	if res.code != clikit.ExitUsage || !strings.Contains(res.errOut, "usage: macpctl") {
		t.Fatalf("no command: %+v", res)
	}
}

func TestVersionFlag(t *testing.T) {
	r := runner{t, nil}
	for _, arg := range []string{"--version", "version"} {
		res := r.ok(arg)
		if !strings.HasPrefix(res.out, "macpctl ") || !strings.Contains(res.out, "go1.") || !strings.Contains(res.out, "MACP protocol 1.0") {
			t.Fatalf("%s: %q", arg, res.out)
		}
	}
}

// A refused start prints no session id on stdout (README: SID=$(... | head -n1)).
func TestRefusedStartPrintsNoSessionID(t *testing.T) {
	a := startApp(t)
	r := runner{t, map[string]string{"MACP_ALLOW_INSECURE": "1", "MACP_ADDR": a.Addr()}}
	res := r.run("start", "--agent", "coord", "--ttl", "1m") // Decision needs participants
	if res.code != clikit.ExitRejected || res.out != "" || !strings.Contains(res.errOut, "INVALID_ENVELOPE") || !strings.Contains(res.errOut, `"ok":false`) {
		t.Fatalf("refused start: %+v", res)
	}
	res = r.ok("start", "--agent", "coord", "--participants", "alice")
	if l := res.lines(); len(l) != 2 || !uuidV4.MatchString(l[0]) {
		t.Fatalf("accepted start: %q", res.out)
	}
}

// Client certificates (docs/security.md, mTLS identities) and connection
// errors that name their fix.
func TestClientCertAndHints(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test-ca")
	caPath := ca.WriteCert(t, dir, "ca")
	srvCert, srvKey := ca.Server(t, "macpd").Write(t, dir, "server")
	cliCert, cliKey := ca.Client(t, "alice", nil, nil).Write(t, dir, "alice")
	tlsApp := startApp(t, func(cfg *config.Config) {
		cfg.AllowInsecure = false
		cfg.TLSCertPath, cfg.TLSKeyPath, cfg.Auth.TLSClientCAPath = srvCert, srvKey, caPath
	})
	r := runner{t, nil}
	res := r.ok("--addr", tlsApp.Addr(), "--tls-ca", caPath, "--tls-cert", cliCert, "--tls-key", cliKey, "start", "--participants", "alice")
	sid := res.lines()[0]
	res = r.ok("get", sid, "--addr", tlsApp.Addr(), "--tls-ca", caPath, "--tls-cert", cliCert, "--tls-key", cliKey)
	wantField(t, obj(t, res.out), "alice", "initiator") // the certificate's common name

	for _, tc := range []struct {
		args []string
		hint string
	}{
		{[]string{"init", "--addr", tlsApp.Addr(), "--tls-ca", caPath}, "--tls-cert FILE --tls-key FILE"},
		{[]string{"init", "--addr", tlsApp.Addr(), "--tls-cert", cliCert, "--tls-key", cliKey}, "--tls-ca FILE"},
		{[]string{"init", "--addr", tlsApp.Addr(), "--insecure", "--timeout", "3s"}, "may require TLS"},
	} {
		res := r.run(tc.args...)
		if res.code != clikit.ExitRejected || !strings.Contains(res.errOut, "hint: ") || !strings.Contains(res.errOut, tc.hint) {
			t.Errorf("macpctl %s: want a hint naming %q, got %+v", strings.Join(tc.args, " "), tc.hint, res)
		}
	}
	res = r.run("init", "--addr", tlsApp.Addr(), "--tls-cert", cliCert)
	if res.code != clikit.ExitUsage || !strings.Contains(res.errOut, "--tls-cert and --tls-key go together") {
		t.Errorf("half a key pair: %+v", res)
	}

	plain := startApp(t)
	res = r.run("init", "--addr", plain.Addr(), "--tls-ca", caPath, "--timeout", "3s")
	if res.code != clikit.ExitRejected || !strings.Contains(res.errOut, "speaks plaintext: pass --insecure") {
		t.Errorf("TLS against plaintext: %+v", res)
	}
	addr := plain.Addr()
	_ = plain.Shutdown(t.Context())
	res = r.run("init", "--addr", addr, "--insecure", "--timeout", "3s")
	if res.code != clikit.ExitRejected || !strings.Contains(res.errOut, "nothing answers at "+addr) {
		t.Errorf("nothing listening: %+v", res)
	}
}
