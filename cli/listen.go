package cli

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/node"
)

// defaultP2PPort is where a node listens (TCP and QUIC) unless --listen
// says otherwise, as kubo does, so that other machines have a stable
// address to bootstrap to.
const defaultP2PPort = 4001

// defaultListenAddrs are the addresses a node listens on by default.
func defaultListenAddrs() []string {
	p := strconv.Itoa(defaultP2PPort)
	return []string{"/ip4/0.0.0.0/tcp/" + p, "/ip4/0.0.0.0/udp/" + p + "/quic-v1"}
}

// defaultListen returns the default listen addresses on host: port 4001
// for TCP and QUIC when both are free, otherwise random ports, with a
// warning that says so and what to do.
func defaultListen(host string, port int, log *slog.Logger) []ma.Multiaddr {
	if err := portFree(host, port); err != nil {
		log.Warn(fmt.Sprintf("port %d is taken (another node?), so this node listens on random ports and its address changes at each start; pass --listen to choose a port", port), "err", err)
		return mustMultiaddrs(strings.ReplaceAll(node.DefaultListenAddrs[0], "0.0.0.0", host), strings.ReplaceAll(node.DefaultListenAddrs[1], "0.0.0.0", host))
	}
	p := strconv.Itoa(port)
	return mustMultiaddrs("/ip4/"+host+"/tcp/"+p, "/ip4/"+host+"/udp/"+p+"/quic-v1")
}

// portFree reports whether TCP and UDP port are free on host (an IPv4
// address). Another libp2p node holding the port with SO_REUSEPORT still
// makes a plain bind fail, so two nodes never share it.
func portFree(host string, port int) error {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp4", addr)
	if err != nil {
		return err
	}
	_ = l.Close()
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return err
	}
	return pc.Close()
}

func mustMultiaddrs(ss ...string) []ma.Multiaddr {
	out := make([]ma.Multiaddr, len(ss))
	for i, s := range ss {
		out[i] = ma.StringCast(s)
	}
	return out
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// writeNextSteps tells a person at a terminal how to grow the mesh from
// this node: what another machine and a second node on this machine pass
// to --bootstrap.
func writeNextSteps(w io.Writer, addrs []ma.Multiaddr, apiAddr string) error {
	var local, remote string
	for _, a := range addrs {
		if _, err := a.ValueForProtocol(ma.P_TCP); err != nil {
			continue
		}
		ip, err := a.ValueForProtocol(ma.P_IP4)
		if err != nil {
			continue
		}
		if net.ParseIP(ip).IsLoopback() {
			if local == "" {
				local = a.String()
			}
		} else if remote == "" {
			remote = a.String()
		}
	}
	if local == "" && remote == "" {
		return nil
	}
	var b strings.Builder
	b.WriteString("\nNext steps:\n")
	if remote != "" {
		fmt.Fprintf(&b, "  from another machine:  meshagent node --bootstrap %s\n", remote)
	}
	if local == "" {
		local = remote
	}
	fmt.Fprintf(&b, "  a second node here:    meshagent node --data \"$(mktemp -d)\" --api 127.0.0.1:0 --bootstrap %s\n", local)
	if apiAddr != "" {
		api := ""
		if apiAddr != defaultAPIAddr {
			api = " --api " + apiAddr
		}
		fmt.Fprintf(&b, "  look around:           meshagent status%s, meshagent peers%s\n", api, api)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
