package protocol

// DurableInfo describes a durable subscription name whose position a node
// keeps, as its operator sees it (mesh.durables).
type DurableInfo struct {
	// Name is the durable subscription's name.
	Name string `json:"name"`
	// Bytes is the size of its saved position.
	Bytes int `json:"bytes"`
	// Active reports a subscription of the name running on the node now;
	// it cannot be forgotten until unsubscribed.
	Active bool `json:"active"`
}

// DurableList is what a node tells of the durable subscription names it
// keeps positions for: the names, sorted, and how many it keeps at most
// (a new name past Limit is refused until one is forgotten; 0 when the
// node does not know its bound).
type DurableList struct {
	Durables []DurableInfo `json:"durables"`
	Limit    int           `json:"limit"`
}
