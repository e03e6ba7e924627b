package node

import (
	"io"
	"sync"
	"time"
)

// frameWriter writes whole frames to a stream shared by many goroutines.
// Frames that arrive while a write is in progress are gathered into one
// batch, written by one of their senders in a single stream write as soon
// as the write before it returns: with many calls in flight, a burst costs
// one yamux frame, one noise record and one system call instead of one
// each, and a lone frame is written at once, uncopied.
//
// Every sender returns once its own frame was written (or failed), so its
// caller knows whether the frame can have reached the peer. After a failed
// write the writer is broken: every later write fails with that error.
type frameWriter struct {
	s       deadlineWriter
	timeout time.Duration // deadline of each stream write

	mu      sync.Mutex
	writing bool        // a sender is writing; the others queue in next
	next    *frameBatch // frames waiting for the write in progress
	err     error       // the first failed write's error
}

// frameBatch is frames gathered behind a write in progress. The sender
// that started it writes it when lead is closed; every sender in it waits
// for done.
type frameBatch struct {
	buf  []byte
	lead chan struct{}
	done chan struct{}
	err  error
}

// deadlineWriter is the part of a stream a frameWriter uses.
type deadlineWriter interface {
	io.Writer
	SetWriteDeadline(time.Time) error
}

func newFrameWriter(s deadlineWriter, timeout time.Duration) *frameWriter {
	return &frameWriter{s: s, timeout: timeout}
}

// write writes frame, alone or with the frames of a batch, and returns
// the error of the stream write that carried it.
func (w *frameWriter) write(frame []byte) error {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	if !w.writing {
		w.writing = true
		w.mu.Unlock()
		err := w.flush(frame)
		w.handOver()
		return err
	}
	b := w.next
	first := b == nil
	if first {
		b = &frameBatch{lead: make(chan struct{}), done: make(chan struct{})}
		w.next = b
	}
	b.buf = append(b.buf, frame...)
	w.mu.Unlock()
	if !first {
		<-b.done
		return b.err
	}
	<-b.lead // the write before this batch returned: it is this sender's turn
	b.err = w.flush(b.buf)
	close(b.done)
	w.handOver()
	return b.err
}

// flush writes p to the stream, recording the first failure.
func (w *frameWriter) flush(p []byte) error {
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		return err
	}
	_ = w.s.SetWriteDeadline(time.Now().Add(w.timeout))
	if _, err = w.s.Write(p); err != nil {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
	return err
}

// handOver ends the current sender's turn: the batch gathered meanwhile,
// if any, is written next by the sender that started it, so that each
// sender writes one batch at most, its own, and is never held up writing
// the frames that queued behind it.
func (w *frameWriter) handOver() {
	w.mu.Lock()
	b := w.next
	w.next = nil
	if b == nil {
		w.writing = false
	}
	w.mu.Unlock()
	if b != nil {
		close(b.lead)
	}
}
