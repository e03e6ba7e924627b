//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// TestBusSubscribeGroup: two `meshagent bus-subscribe job:* --group
// workers` processes on a node's local API share what `send-message`
// sends, each message printed by one of them; SIGINT ends one with exit
// 0; a command without TOPIC is a usage error.
func TestBusSubscribeGroup(t *testing.T) {
	n := startNode(t, "bus-subscribe", "--data", t.TempDir())
	api := "ws://" + n.started.API + "/"
	type member struct {
		cmd         *exec.Cmd
		out, errOut *syncBuffer
		exited      chan error
	}
	var members []*member
	for range 2 {
		m := &member{out: &syncBuffer{}, errOut: &syncBuffer{}, exited: make(chan error, 1)}
		m.cmd = exec.Command(binary, "bus-subscribe", "job:*", "--group", "workers", "--bus", api)
		m.cmd.Env = env(t)
		m.cmd.Stdout, m.cmd.Stderr = m.out, m.errOut
		if err := m.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { m.exited <- m.cmd.Wait() }()
		t.Cleanup(func() {
			_ = m.cmd.Process.Kill()
			<-m.exited
			if t.Failed() {
				t.Logf("bus-subscribe:\n%s%s", m.out, m.errOut)
			}
		})
		wait.For(t, 30*time.Second, func() error {
			if !strings.Contains(m.errOut.String(), "subscribed") {
				return fmt.Errorf("not subscribed yet: %s", m.errOut)
			}
			return nil
		})
		members = append(members, m)
	}
	const total = 6
	for i := range total {
		meshagent(t, "send-message", "--bus", api, "--topic", fmt.Sprintf("job:%d", i), "--payload", fmt.Sprintf(`{"type":"job","n":%d}`, i)).must(t, 0)
	}
	printed := func(m *member) []int {
		var ns []int
		for _, l := range strings.Split(strings.TrimSpace(m.out.String()), "\n") {
			var d struct {
				Topic   string
				Payload struct{ N int }
			}
			if json.Unmarshal([]byte(l), &d) == nil && d.Topic == fmt.Sprintf("job:%d", d.Payload.N) {
				ns = append(ns, d.Payload.N)
			}
		}
		return ns
	}
	var all []int
	wait.For(t, 30*time.Second, func() error {
		all = append(printed(members[0]), printed(members[1])...)
		if len(all) < total {
			return fmt.Errorf("%d of %d printed", len(all), total)
		}
		return nil
	})
	slices.Sort(all)
	if want := []int{0, 1, 2, 3, 4, 5}; !slices.Equal(all, want) {
		t.Errorf("the group printed %v, want each of %v once", all, want)
	}
	for i, m := range members {
		if len(printed(m)) == 0 {
			t.Errorf("member %d printed nothing", i)
		}
	}

	m := members[0]
	if err := m.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-m.exited:
		m.exited <- err
		if err != nil {
			t.Errorf("bus-subscribe after SIGINT: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("bus-subscribe did not exit on SIGINT")
	}

	meshagent(t, "bus-subscribe", "--bus", api).must(t, 2)
}
