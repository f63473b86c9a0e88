package limits

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// docs/security.md "Limits": connections count per IP address and, for
// IPv6, per /64 prefix (MACP_MAX_CONNECTIONS_PER_PREFIX64); an
// IPv4-mapped address counts as IPv4.
func TestConnCounterPerAddrAndPrefix64(t *testing.T) {
	for _, c := range []struct{ in, ip, pref string }{
		{"192.0.2.1:443", "192.0.2.1", ""},
		{"[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1", ""},
		{"[fe80::1%eth0]:80", "fe80::1", "fe80::/64"},
		{"garbage", "garbage", ""},
	} {
		if ip, pref := AddrKeys(c.in); ip != c.ip || pref != c.pref {
			t.Errorf("AddrKeys(%q) = %q, %q; want %q, %q", c.in, ip, pref, c.ip, c.pref)
		}
	}
	cc := NewConnCounter(5, 2, 3)
	var rels []func()
	take := func(remote, want string) {
		t.Helper()
		rel, refused := cc.Acquire(remote)
		if refused != want {
			t.Fatalf("Acquire(%s) refused %q, want %q", remote, refused, want)
		}
		if rel != nil {
			rels = append(rels, rel)
		}
	}
	take("[2001:db8::1]:1", RefusedNone)
	take("[2001:db8::1]:2", RefusedNone)
	take("[2001:db8::1]:3", RefusedAddr)
	take("[2001:db8::2]:1", RefusedNone)   // same /64: third
	take("[2001:db8::3]:1", RefusedPrefix) // same /64: fourth
	take("[2001:db9::3]:1", RefusedNone)   // another /64
	take("192.0.2.1:1", RefusedNone)
	take("192.0.2.2:1", RefusedTotal)
	if cc.Open() != 5 {
		t.Fatalf("open %d", cc.Open())
	}
	for _, r := range rels {
		r()
		r() // once
	}
	if cc.Open() != 0 || len(cc.byIP)+len(cc.byPref) != 0 {
		t.Fatalf("after release: open %d, %d addresses, %d prefixes", cc.Open(), len(cc.byIP), len(cc.byPref))
	}
}

// A kind of abuse is logged at most once per interval, with the count of
// the events not logged.
func TestLogEveryRateLimits(t *testing.T) {
	var buf bytes.Buffer
	l := NewLogEvery(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	for range 5 {
		l.Warn("a", "abuse a")
	}
	l.Warn("b", "abuse b")
	if n := strings.Count(buf.String(), "abuse a"); n != 1 {
		t.Fatalf("kind a logged %d times:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "abuse b") {
		t.Fatalf("kind b not logged:\n%s", buf.String())
	}
}
