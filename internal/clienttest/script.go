package clienttest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// script is a running client whose stdout is read line by line.
type script struct {
	cmd    *exec.Cmd
	lines  chan string
	mu     sync.Mutex
	out    strings.Builder
	stderr bytes.Buffer
	waited bool
}

// startScript starts c's program with args; it is killed at the end of
// the test unless wait saw it exit.
func startScript(ctx context.Context, t *testing.T, c Client, args []string) *script {
	t.Helper()
	s := &script{cmd: exec.CommandContext(ctx, c.Command[0], args...), lines: make(chan string, 64)}
	s.cmd.Dir = c.Dir
	s.cmd.Stderr = &s.stderr
	if len(c.Env) > 0 {
		s.cmd.Env = append(os.Environ(), c.Env...)
	}
	s.cmd.WaitDelay = 5 * time.Second
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.mu.Lock()
			fmt.Fprintln(&s.out, sc.Text())
			s.mu.Unlock()
			s.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if !s.waited {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	return s
}

// waitFor returns the first line starting with prefix, failing the test if
// the script ends (or the context expires) first.
func (s *script) waitFor(t *testing.T, prefix string) string {
	t.Helper()
	for line := range s.lines {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	t.Fatalf("the script ended without printing %q: %v\nstdout:\n%s\nstderr:\n%s", prefix, s.cmd.Wait(), s.output(), s.stderr.String())
	return ""
}

// wait waits for the script to exit 0 and returns its whole stdout.
func (s *script) wait(t *testing.T) string {
	t.Helper()
	for range s.lines { // drain to EOF before Wait closes the pipe
	}
	s.waited = true
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("script: %v\nstdout:\n%s\nstderr:\n%s", err, s.output(), s.stderr.String())
	}
	return s.output()
}

func (s *script) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}
