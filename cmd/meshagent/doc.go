// Command meshagent runs and drives meshagent agent nodes. See package cli
// for its commands, flags and exit statuses.
package main
