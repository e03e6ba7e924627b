// Package workers runs a connection's jobs on goroutines that may serve
// several of them one after another. Starting a goroutine per job is
// cheap, but a job that encodes or decodes JSON grows the fresh
// goroutine's stack, copying it, every time; on a busy connection that
// was a visible part of the CPU per message. A goroutine whose job has
// ended waits a short while for the next one instead of ending, so under
// load the same few goroutines, their stacks grown once, serve the jobs.
//
// Concurrency is not bounded or changed here: every job still has a
// goroutine of its own for as long as it runs (a waiting goroutine takes
// a job only when it is free), so a slow job never delays another. The
// owner bounds how many run at once, and counts the goroutines in its
// WaitGroup so that its Close waits for them; a waiting goroutine ends
// when the owner's done channel closes or when it has waited Idle.
package workers
