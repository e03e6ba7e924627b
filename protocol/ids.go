package protocol

import "github.com/libp2p/go-libp2p/core/protocol"

// Version is the AgentProtocol version string every envelope carries.
const Version = "agentprotocol/0.1"

// HelloVersion is the version carried in hello payloads.
const HelloVersion = "0.1"

// libp2p protocol IDs of meshagent's direct streams.
const (
	// HelloProtocol carries one hello envelope each way per stream.
	HelloProtocol protocol.ID = "/meshagent/hello/0.1.0"
	// RequestProtocol carries request envelopes one way and
	// response/error envelopes the other, many per stream, matched by
	// correlation id.
	RequestProtocol protocol.ID = "/meshagent/request/0.1.0"
	// MailboxProtocol carries one mailbox request (deposit, fetch, ack)
	// and its answer per stream, between an agent and a relay holding
	// messages for agents that are away.
	MailboxProtocol protocol.ID = "/meshagent/mailbox/1.0.0"
	// StoreProtocol carries history queries to a history keeper and pages
	// of the signed topic messages it kept back, many per stream.
	StoreProtocol protocol.ID = "/meshagent/store/1.0.0"
)

// Features this implementation announces in hello.
var Features = []string{"signed-messages", "streaming", "in-progress"}
