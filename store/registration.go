package store

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Register stores a lobby registration, replacing any earlier one of the
// same agent (whose token then stops working). Only the SHA-256 of the
// token is written; see doc.go, "Tokens". A token already held by another
// agent is refused with ErrExists.
func (s *Store) Register(ctx context.Context, r Registration) error {
	if r.AgentID == "" {
		return invalidf("registration without an agent id")
	}
	if err := checkKeyString("agent id", r.AgentID); err != nil {
		return err
	}
	if r.Token == "" {
		return invalidf("registration of %s without a token", r.AgentID)
	}
	if len(r.Capabilities) > 0 && !json.Valid(r.Capabilities) {
		return invalidf("capabilities of %s are not valid JSON", r.AgentID)
	}
	if len(r.Capabilities) > s.cfg.maxRecordSize {
		return fmt.Errorf("%w: capabilities are %d bytes, the limit is %d", ErrTooLarge, len(r.Capabilities), s.cfg.maxRecordSize)
	}
	if r.RegisteredAt.IsZero() {
		r.RegisteredAt = s.cfg.clock()
	}
	if err := checkTime("registration time", r.RegisteredAt); err != nil {
		return err
	}
	h := sha256.Sum256([]byte(r.Token))
	v, err := encode(regRecord{AgentID: r.AgentID, TokenHash: h[:], Capabilities: r.Capabilities, RegisteredAt: r.RegisteredAt.UnixNano()})
	if err != nil {
		return err
	}
	err = s.update(ctx, func(tx *bolt.Tx) error {
		regs, toks := bucket(tx, bucketRegs), bucket(tx, bucketRegTokens)
		if owner := toks.Get(h[:]); owner != nil && string(owner) != r.AgentID {
			return fmt.Errorf("%w: token is held by another agent", ErrExists)
		}
		if err := unregister(tx, r.AgentID); err != nil {
			return err
		}
		if err := regs.Put([]byte(r.AgentID), v); err != nil {
			return err
		}
		return toks.Put(h[:], []byte(r.AgentID))
	})
	if err != nil {
		return fmt.Errorf("store: register %s: %w", r.AgentID, err)
	}
	return nil
}

// unregister deletes agentID's registration and token, if any.
func unregister(tx *bolt.Tx, agentID string) error {
	regs := bucket(tx, bucketRegs)
	v := regs.Get([]byte(agentID))
	if v == nil {
		return nil
	}
	old, err := decodeRegistration(bucketRegs, []byte(agentID), v)
	if err == nil {
		if err := bucket(tx, bucketRegTokens).Delete(old.TokenHash); err != nil {
			return err
		}
	}
	// A corrupt registration is deleted anyway: it is being replaced.
	return regs.Delete([]byte(agentID))
}

func (r regRecord) registration() Registration {
	return Registration{AgentID: r.AgentID, Capabilities: r.Capabilities, RegisteredAt: time.Unix(0, r.RegisteredAt).UTC()}
}

// RegistrationByToken returns the registration whose token is token, or
// ErrNotFound. The returned Token is empty.
func (s *Store) RegistrationByToken(ctx context.Context, token string) (Registration, error) {
	if token == "" {
		return Registration{}, fmt.Errorf("store: registration by token: %w", ErrNotFound)
	}
	h := sha256.Sum256([]byte(token))
	var out Registration
	err := s.view(ctx, func(tx *bolt.Tx) error {
		agent := bucket(tx, bucketRegTokens).Get(h[:])
		if agent == nil {
			return ErrNotFound
		}
		v := bucket(tx, bucketRegs).Get(agent)
		if v == nil {
			return &CorruptError{Bucket: bucketRegTokens, Key: h[:], Err: fmt.Errorf("points at missing registration %q", agent)}
		}
		r, err := decodeRegistration(bucketRegs, agent, v)
		if err != nil {
			return err
		}
		if subtle.ConstantTimeCompare(r.TokenHash, h[:]) != 1 {
			return ErrNotFound
		}
		out = r.registration()
		return nil
	})
	if err != nil {
		return Registration{}, fmt.Errorf("store: registration by token: %w", err)
	}
	return out, nil
}

// Registration returns agentID's registration, or ErrNotFound. The returned
// Token is empty.
func (s *Store) Registration(ctx context.Context, agentID string) (Registration, error) {
	var out Registration
	err := s.view(ctx, func(tx *bolt.Tx) error {
		v := bucket(tx, bucketRegs).Get([]byte(agentID))
		if v == nil {
			return ErrNotFound
		}
		r, err := decodeRegistration(bucketRegs, []byte(agentID), v)
		out = r.registration()
		return err
	})
	if err != nil {
		return Registration{}, fmt.Errorf("store: registration %s: %w", agentID, err)
	}
	return out, nil
}

// Registrations returns every registration, ordered by agent id.
func (s *Store) Registrations(ctx context.Context) ([]Registration, error) {
	var out []Registration
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return bucket(tx, bucketRegs).ForEach(func(k, v []byte) error {
			r, err := decodeRegistration(bucketRegs, k, v)
			if err != nil {
				return err
			}
			out = append(out, r.registration())
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: registrations: %w", err)
	}
	return out, nil
}

// Unregister deletes agentID's registration; its token stops working. It
// returns ErrNotFound when the agent is not registered.
func (s *Store) Unregister(ctx context.Context, agentID string) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		if bucket(tx, bucketRegs).Get([]byte(agentID)) == nil {
			return ErrNotFound
		}
		return unregister(tx, agentID)
	})
	if err != nil {
		return fmt.Errorf("store: unregister %s: %w", agentID, err)
	}
	return nil
}
