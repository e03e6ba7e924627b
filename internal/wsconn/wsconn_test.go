package wsconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/wait"
)

const testTimeout = 10 * time.Second

// testHub serves a Hub on a test server; each connection is reported on
// conns, and its end on ended.
type testHub struct {
	hub   *Hub
	url   string
	conns chan *Conn
	ended chan *Conn
	frame func(c *Conn, b []byte) // nil: echo
}

func newTestHub(t *testing.T, mutate func(*Config)) *testHub {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	if mutate != nil {
		mutate(&cfg)
	}
	hub, err := NewHub(cfg)
	if err != nil {
		t.Fatal(err)
	}
	th := &testHub{hub: hub, conns: make(chan *Conn, 64), ended: make(chan *Conn, 64)}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hub.Serve(w, r, func(c *Conn) Handler {
			th.conns <- c
			return Handler{
				Frame: func(b []byte) {
					if th.frame != nil {
						th.frame(c, b)
						return
					}
					_ = c.Send(b)
				},
				Ended: func() { th.ended <- c },
			}
		})
	}))
	t.Cleanup(func() {
		hub.Close("test over")
		ts.Close()
	})
	th.url = "ws" + strings.TrimPrefix(ts.URL, "http")
	return th
}

func (th *testHub) dial(t *testing.T) (*websocket.Conn, *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, th.url, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = ws.CloseNow() })
	select {
	case c := <-th.conns:
		return ws, c
	case <-ctx.Done():
		t.Fatal("the hub did not report the connection")
		return nil, nil
	}
}

// waitEnded waits for c's Handler.Ended.
func (th *testHub) waitEnded(t *testing.T, c *Conn) {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for {
		select {
		case e := <-th.ended:
			if e == c {
				return
			}
		case <-timer.C:
			t.Fatalf("connection %d did not end within %v", c.ID(), testTimeout)
		}
	}
}

// closeStatus reads from ws until it fails and returns the close error.
func closeStatus(t *testing.T, ws *websocket.Conn) (websocket.CloseError, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for {
		if _, _, err := ws.Read(ctx); err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return ce, nil
			}
			return ce, err
		}
	}
}

func TestEchoAndEnd(t *testing.T) {
	th := newTestHub(t, nil)
	ws, c := th.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := ws.Read(ctx); err != nil || string(b) != "hello" {
		t.Fatalf("echo: %q %v", b, err)
	}
	if th.hub.Len() != 1 {
		t.Fatalf("Len = %d, want 1", th.hub.Len())
	}
	_ = ws.Close(websocket.StatusNormalClosure, "")
	th.waitEnded(t, c)
	wait.For(t, testTimeout, func() error {
		if n := th.hub.Len(); n != 0 {
			return fmt.Errorf("Len = %d", n)
		}
		return nil
	})
	if err := c.Send([]byte("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after the end: %v, want ErrClosed", err)
	}
}

// A client that does not read is disconnected once its queue fills: Send
// never blocks and reports ErrSlowConsumer.
func TestSlowReaderDisconnected(t *testing.T) {
	th := newTestHub(t, func(c *Config) { c.Limits.SendQueue = 4 })
	_, c := th.dial(t)
	big := make([]byte, 64<<10)
	var err error
	start := time.Now()
	for i := 0; i < 100000 && err == nil; i++ {
		err = c.Send(big)
	}
	if !errors.Is(err, ErrSlowConsumer) {
		t.Fatalf("Send to a client that never reads: %v, want ErrSlowConsumer", err)
	}
	if time.Since(start) > testTimeout {
		t.Fatalf("Send blocked: %v to fill the queue", time.Since(start))
	}
	th.waitEnded(t, c)
	if err := c.Send(big); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after the disconnect: %v, want ErrClosed", err)
	}
}

// A client that stops reading misses the write timeout once the socket's
// buffers are full, and is dropped even though its queue never fills.
func TestWriteTimeoutDisconnects(t *testing.T) {
	th := newTestHub(t, func(c *Config) {
		c.Limits.SendQueue = 1 << 16
		c.Limits.WriteTimeout = 100 * time.Millisecond
	})
	_, c := th.dial(t)
	big := make([]byte, 64<<10)
	wait.For(t, testTimeout, func() error {
		if err := c.Send(big); err != nil {
			return nil // closed: the write timed out
		}
		return errors.New("still open")
	})
	th.waitEnded(t, c)
}

