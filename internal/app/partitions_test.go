package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/macpd/macpd/internal/app"
	"github.com/macpd/macpd/internal/config"
	"github.com/macpd/macpd/internal/natstest"
	"github.com/macpd/macpd/internal/store/natsstore"
)

// MACP_NATS_PARTITIONS: a node of a deployment uses the layout recorded
// when it was created, whatever it is started with unless that is set; a
// node started with a different value is refused with an error naming
// both; config bounds the setting as natsstore does.
func TestNATSPartitionsFollowTheRecordedLayout(t *testing.T) {
	if config.MaxNATSPartitions != natsstore.MaxPartitions {
		t.Fatalf("config.MaxNATSPartitions %d, natsstore.MaxPartitions %d", config.MaxNATSPartitions, natsstore.MaxPartitions)
	}
	srv := natstest.Run(t)
	cfgWith := func(parts int) config.Config {
		cfg := config.Default()
		cfg.BindAddr = "127.0.0.1:0"
		cfg.AllowInsecure = true
		cfg.NATS = config.NATSConfig{Store: config.StoreNATS, URL: srv.ClientURL(), Name: "lay", Partitions: parts, Replicas: 1, Timeout: 2 * time.Second}
		return cfg
	}
	start := func(parts int) error {
		a, err := app.New(cfgWith(parts), nil)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return a.Shutdown(ctx)
	}
	if err := start(4); err != nil {
		t.Fatalf("first node, 4 partitions: %v", err)
	}
	if err := start(0); err != nil {
		t.Fatalf("a node without MACP_NATS_PARTITIONS: %v", err)
	}
	err := start(8)
	if err == nil || !strings.Contains(err.Error(), "4 stream(s)") || !strings.Contains(err.Error(), "MACP_NATS_PARTITIONS (Options.Partitions) 8") {
		t.Fatalf("a node with MACP_NATS_PARTITIONS=8 over a 4-stream deployment: %v", err)
	}
	t.Logf("refused: %v", err)
}
