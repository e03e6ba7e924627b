package pubsub

import (
	"errors"
	"testing"
	"time"
)

func TestNewRefusesBadConfig(t *testing.T) {
	h, s := newHost(t), newSigner(t)
	for name, opt := range map[string]Option{
		"max message size of a signature": WithMaxMessageSize(64),
		"negative publish wait":           WithPublishWait(-time.Second),
		"negative min peers":              WithMinPeers(-1),
		"empty queue":                     WithQueueSize(0),
	} {
		if b, err := New(h, s, opt); !errors.Is(err, ErrInvalidConfig) {
			if err == nil {
				_ = b.Close()
			}
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
	b, err := New(h, s, nil, WithQueueSize(1))
	if err != nil {
		t.Fatalf("New with a nil option = %v", err)
	}
	_ = b.Close()
}
