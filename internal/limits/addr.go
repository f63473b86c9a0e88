package limits

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// AddrKeys returns the keys a connection from remote (an "ip:port" or a
// bare IP) counts under: its IP address and, for IPv6, its /64 prefix
// ("" for IPv4 or what does not parse). An IPv4-mapped IPv6 address counts
// as IPv4.
func AddrKeys(remote string) (ip, prefix64 string) {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host, ""
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String(), ""
	}
	p, _ := a.Prefix(64)
	return a.String(), p.String()
}

// ConnCounter counts a listener's open connections per IP address and
// per IPv6 /64 prefix, and in all, against caps (0 = none).
type ConnCounter struct {
	max, perAddr, perPrefix int

	mu     sync.Mutex
	total  int
	byIP   map[string]int
	byPref map[string]int
}

// NewConnCounter returns a counter with the given caps (0 = no cap).
func NewConnCounter(max, perAddr, perPrefix64 int) *ConnCounter {
	return &ConnCounter{max: max, perAddr: perAddr, perPrefix: perPrefix64, byIP: map[string]int{}, byPref: map[string]int{}}
}

// What Acquire refused for.
const (
	RefusedNone   = ""
	RefusedTotal  = "connections"
	RefusedAddr   = "per-address"
	RefusedPrefix = "per-/64"
)

// Acquire counts a connection from remote, unless that would exceed a
// cap: then it returns which (RefusedTotal, RefusedAddr, RefusedPrefix)
// and counts nothing. release undoes a successful Acquire (once).
func (c *ConnCounter) Acquire(remote string) (release func(), refused string) {
	ip, pref := AddrKeys(remote)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.max > 0 && c.total >= c.max:
		return nil, RefusedTotal
	case c.perAddr > 0 && c.byIP[ip] >= c.perAddr:
		return nil, RefusedAddr
	case pref != "" && c.perPrefix > 0 && c.byPref[pref] >= c.perPrefix:
		return nil, RefusedPrefix
	}
	c.total++
	c.byIP[ip]++
	if pref != "" {
		c.byPref[pref]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.total--
			if c.byIP[ip]--; c.byIP[ip] <= 0 {
				delete(c.byIP, ip)
			}
			if pref != "" {
				if c.byPref[pref]--; c.byPref[pref] <= 0 {
					delete(c.byPref, pref)
				}
			}
		})
	}, RefusedNone
}

// Open returns the connections counted now.
func (c *ConnCounter) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// LogEvery writes a log line at most once per interval per kind of
// event, saying how many events of the kind it did not write about: abuse
// is logged without letting the abuser flood the log.
type LogEvery struct {
	log   *slog.Logger
	every time.Duration

	mu   sync.Mutex
	last map[string]time.Time
	n    map[string]int64
}

// NewLogEvery returns a limiter writing to log (nil = nowhere) at most
// once per every for each kind.
func NewLogEvery(log *slog.Logger, every time.Duration) *LogEvery {
	return &LogEvery{log: log, every: every, last: map[string]time.Time{}, n: map[string]int64{}}
}

// Warn logs msg with args for kind unless a line of kind was written
// less than the interval ago; it counts the event either way. The line
// carries "suppressed": the events of kind not logged since the last one.
func (l *LogEvery) Warn(kind, msg string, args ...any) {
	if l == nil || l.log == nil {
		return
	}
	now := time.Now()
	l.mu.Lock()
	if last, ok := l.last[kind]; ok && now.Sub(last) < l.every {
		l.n[kind]++
		l.mu.Unlock()
		return
	}
	suppressed := l.n[kind]
	l.last[kind], l.n[kind] = now, 0
	l.mu.Unlock()
	l.log.Warn(msg, append(args, "kind", kind, "suppressed", suppressed)...)
}
