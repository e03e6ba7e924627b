package a2a

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// Defaults and caps of the gateway's bounds.
const (
	// DefaultMaxTasks bounds the tasks the gateway remembers, running or
	// finished; a finished one is forgotten first (oldest first) to make
	// room, and a request for a new task when all are running is refused.
	DefaultMaxTasks = 1024
	// DefaultTaskTTL is how long a finished task is remembered.
	DefaultTaskTTL = time.Hour
	// DefaultTaskTimeout is the deadline of a task's mesh task: how long
	// its provider may work on it (seed 003's escalation window).
	DefaultTaskTimeout = 24 * time.Hour
	// MaxTaskTimeout is the longest deadline a detached mesh task takes.
	MaxTaskTimeout = time.Duration(protocol.MaxDetachMs) * time.Millisecond
	// DefaultCardTTL is how long a mesh agent's signed card is cached.
	DefaultCardTTL = 30 * time.Second
	// maxCards bounds the card cache; it is emptied when full.
	maxCards = 256
	// maxSubscriberBacklog bounds the events queued for one stream; a
	// stream that falls further behind is ended (the client may
	// SubscribeToTask again).
	maxSubscriberBacklog = 256
)

// Config configures a Gateway. Build it with options.
type Config struct {
	// BaseURL is the gateway's own URL as clients reach it
	// ("http://127.0.0.1:8080"), without a trailing slash: cards name
	// BaseURL/agents/<id>/ as their JSON-RPC interface. Required.
	BaseURL string
	// Tasks runs mesh tasks. Default MeshTasks over the gateway's client.
	Tasks Tasks
	// MaxTasks, TaskTTL and TaskTimeout bound the tasks (see the
	// defaults).
	MaxTasks    int
	TaskTTL     time.Duration
	TaskTimeout time.Duration
	// CardTTL is how long a fetched card is reused.
	CardTTL time.Duration
	// Logger receives the gateway's logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Option configures a Gateway.
type Option func(*Config) error

func defaultConfig() Config {
	return Config{
		MaxTasks:    DefaultMaxTasks,
		TaskTTL:     DefaultTaskTTL,
		TaskTimeout: DefaultTaskTimeout,
		CardTTL:     DefaultCardTTL,
		Logger:      slog.Default(),
		Now:         time.Now,
	}
}

func (c *Config) validate() error {
	switch {
	case c.BaseURL == "":
		return errors.New("a2a: a base URL is required (WithBaseURL)")
	case c.MaxTasks < 1:
		return errors.New("a2a: MaxTasks must be at least 1")
	case c.TaskTTL <= 0 || c.CardTTL <= 0:
		return errors.New("a2a: TaskTTL and CardTTL must be positive")
	case c.TaskTimeout <= 0 || c.TaskTimeout > MaxTaskTimeout:
		return fmt.Errorf("a2a: TaskTimeout must be in (0, %s]", MaxTaskTimeout)
	}
	return CheckInterfaceURL(c.BaseURL + "/")
}

// WithBaseURL sets the URL clients reach the gateway at.
func WithBaseURL(u string) Option {
	return func(c *Config) error { c.BaseURL = u; return nil }
}

// WithTasks replaces how mesh tasks are run (tests, or durable tasks).
func WithTasks(t Tasks) Option {
	return func(c *Config) error { c.Tasks = t; return nil }
}

// WithMaxTasks bounds the tasks remembered.
func WithMaxTasks(n int) Option {
	return func(c *Config) error { c.MaxTasks = n; return nil }
}

// WithTaskTTL sets how long a finished task is remembered.
func WithTaskTTL(d time.Duration) Option {
	return func(c *Config) error { c.TaskTTL = d; return nil }
}

// WithTaskTimeout sets the deadline of each task's mesh task.
func WithTaskTimeout(d time.Duration) Option {
	return func(c *Config) error { c.TaskTimeout = d; return nil }
}

// WithCardTTL sets how long a fetched card is reused.
func WithCardTTL(d time.Duration) Option {
	return func(c *Config) error { c.CardTTL = d; return nil }
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(c *Config) error {
		if l == nil {
			return errors.New("a2a: nil logger")
		}
		c.Logger = l
		return nil
	}
}

// WithClock sets the clock.
func WithClock(now func() time.Time) Option {
	return func(c *Config) error { c.Now = now; return nil }
}
