package rpc_test

import (
	"context"
	"testing"

	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// BenchmarkDurableDelivery: messages/s of a durable subscription's
// catch-up reaching a Go client through the local API, each message a
// request the client answers before the node sends the next (the fake
// mesh delivers at once, so this is the local API's share).
func BenchmarkDurableDelivery(b *testing.B) {
	const n = 2000
	for b.Loop() {
		mesh := newDurableMesh()
		mesh.add(0, n)
		c := rpctest.DialClient(b, rpctest.Start(b, mesh, rpctest.WithRPC(rpc.WithTopics(mesh), rpc.WithDurables(mesh))).URL)
		done := make(chan struct{})
		got := 0
		if _, err := c.SubscribeDurable(context.Background(), "news:*", "reader", func(protocol.TopicMessage) error {
			if got++; got == n {
				close(done)
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		<-done
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "msgs/s")
}
