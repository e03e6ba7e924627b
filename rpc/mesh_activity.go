package rpc

// Method names of what a node's operator watches, served by
// localapi.RegisterOperator on a node's local API only (like
// mesh.status).
const (
	// MethodMeshConnections returns the node's open connections
	// ([]protocol.ConnInfo), each saying whether it is direct or relayed.
	MethodMeshConnections = "mesh.connections"
	// MethodMeshRecentCalls returns the last calls the node sent or
	// served ([]protocol.CallRecord), newest first, with their outcome.
	MethodMeshRecentCalls = "mesh.recentCalls"
)
