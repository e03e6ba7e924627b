package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"hello: provider offers example:greet (greets someone by name)",
		`progress: {"thinking":true}`,
		"response: hello, Ada",
		"bad params: INVALID_MESSAGE",
		"unknown capability: CAPABILITY_NOT_SUPPORTED",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
