package natsstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/macpd/macpd/internal/natstest"
	"github.com/macpd/macpd/internal/store"
	"github.com/macpd/macpd/internal/store/natsstore"
	"github.com/macpd/macpd/internal/store/storetest"
)

var n atomic.Int64

// TestStore runs the shared suite (store package doc: "Every
// implementation passes the shared suite in storetest") against one
// JetStream server, with the default partitions and with the one-stream
// layout (a deployment from before partitions); each subtest gets its own
// streams and bucket, and reopening is a new connection over the same
// streams.
func TestStore(t *testing.T) {
	srv := natstest.Run(t)
	for _, parts := range []int{0, 1} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) {
			open := func(t *testing.T, name string) store.Store {
				s, err := natsstore.Open(context.Background(), natsstore.Options{URL: srv.ClientURL(), Name: name, Replicas: 1, Partitions: parts})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				return s
			}
			storetest.Run(t,
				func(t *testing.T) store.Store { return open(t, fmt.Sprintf("t%d", n.Add(1))) },
				storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
					name := s.(*natsstore.Store).Name()
					if err := s.Close(); err != nil {
						t.Fatalf("Close: %v", err)
					}
					return open(t, name)
				}))
		})
	}
}
