package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/macpd/macpd/internal/bus"
	"github.com/macpd/macpd/internal/cluster"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/registry"
	"github.com/macpd/macpd/internal/runtime"
	"github.com/macpd/macpd/internal/store/natsstore"
)

// clusterState is the App's part of a multi-node setup (MACP_STORE=nats):
// the shared store, the stream position recovery starts from, and the
// feed of other nodes' appends (internal/cluster).
type clusterState struct {
	ns    *natsstore.Store
	after natsstore.Position
	node  *cluster.Node
	own   *cluster.Ownership // MACP_CLUSTER_OWNERSHIP=partitioned
	bus   bool               // MACP_NATS_BUS
	bsrv  *bus.Server        // the message-bus binding, when on
	dlv   *bus.Deliverer
}

// natsOptions turns the MACP_NATS_* credentials and TLS settings into
// connection options.
func natsOptions(n config.NATSConfig) ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case n.CredsFile != "":
		opts = append(opts, nats.UserCredentials(n.CredsFile))
	case n.NKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(n.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("MACP_NATS_NKEY_FILE: %w", err)
		}
		opts = append(opts, o)
	case n.User != "" || n.Password != "":
		opts = append(opts, nats.UserInfo(n.User, n.Password))
	case n.Token != "":
		opts = append(opts, nats.Token(n.Token))
	}
	if n.TLSCAPath != "" {
		opts = append(opts, nats.RootCAs(n.TLSCAPath))
	}
	if n.TLSCertPath != "" {
		opts = append(opts, nats.ClientCert(n.TLSCertPath, n.TLSKeyPath))
	}
	return opts, nil
}

// forwarder opens partitioned ownership when configured; nil otherwise.
func (c *clusterState) forwarder(cfg config.Config, log *slog.Logger) (runtime.Forwarder, error) {
	if c.ns == nil || cfg.NATS.Ownership == config.OwnershipShared { // "" = partitioned
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*cfg.NATS.Timeout)
	defer cancel()
	own, err := cluster.NewOwnership(ctx, c.ns, cluster.OwnershipOptions{Log: log})
	if err != nil {
		return nil, err
	}
	c.own = own
	return own, nil
}

// openNATS opens the shared JetStream store.
func openNATS(cfg config.Config, log *slog.Logger) (*natsstore.Store, error) {
	nopts, err := natsOptions(cfg.NATS)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*cfg.NATS.Timeout)
	defer cancel()
	ns, err := natsstore.Open(ctx, natsstore.Options{
		URL: strings.TrimSpace(cfg.NATS.URL), NATSOptions: nopts, Name: cfg.NATS.Name,
		Partitions: cfg.NATS.Partitions, Replicas: cfg.NATS.Replicas, Timeout: cfg.NATS.Timeout,
	})
	if err != nil {
		return nil, fmt.Errorf("opening the NATS JetStream store (MACP_NATS_URL %s): %w", cfg.NATS.URL, err)
	}
	log.Info("store: NATS JetStream", "url", cfg.NATS.URL, "streams", ns.StreamNames(), "replicas", cfg.NATS.Replicas)
	return ns, nil
}

// prepareCluster marks the runtime's store as shared and notes where the
// feed of other nodes' appends starts: before recovery reads the store.
func (c *clusterState) prepare(rt *runtime.Runtime, cfg config.Config) error {
	if c.ns == nil {
		return nil
	}
	c.bus = cfg.NATS.Bus
	rt.EnableSharedStore()
	after, err := c.ns.LastPosition(context.Background())
	if err != nil {
		return err
	}
	c.after = after
	return nil
}

// start starts the feed after the runtime recovered.
func (c *clusterState) start(ctx context.Context, rt *runtime.Runtime, regs *registry.Registry, log *slog.Logger) error {
	if c.ns == nil {
		return nil
	}
	node, err := cluster.Start(ctx, c.ns, rt, regs, c.after, log, c.own)
	if err != nil {
		return fmt.Errorf("following the shared store: %w", err)
	}
	c.node = node
	if c.own != nil {
		if err := c.own.Start(ctx, rt); err != nil {
			node.Stop()
			return fmt.Errorf("partitioned ownership (MACP_CLUSTER_OWNERSHIP): %w", err)
		}
		log.Info("partitioned ownership", "node", c.own.ID(), "partitions", c.ns.Partitions())
	}
	if c.bus {
		if c.bsrv, err = bus.Serve(c.ns.Conn(), c.ns.Name(), rt, log); err != nil {
			node.Stop()
			return fmt.Errorf("message-bus binding (MACP_NATS_BUS): %w", err)
		}
		log.Info("message-bus binding: submissions on NATS", "subject", c.ns.Name()+".bus.submit.*")
		if c.dlv, err = bus.Deliver(c.ns, bus.DeliverOptions{Log: log}); err != nil {
			c.bsrv.Stop()
			node.Stop()
			return fmt.Errorf("message-bus binding (MACP_NATS_BUS): %w", err)
		}
	}
	return nil
}

func (c *clusterState) stop() {
	if c.dlv != nil {
		c.dlv.Stop()
		c.dlv = nil
	}
	if c.bsrv != nil {
		c.bsrv.Stop()
		c.bsrv = nil
	}
	if c.own != nil {
		c.own.Stop()
	}
	if c.node != nil {
		c.node.Stop()
		c.node = nil
	}
}

// Kill stops the App abruptly, the in-process equivalent of kill -9 for
// cluster tests: connections are cut, nothing is drained, the store's
// connection is closed under any append in flight (its callers are not
// acknowledged). The App cannot be used afterwards.
func (a *App) Kill() {
	a.once.Do(func() {
		a.grpc.Stop()
		if a.cl.own != nil {
			a.cl.own.Abandon() // its leases expire, as after a crash
		}
		a.cl.stop()
		_ = a.store.Close()
		a.rt.Close()
		if a.adminLis != nil {
			_ = a.adminLis.Close()
		}
	})
}

// storeName describes the store in the start log line.
func storeName(cfg config.Config) string {
	switch {
	case cfg.MemoryOnly:
		return "memory"
	case cfg.NATS.Store == config.StoreNATS:
		return "nats:" + cfg.NATS.Name
	}
	return cfg.DataDir
}

// Ownership is the node's partitioned ownership (MACP_STORE=nats with
// MACP_CLUSTER_OWNERSHIP=partitioned), else nil.
func (a *App) Ownership() *cluster.Ownership { return a.cl.own }
