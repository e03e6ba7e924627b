//go:build chaos && linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// natConnsEnv, when set to a local API address, makes the test binary print
// that node's mesh.connections as JSON and exit: the test runs it inside a
// node's network namespace, where the node's loopback API is.
const natConnsEnv = "MESHAGENT_NATLAB_CONNS"

// natLogEnv, when set, is passed to the lab's processes as their libp2p
// log levels (GOLOG_LOG_LEVEL), e.g. "p2p-holepunch=debug".
const natLogEnv = "MESHAGENT_NATLAB_LOG"

func init() {
	if api := os.Getenv(natConnsEnv); api != "" {
		os.Exit(printConns(api))
	}
}

func printConns(api string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, "ws://"+api+"/", rpc.WithClientInfo(rpc.ClientInfo{Name: "natlab"}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cl.Close()
	var conns json.RawMessage
	if err := cl.Call(ctx, rpc.MethodMeshConnections, nil, &conns); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(string(conns))
	return 0
}

// natLab is a small internet in network namespaces: "pub" routes between
// the public side of two home routers and runs the relay; each router
// masquerades its LAN, where one node runs.
//
//	node a 192.168.1.2 ─ router a 5.0.1.2 ─┐
//	                                        pub 5.0.1.1, 5.0.2.1 (relay)
//	node b 192.168.2.2 ─ router b 5.0.2.2 ─┘
//
// The public side uses addresses outside every private and documentation
// range: libp2p punches holes only to addresses it takes for public.
// Linux's MASQUERADE keeps a connection's source port when it is free (no
// --random), so a node's UDP port maps to the same public port whichever
// peer it sends to (endpoint-independent mapping), and lets in only what
// answers a packet sent out (the routers drop everything else, as home
// routers do): the NAT DCUtR is designed for.
type natLab struct {
	t      *testing.T
	prefix string
}

// natSkip skips t unless it can build namespaces: root, ip and iptables.
func natSkip(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: the NAT scenario builds network namespaces, which needs root")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipped: the NAT scenario needs %s (iproute2, iptables) on PATH", tool)
		}
	}
	probe := fmt.Sprintf("ma%d-probe", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("skipped: cannot create a network namespace: %v: %s", err, out)
	}
	_ = exec.Command("ip", "netns", "del", probe).Run()
}

