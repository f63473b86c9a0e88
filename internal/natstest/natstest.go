// Package natstest starts embedded NATS JetStream servers for tests: one
// server, or a cluster of servers connected by routes, all on loopback with
// ephemeral ports (client and route ports are chosen by the kernel) and
// their JetStream storage under the test's temporary directory.
//
// It is test support only: production macpd connects to NATS servers run
// by the operator (docs/cluster.md).
package natstest

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// MaxPayload is the servers' max_payload: above the largest stored message
// macpd writes for the default 1 MiB envelope payload limit.
const MaxPayload = 8 << 20

// Server is one embedded NATS server with JetStream.
type Server struct {
	*server.Server
	opts *server.Options
}

func options(name, dir string) *server.Options {
	return &server.Options{
		ServerName: name,
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   dir,
		MaxPayload: MaxPayload,
		NoLog:      true,
		NoSigs:     true,
		// Small JetStream limits for a test machine.
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  4 << 30,
	}
}

func start(t testing.TB, opts *server.Options) *Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: new server %s: %v", opts.ServerName, err)
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		s.Shutdown()
		t.Fatalf("natstest: server %s not ready", opts.ServerName)
	}
	return &Server{Server: s, opts: opts}
}

// Run starts one JetStream server and stops it when the test ends.
func Run(t testing.TB) *Server {
	t.Helper()
	s := start(t, options("single", t.TempDir()))
	t.Cleanup(s.Stop)
	return s
}

// RunWith starts one JetStream server with options changed by edit (for
// example users and permissions) and stops it when the test ends.
func RunWith(t testing.TB, edit func(*server.Options)) *Server {
	t.Helper()
	opts := options("single", t.TempDir())
	edit(opts)
	s := start(t, opts)
	t.Cleanup(s.Stop)
	return s
}

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

// Cluster is n JetStream servers in one NATS cluster.
type Cluster struct {
	t       testing.TB
	Servers []*Server
	name    string
	dirs    []string
}

// RunCluster starts n servers with JetStream clustering and waits until
// the JetStream meta group has a leader. They stop when the test ends.
// Client and route ports are ephemeral ports reserved up front (JetStream
// clustering needs configured routes) and kept across restarts.
func RunCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t, name: fmt.Sprintf("c%d", time.Now().UnixNano()%1_000_000)}
	clientPorts, routePorts := FreePorts(t, n), FreePorts(t, n)
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	for i := 0; i < n; i++ {
		c.dirs = append(c.dirs, t.TempDir())
		opts := options(fmt.Sprintf("n%d", i+1), c.dirs[i])
		opts.Port = clientPorts[i]
		opts.Cluster.Name = c.name
		opts.Cluster.Host = "127.0.0.1"
		opts.Cluster.Port = routePorts[i]
		opts.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		c.Servers = append(c.Servers, &Server{opts: opts})
	}
	t.Cleanup(c.Stop)
	var wg sync.WaitGroup
	for i := range c.Servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Servers[i] = start(t, c.Servers[i].opts)
		}()
	}
	wg.Wait()
	c.WaitReady()
	return c
}

// FreePorts picks n ephemeral loopback ports (listen, note, close), for
// servers that need their addresses before they start (routes) or must
// keep them across restarts.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// WaitReady waits until every running server sees a JetStream meta leader.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ok := true
		for _, s := range c.Servers {
			if s == nil || s.Server == nil || !s.Running() {
				continue
			}
			if !s.JetStreamIsCurrent() {
				ok = false
			}
		}
		if ok {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	c.t.Fatalf("natstest: cluster %s: no JetStream meta leader", c.name)
}

// URLs returns the client URLs of the running servers, comma separated.
func (c *Cluster) URLs() string {
	var us []string
	for _, s := range c.Servers {
		if s != nil && s.Server != nil && s.Running() {
			us = append(us, s.ClientURL())
		}
	}
	return strings.Join(us, ",")
}

// AllURLs returns the client URLs of every server, running or not (their
// ports are fixed), comma separated: what a client should be given to
// survive the loss of any one server.
func (c *Cluster) AllURLs() string {
	var us []string
	for _, s := range c.Servers {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", s.opts.Port))
	}
	return strings.Join(us, ",")
}

// Kill stops server i abruptly (no lame-duck mode; its JetStream state
// stays on disk).
func (c *Cluster) Kill(i int) {
	c.Servers[i].Stop()
}

// Restart starts server i again over its storage with its old addresses.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	old := c.Servers[i]
	opts := old.opts.Clone()
	c.Servers[i] = start(c.t, opts)
}

// Stop stops every server.
func (c *Cluster) Stop() {
	for _, s := range c.Servers {
		if s != nil && s.Server != nil {
			s.Stop()
		}
	}
}
