// Package childproc ties the processes meshagent starts for its handlers
// (exec handlers, MCP servers on stdio) to the node that starts them. A
// node killed with SIGKILL, or crashing, cannot stop its children; left
// running, an exec handler's orphan would run beside the run a restarted
// node starts when it re-offers an idempotent task.
package childproc