func newNATLab(t *testing.T, name string) *natLab {
	l := &natLab{t: t, prefix: fmt.Sprintf("ma%d-%s-", os.Getpid(), name)}
	pub := l.netns("pub")
	l.in(pub, "ip", "link", "set", "lo", "up")
	l.in(pub, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
	for i, side := range []string{"a", "b"} {
		router, home := l.netns("r"+side), l.netns(side)
		wan := fmt.Sprintf("5.0.%d", i+1)
		lan := fmt.Sprintf("192.168.%d", i+1)
		l.run("ip", "link", "add", "wan", "netns", router, "type", "veth", "peer", "name", "to"+side, "netns", pub)
		l.run("ip", "link", "add", "lan", "netns", router, "type", "veth", "peer", "name", "eth0", "netns", home)
		l.in(pub, "ip", "addr", "add", wan+".1/24", "dev", "to"+side)
		l.in(pub, "ip", "link", "set", "to"+side, "up")
		for _, c := range [][]string{
			{"ip", "link", "set", "lo", "up"},
			{"ip", "addr", "add", wan + ".2/24", "dev", "wan"},
			{"ip", "link", "set", "wan", "up"},
			{"ip", "addr", "add", lan + ".1/24", "dev", "lan"},
			{"ip", "link", "set", "lan", "up"},
			{"ip", "route", "add", "default", "via", wan + ".1"},
			{"sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"},
			{"iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "wan", "-j", "MASQUERADE"},
			{"iptables", "-A", "FORWARD", "-i", "wan", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
			{"iptables", "-A", "FORWARD", "-i", "wan", "-j", "DROP"},
			{"iptables", "-A", "INPUT", "-i", "wan", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
			{"iptables", "-A", "INPUT", "-i", "wan", "-j", "DROP"},
		} {
			l.in(router, c...)
		}
		l.in(home, "ip", "link", "set", "lo", "up")
		l.in(home, "ip", "addr", "add", lan+".2/24", "dev", "eth0")
		l.in(home, "ip", "link", "set", "eth0", "up")
		l.in(home, "ip", "route", "add", "default", "via", lan+".1")
	}
	return l
}

// netns creates a namespace the test deletes when it ends, pass or fail.
func (l *natLab) netns(name string) string {
	ns := l.prefix + name
	l.run("ip", "netns", "add", ns)
	l.t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			l.t.Errorf("delete namespace %s: %v: %s", ns, err, out)
		}
	})
	return ns
}

func (l *natLab) run(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// in runs a setup command inside namespace ns.
func (l *natLab) in(ns string, args ...string) {
	l.t.Helper()
	l.run(append([]string{"ip", "netns", "exec", ns}, args...)...)
}

// start runs `meshagent command` inside namespace ns (a process of its
// own, killed when the test ends).
func (l *natLab) start(ns, command, name string, args ...string) *nodeProc {
	l.t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", l.prefix + ns, binary}, commandArgs(command, name, args...)...)...)
	cmd.Env = env(l.t)
	if v := os.Getenv(natLogEnv); v != "" {
		cmd.Env = append(cmd.Env, "GOLOG_LOG_LEVEL="+v)
	}
	return launch(l.t, name, cmd)
}

// meshagent runs a short-lived command inside namespace ns.
func (l *natLab) meshagent(ns string, args ...string) result {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", l.prefix + ns, binary}, args...)...)
	cmd.Env = env(l.t)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		l.t.Fatalf("meshagent %v: %v", args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

// conns returns the open connections of the node in ns to agent id.
func (l *natLab) conns(ns string, n *nodeProc, id string) ([]protocol.ConnInfo, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", "netns", "exec", l.prefix+ns, self)
	cmd.Env = append(env(l.t), natConnsEnv+"="+n.started.API)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("mesh.connections of %s: %w", n.name, err)
	}
	var all, to []protocol.ConnInfo
	if err := json.Unmarshal(out, &all); err != nil {
		return nil, fmt.Errorf("mesh.connections %q: %w", out, err)
	}
	for _, c := range all {
		if c.AgentID == id {
			to = append(to, c)
		}
	}
	return to, nil
}

// natScenario is the lab with a relay in pub and a node behind each NAT,
// both reserving a slot on the relay; node b serves echo.
type natScenario struct {
	lab          *natLab
	relay, a, b  *nodeProc
	relayAddr    string
	circuitToB   string
	started      time.Time
	connectedVia string
	relayedAfter time.Duration // from the start of the lab to the relayed connection
}

func startNATScenario(t *testing.T, name string) *natScenario {
	s := &natScenario{lab: newNATLab(t, name), started: time.Now()}
	dir := t.TempDir()
	quic := []string{"--listen", "/ip4/0.0.0.0/udp/4001/quic-v1", "--listen", "/ip4/0.0.0.0/tcp/4001"}
	s.relay = s.lab.start("pub", "relay", "relay", append(quic, "--data", filepath.Join(dir, "relay"), "--ws", "127.0.0.1:0")...)
	s.relayAddr = "/ip4/5.0.1.1/udp/4001/quic-v1/p2p/" + s.relay.started.AgentID
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[{"name": "echo", "handler": "echo"}]`)
	s.a = s.lab.start("a", "node", "a", append(quic, "--data", filepath.Join(dir, "a"), "--relay", s.relayAddr)...)
	s.b = s.lab.start("b", "node", "b", append(quic, "--data", filepath.Join(dir, "b"), "--relay", s.relayAddr, "--capabilities", caps)...)
	s.circuitToB = s.relayAddr + "/p2p-circuit/p2p/" + s.b.started.AgentID
	return s
}

// connectThroughRelay makes a dial b through the relay (b's reservation may
// still be on its way) and calls b's echo.
func (s *natScenario) connectThroughRelay(t *testing.T) {
	wait.For(t, 30*time.Second, func() error {
		res := s.lab.meshagent("a", "connect", "--json", "--timeout", "5s", "--api", s.a.started.API, s.circuitToB)
		if res.code != 0 {
			return fmt.Errorf("connect through the relay exited %d: %s", res.code, res.stderr)
		}
		var c struct {
			Addr string `json:"addr"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &c); err != nil {
			return fmt.Errorf("connect --json %q: %w", res.stdout, err)
		}
		s.connectedVia = c.Addr
		s.relayedAfter = time.Since(s.started)
		return nil
	})
	s.call(t)
}

