package cli

import (
	"encoding/json"
	"fmt"
	"os"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Receipt flags. They have no environment variables: a variable left set
// would change what every call prints, or what every verify accepts.
const (
	flagReceipt       = "receipt"
	flagReceiptOut    = "receipt-out"
	flagProvider      = "provider"
	flagCorrelationID = "correlation-id"
)

// receiptFlags are call's.
func receiptFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.BoolFlag{Name: flagReceipt, Usage: "ask for the provider's signed final response (a delivery receipt) and print it after the result (--json: as the final line's \"receipt\")"},
		&ucli.StringFlag{Name: flagReceiptOut, Usage: "ask for the receipt and write it to `FILE` (one line) instead of printing it"},
	}
}

// verifyReceiptFlags are verify's.
func verifyReceiptFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: flagProvider, Usage: "check a receipt: signed by agent `AGENT_ID`, the provider that was called"},
		&ucli.StringFlag{Name: flagCorrelationID, Aliases: []string{"task"}, Usage: "check a receipt: it answers the request `ID` (the task id call printed)"},
	}
}

// writeReceipt delivers the receipt of a call made with --receipt or
// --receipt-out (not --json, where it is a member of the final line).
func (r *runState) writeReceipt(c *ucli.Context, receipt json.RawMessage, provider, taskID string) error {
	if len(receipt) == 0 {
		return exitErrorf(ExitFailure, "call: the node returned no receipt (it may predate receipts)")
	}
	path := c.String(flagReceiptOut)
	if path == "" {
		_, err := fmt.Fprintf(r.stdout, "%s\n", receipt)
		return err
	}
	if err := os.WriteFile(expandHome(path), append(receipt, '\n'), 0o644); err != nil {
		return exitErrorf(ExitFailure, "call: write the receipt: %v", err)
	}
	verify := "meshagent verify --correlation-id " + taskID
	if provider != "" {
		verify = "meshagent verify --provider " + provider + " --correlation-id " + taskID
	}
	r.stderr.printf("receipt written to %s (%s < %s)\n", path, verify, path)
	return nil
}

// receiptWant is what verify checks a receipt against.
type receiptWant struct {
	provider      string // an agent id, or "" for any signer
	correlationID string // or "" for any request
}

// receiptWanted reads verify's receipt flags; ok is false when none is
// given (plain envelope verification).
func (r *runState) receiptWanted(c *ucli.Context) (w receiptWant, ok bool, err error) {
	w = receiptWant{provider: c.String(flagProvider), correlationID: c.String(flagCorrelationID)}
	if w.provider != "" {
		if _, err := sign.ParseAgentID(w.provider); err != nil {
			return w, false, r.flagError(c, flagProvider, "%q is not an agent id: %v", w.provider, err)
		}
	}
	if len(w.correlationID) > protocol.MaxIDLen {
		return w, false, r.flagError(c, flagCorrelationID, "longer than %d bytes", protocol.MaxIDLen)
	}
	return w, c.IsSet(flagProvider) || c.IsSet(flagCorrelationID), nil
}

// checkReceipt is verify's receipt path: doc is a receipt (a signed
// response envelope), or a line printed by `call --receipt --json` that
// carries one as "receipt"; it must verify (protocol.OpenReceipt) and be
// the one wanted. Errors are *protocol.Error.
func checkReceipt(doc []byte, want receiptWant) (*protocol.Receipt, error) {
	r, err := protocol.OpenReceipt(receiptOf(doc))
	if err != nil {
		return nil, err
	}
	if err := r.Check(want.provider, want.correlationID); err != nil {
		return nil, err
	}
	return r, nil
}

// receiptOf returns the "receipt" member of a call's JSON line, or doc
// itself when it is not one (an envelope has "signature" instead).
func receiptOf(doc []byte) []byte {
	var line struct {
		Receipt   json.RawMessage `json:"receipt"`
		Signature json.RawMessage `json:"signature"`
	}
	if protocol.DecodeStrict(doc, &line, protocol.AllowUnknown()) != nil || len(line.Receipt) == 0 || line.Signature != nil {
		return doc
	}
	return line.Receipt
}

// verifyReceipt runs verify with receipt flags.
func (r *runState) verifyReceipt(doc []byte, want receiptWant) error {
	rc, err := checkReceipt(doc, want)
	if err != nil {
		pe := protocol.AsError(err)
		return &ExitError{Code: ExitCodeFor(pe.Code), Err: fmt.Errorf("not a valid receipt: %s: %s", pe.Code, pe.Message)}
	}
	_, err = fmt.Fprintf(r.stdout, "valid: receipt signed by %s for request %s (%s)\n", rc.Provider, rc.Response.CorrelationID, rc.Response.Status)
	return err
}
