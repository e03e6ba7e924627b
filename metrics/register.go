package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers cs with reg, each once. The parts of the project
// that record their own figures (pubsub, dht, bus, lobby, store) take a
// prometheus.Registerer through an option and call it from their
// constructor, so that a name registered twice on one registry (two
// routers, two stores) fails that constructor instead of mixing two
// parts' figures. A nil reg registers nothing.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}
