package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshagent/meshagent/store"
)

// Propagation is a subscription's propagation policy (seed 001): whether a
// message goes on to the next subscriber once this one has answered.
type Propagation string

// The propagation policies of seed 001.
const (
	// PropagationStopOnProcessed stops after a subscriber that returns
	// processed: true (or stopPropagation: true). The default.
	PropagationStopOnProcessed Propagation = "stopPropagationOnProcessed"
	// PropagationStopOnStop stops only after stopPropagation: true.
	PropagationStopOnStop Propagation = "stopPropagationOnStop"
	// PropagationContinueAll never stops.
	PropagationContinueAll Propagation = "continueAll"
)

func (p Propagation) valid() bool {
	return p == PropagationStopOnProcessed || p == PropagationStopOnStop || p == PropagationContinueAll
}

// stops applies the policy to a subscriber's answer.
func (p Propagation) stops(pr ProcessResult) bool {
	switch p {
	case PropagationContinueAll:
		return false
	case PropagationStopOnStop:
		return pr.StopPropagation
	}
	return pr.Processed || pr.StopPropagation
}

// BusConfig configures the bus a Server serves.
type BusConfig struct {
	// DefaultPropagation applies to subscriptions that name no policy.
	DefaultPropagation Propagation
	// MaxAttempts is how many deliveries are tried before a message goes
	// to the dead-letter queue (seed 001's diagram: 3). Only deliveries
	// count: a retry that finds its subscriber away (its client id not
	// subscribed to a matching pattern, or its connection gone during the
	// attempt) waits for it instead, up to MessageTTL.
	MaxAttempts int
	// MessageTTL bounds how long an acknowledged message waits in the
	// outbox for its subscriber, from when it was sent; past it the
	// message is a dead letter that says so (seed 004: 7 days).
	MessageTTL time.Duration
	// RetryBackoff is the first wait before a retry when the subscriber
	// gives no retry_seconds; it doubles per attempt up to MaxBackoff.
	RetryBackoff time.Duration
	MaxBackoff   time.Duration
	// DeliveryTimeout bounds one processMessage call.
	DeliveryTimeout time.Duration
	// MeshWait bounds how long sendMessage waits for mesh topic peers.
	MeshWait time.Duration
}

// DefaultBusConfig returns the bus defaults.
func DefaultBusConfig() BusConfig {
	return BusConfig{
		DefaultPropagation: PropagationStopOnProcessed,
		MaxAttempts:        3,
		MessageTTL:         7 * 24 * time.Hour,
		RetryBackoff:       time.Second,
		MaxBackoff:         time.Minute,
		DeliveryTimeout:    30 * time.Second,
		MeshWait:           2 * time.Second,
	}
}

func (b BusConfig) validate() error {
	switch {
	case !b.DefaultPropagation.valid():
		return fmt.Errorf("relay: unknown default propagation %q", b.DefaultPropagation)
	case b.MaxAttempts < 1:
		return errors.New("relay: BusConfig.MaxAttempts must be at least 1")
	case b.MessageTTL <= 0:
		return errors.New("relay: BusConfig.MessageTTL must be positive")
	case b.RetryBackoff <= 0 || b.MaxBackoff < b.RetryBackoff:
		return errors.New("relay: BusConfig backoffs must be positive, MaxBackoff at least RetryBackoff")
	case b.DeliveryTimeout <= 0 || b.MeshWait < 0:
		return errors.New("relay: BusConfig.DeliveryTimeout must be positive and MeshWait not negative")
	}
	return nil
}

// backoff is the wait before the next delivery of a message delivered
// attempts times before (0 after its first delivery), unless the
// subscriber asked for retry_seconds.
func (b BusConfig) backoff(attempts int, a attempt) time.Duration {
	if a.err == nil && a.pr.RetrySeconds > 0 {
		return min(time.Duration(a.pr.RetrySeconds)*time.Second, b.MaxBackoff)
	}
	if attempts >= 32 || b.RetryBackoff<<attempts > b.MaxBackoff || b.RetryBackoff<<attempts <= 0 {
		return b.MaxBackoff
	}
	return b.RetryBackoff << attempts
}

// busSettings are what the bus is built from: its configuration and the
// parts it is given. Defaults → Apply → Validate, as Config does.
type busSettings struct {
	cfg   BusConfig
	store *store.Store // nil: no retries, no history, no dead letters
	log   *slog.Logger
	now   func() time.Time
}

// busOption configures the bus.
type busOption func(*busSettings) error

func defaultBusSettings() busSettings {
	return busSettings{cfg: DefaultBusConfig(), log: slog.Default(), now: time.Now}
}

func (s *busSettings) apply(opts ...busOption) error {
	for i, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return fmt.Errorf("relay: bus option %d: %w", i, err)
		}
	}
	return nil
}

func (s *busSettings) validate() error {
	switch {
	case s.log == nil:
		return errors.New("relay: the bus needs a logger")
	case s.now == nil:
		return errors.New("relay: the bus needs a clock")
	}
	return s.cfg.validate()
}

// busConfig sets the bus configuration.
func busConfig(c BusConfig) busOption {
	return func(s *busSettings) error { s.cfg = c; return nil }
}

// busStore persists the outbox, dead letters and history in st.
func busStore(st *store.Store) busOption {
	return func(s *busSettings) error { s.store = st; return nil }
}

// busLogger sets the bus's logger.
func busLogger(l *slog.Logger) busOption {
	return func(s *busSettings) error { s.log = l; return nil }
}

// busClock sets the clock that stamps messages and schedules retries.
func busClock(now func() time.Time) busOption {
	return func(s *busSettings) error { s.now = now; return nil }
}