// A client that answers no ping within PingInterval is disconnected.
// (The WebSocket library answers pings only while the client reads.)
func TestPingTimeout(t *testing.T) {
	th := newTestHub(t, func(c *Config) { c.Limits.PingInterval = 50 * time.Millisecond })
	_, c := th.dial(t)
	th.waitEnded(t, c)

	// A client that reads stays.
	ws, c2 := th.dial(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				return
			}
		}
	}()
	wait.Holds(t, 300*time.Millisecond, func() error {
		return c2.Context().Err()
	})
}

// An orderly close writes what is queued first, then says why.
func TestCloseDrainsQueue(t *testing.T) {
	th := newTestHub(t, nil)
	ws, c := th.dial(t)
	const n = 50
	for i := range n {
		if err := c.Send(fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if !c.Close(websocket.StatusPolicyViolation, "bye") {
		t.Fatal("Close did not start the close")
	}
	if c.Close(websocket.StatusNormalClosure, "again") {
		t.Fatal("a second Close started another close")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for i := range n {
		_, b, err := ws.Read(ctx)
		if err != nil || string(b) != fmt.Sprintf("m%d", i) {
			t.Fatalf("message %d: %q %v", i, b, err)
		}
	}
	ce, err := closeStatus(t, ws)
	if err != nil || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "bye" {
		t.Fatalf("close: %v %v, want 1008 bye", ce, err)
	}
	th.waitEnded(t, c)
}

// Closing the Hub while a write is stuck on a client that does not read
// returns within the write and handshake bounds.
func TestCloseDuringWrite(t *testing.T) {
	th := newTestHub(t, func(c *Config) {
		c.Limits.SendQueue = 1 << 16
		c.Limits.WriteTimeout = 200 * time.Millisecond
	})
	_, c := th.dial(t)
	big := make([]byte, 256<<10)
	for range 64 { // far more than the socket buffers hold
		if c.Send(big) != nil {
			break
		}
	}
	start := time.Now()
	th.hub.Close("going")
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v with a stuck writer", d)
	}
	th.waitEnded(t, c)
	if th.hub.Len() != 0 {
		t.Fatalf("Len = %d after Close", th.hub.Len())
	}
}

// Closing the Hub says "going away", and refuses newcomers.
func TestHubClose(t *testing.T) {
	th := newTestHub(t, nil)
	ws, c := th.dial(t)
	go th.hub.Close("server closing")
	ce, err := closeStatus(t, ws)
	if err != nil || ce.Code != websocket.StatusGoingAway || ce.Reason != "server closing" {
		t.Fatalf("close: %v %v", ce, err)
	}
	th.waitEnded(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	wait.For(t, testTimeout, func() error {
		_, resp, err := websocket.Dial(ctx, th.url, nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("dial after Close: %v", err)
		}
		return nil
	})
}

// A connection that does not establish itself in time is closed with the
// configured reason; an established one stays.
func TestInitDeadline(t *testing.T) {
	th := newTestHub(t, func(c *Config) {
		c.Limits.InitTimeout = 100 * time.Millisecond
		c.InitDeadline = "hello deadline: nothing within %v"
	})
	ws, c := th.dial(t)
	ce, err := closeStatus(t, ws)
	if err != nil || ce.Code != websocket.StatusPolicyViolation || ce.Reason != "hello deadline: nothing within 100ms" {
		t.Fatalf("close: %v %v", ce, err)
	}
	th.waitEnded(t, c)

	_, c2 := th.dial(t)
	c2.Establish()
	if !c2.Established() {
		t.Fatal("Established after Establish is false")
	}
	wait.Holds(t, 300*time.Millisecond, func() error { return c2.Context().Err() })
}

// Go bounds the jobs of a connection, and the init deadline waits for a
// job that is running.
func TestGoBoundsJobs(t *testing.T) {
	th := newTestHub(t, func(c *Config) {
		c.Limits.MaxConcurrentCalls = 1
		c.Limits.InitTimeout = 50 * time.Millisecond
	})
	_, c := th.dial(t)
	release := make(chan struct{})
	var ran sync.WaitGroup
	ran.Add(1)
	if !c.Go(func(func()) { defer ran.Done(); <-release }) {
		t.Fatal("Go refused the first job")
	}
	if c.Go(func(func()) {}) {
		t.Fatal("Go took a job beyond MaxConcurrentCalls")
	}
	wait.Holds(t, 200*time.Millisecond, func() error { return c.Context().Err() })
	close(release)
	ran.Wait()
	th.waitEnded(t, c) // the deadline, looked at again, closes it
}

// A job that calls free gives its place back while it still runs, and
// its return does not give it back a second time.
func TestGoFreeGivesThePlaceBack(t *testing.T) {
	th := newTestHub(t, func(c *Config) { c.Limits.MaxConcurrentCalls = 1 })
	_, c := th.dial(t)
	freed, release1, release2 := make(chan struct{}), make(chan struct{}), make(chan struct{})
	ended1 := make(chan struct{})
	if !c.Go(func(free func()) {
		defer close(ended1)
		free()
		free() // twice is once
		close(freed)
		<-release1
	}) {
		t.Fatal("Go refused the first job")
	}
	wait.Receive(t, 10*time.Second, freed, "the first job to free its place")
	var ran sync.WaitGroup
	ran.Add(1)
	if !c.Go(func(func()) { defer ran.Done(); <-release2 }) {
		t.Fatal("Go refused a job after the running one freed its place")
	}
	close(release1)
	wait.Receive(t, 10*time.Second, ended1, "the first job's end")
	// The place the first job gave back is the second's now; the first
	// job's return (just after ended1) must not give it back again.
	wait.Holds(t, 300*time.Millisecond, func() error {
		if n := len(c.jobs); n != 1 {
			return fmt.Errorf("%d places held while one job runs", n)
		}
		return nil
	})
	close(release2)
	ran.Wait()
}

// A full Hub evicts its oldest waiting connection; with every slot
// established it refuses with 503.
func TestAdmission(t *testing.T) {
	th := newTestHub(t, func(c *Config) { c.Limits.MaxClients = 2 })
	idle, c1 := th.dial(t)
	_, c2 := th.dial(t)
	c2.Establish()
	_, c3 := th.dial(t)
	ce, err := closeStatus(t, idle)
	if err != nil || ce.Code != websocket.StatusPolicyViolation || !strings.HasPrefix(ce.Reason, "evicted: server full") {
		t.Fatalf("evicted: %v %v", ce, err)
	}
	th.waitEnded(t, c1)
	c3.Establish()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, th.url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("dial into a full hub: %v", err)
	}
}

func TestOriginAllowed(t *testing.T) {
	for _, tc := range []struct {
		patterns []string
		origin   string
		want     bool
	}{
		{nil, "", true},
		{nil, "https://evil.example", false},
		{[]string{"*"}, "https://any.example", true},
		{[]string{"*.example.com"}, "https://App.Example.com", true},
		{[]string{"https://app.example.com"}, "http://app.example.com", false},
		{[]string{"https://app.example.com"}, "https://app.example.com", true},
		{[]string{"app.example.com"}, "null", false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if got := OriginAllowed(tc.patterns, r); got != tc.want {
			t.Errorf("OriginAllowed(%q, %q) = %v, want %v", tc.patterns, tc.origin, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"MaxMessageBytes": func(c *Config) { c.Limits.MaxMessageBytes = 10 },
		"SendQueue":       func(c *Config) { c.Limits.SendQueue = 0 },
		"PingInterval":    func(c *Config) { c.Limits.PingInterval = -1 },
		"pattern":         func(c *Config) { c.OriginPatterns = []string{"["} },
		"Logger":          func(c *Config) { c.Logger = nil },
		"InitDeadline":    func(c *Config) { c.InitDeadline = "" },
	} {
		cfg := DefaultConfig()
		mutate(&cfg)
		if _, err := NewHub(cfg); err == nil {
			t.Errorf("%s: NewHub accepted an invalid config", name)
		}
	}
}