func (s *natScenario) call(t *testing.T) {
	t.Helper()
	wait.For(t, 20*time.Second, func() error {
		res := s.lab.meshagent("a", "call", "--json", "--api", s.a.started.API, "--params", `{"hi":"b"}`, s.b.started.AgentID, "echo")
		var out struct {
			Status string          `json:"status"`
			Result json.RawMessage `json:"result"`
		}
		_ = json.Unmarshal([]byte(res.stdout), &out)
		if res.code != 0 || out.Status != "success" || string(out.Result) != `{"hi":"b"}` {
			return fmt.Errorf("call a→b exited %d: %s %s", res.code, res.stdout, res.stderr)
		}
		return nil
	})
}

// TestChaosNAT: two nodes behind masquerading NATs reach each other
// through a relay, then hole punching (DCUtR) gives them a direct
// connection; where the NATs drop each other's packets, the relayed
// connection keeps serving calls.
func TestChaosNAT(t *testing.T) {
	natSkip(t)
	t.Run("hole punch", func(t *testing.T) {
		s := startNATScenario(t, "punch")
		s.connectThroughRelay(t)
		var direct protocol.ConnInfo
		wait.For(t, 30*time.Second, func() error {
			conns, err := s.lab.conns("a", s.a, s.b.started.AgentID)
			if err != nil {
				return err
			}
			for _, c := range conns {
				if !c.Relayed {
					direct = c
					return nil
				}
			}
			return fmt.Errorf("a's connections to b are all relayed: %+v", conns)
		})
		if !strings.HasPrefix(direct.RemoteAddr, "/ip4/5.0.2.2/") {
			t.Errorf("the direct connection goes to %s, want b's router's public address 5.0.2.2", direct.RemoteAddr)
		}
		s.call(t)
		figures(t, "nat", "punched: relayed through %s after %s, direct to %s after %s",
			s.connectedVia, s.relayedAfter.Round(100*time.Millisecond), direct.RemoteAddr, time.Since(s.started).Round(100*time.Millisecond))
	})
	t.Run("punching blocked", func(t *testing.T) {
		s := startNATScenario(t, "block")
		// Each router drops whatever comes from the other's public address:
		// no simultaneous open can pass, the relay still can.
		s.lab.in(s.lab.prefix+"ra", "iptables", "-I", "INPUT", "1", "-s", "5.0.2.2", "-j", "DROP")
		s.lab.in(s.lab.prefix+"rb", "iptables", "-I", "INPUT", "1", "-s", "5.0.1.2", "-j", "DROP")
		s.lab.in(s.lab.prefix+"ra", "iptables", "-I", "FORWARD", "1", "-s", "5.0.2.2", "-j", "DROP")
		s.lab.in(s.lab.prefix+"rb", "iptables", "-I", "FORWARD", "1", "-s", "5.0.1.2", "-j", "DROP")
		s.connectThroughRelay(t)
		// DCUtR makes its attempts (each a few seconds) while the relayed
		// connection keeps working.
		wait.Holds(t, 8*time.Second, func() error {
			conns, err := s.lab.conns("a", s.a, s.b.started.AgentID)
			if err != nil {
				return err
			}
			if len(conns) == 0 {
				return errors.New("a has no connection to b")
			}
			for _, c := range conns {
				if !c.Relayed {
					return fmt.Errorf("a direct connection to b through the blocking NATs: %+v", c)
				}
			}
			return nil
		})
		s.call(t)
		figures(t, "nat", "blocked: relayed through %s after %s, calls served, no direct connection for 8 s",
			s.connectedVia, s.relayedAfter.Round(100*time.Millisecond))
	})
}
