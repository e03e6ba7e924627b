package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Task records: what a provider ran or runs for its requesters, kept so
// that a restart neither forgets a task nor runs a request again. The
// store indexes a record by its id and by (requester, request id) and
// forgets it at its expiry; what the record says is its owner's (Data).
//
// Buckets: tasks (id → record), task_reqs (requester ‖ 0 ‖ request id →
// id), task_exp (time(expires) ‖ id → nil); the meta bucket keeps the
// running count and size, so that a bound costs no scan.

// Default task bounds (TaskBounds), as the node uses them.
const (
	// DefaultTasksPerRequester bounds the tasks kept for one requester.
	DefaultTasksPerRequester = 1024
	// DefaultMaxTasks bounds the tasks kept in all.
	DefaultMaxTasks = 65536
	// DefaultMaxTaskBytes bounds the bytes of the tasks kept in all.
	DefaultMaxTaskBytes = 256 << 20
)

// TaskRecord is one task as the store keeps it.
type TaskRecord struct {
	// ID is the task's id, unique in the store (the provider chose it).
	ID string
	// Requester names who asked, as the owner spells it (no NUL).
	Requester string
	// RequestID is the id the requester gave the request.
	RequestID string
	// Final is set once the task has its final answer.
	Final bool
	// Expires is when the store may forget the task (PruneTasks).
	Expires time.Time
	// Data is the owner's encoding of the task: valid JSON, kept verbatim.
	Data json.RawMessage
}

// TaskBounds bound the tasks a store keeps; AddTask refuses a task past
// any of them with ErrFull. Zero fields take the defaults above.
type TaskBounds struct {
	PerRequester int
	Total        int
	Bytes        int64
}

func (b TaskBounds) withDefaults() TaskBounds {
	if b.PerRequester <= 0 {
		b.PerRequester = DefaultTasksPerRequester
	}
	if b.Total <= 0 {
		b.Total = DefaultMaxTasks
	}
	if b.Bytes <= 0 {
		b.Bytes = DefaultMaxTaskBytes
	}
	return b
}

type taskRecord struct {
	Requester string          `json:"requester"`
	RequestID string          `json:"request_id"`
	Final     bool            `json:"final,omitempty"`
	Expires   int64           `json:"expires"`
	Data      json.RawMessage `json:"data"`
}

var (
	metaTaskCount = []byte("task_count")
	metaTaskBytes = []byte("task_bytes")
)

func (r TaskRecord) check() error {
	switch {
	case r.ID == "":
		return invalidf("empty task id")
	case r.Requester == "":
		return invalidf("empty task requester")
	case r.RequestID == "":
		return invalidf("empty task request id")
	case !json.Valid(r.Data):
		return invalidf("task data is not valid JSON")
	}
	for _, f := range [...][2]string{{"task id", r.ID}, {"task requester", r.Requester}, {"task request id", r.RequestID}} {
		if err := checkKeyString(f[0], f[1]); err != nil {
			return err
		}
	}
	return checkTime("task expiry", r.Expires)
}

func taskReqKey(requester, requestID string) []byte {
	return concat([]byte(requester), []byte{0}, []byte(requestID))
}

func taskExpKey(expires int64, id string) []byte {
	return concat(nanoKey(expires), []byte(id))
}

// taskSize is what a record counts against TaskBounds.Bytes.
func taskSize(id string, v []byte) int64 { return int64(len(id) + len(v)) }

func metaInt(tx *bolt.Tx, key []byte) (int64, error) {
	v := bucket(tx, bucketMeta).Get(key)
	if v == nil {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, &CorruptError{Bucket: bucketMeta, Key: key, Err: errors.New("not 8 bytes")}
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func addMetaInt(tx *bolt.Tx, key []byte, d int64) error {
	n, err := metaInt(tx, key)
	if err != nil {
		return err
	}
	return bucket(tx, bucketMeta).Put(key, binary.BigEndian.AppendUint64(nil, uint64(max(n+d, 0))))
}

// AddTask records a new task and returns once it is on disk. A task whose
// id, or whose (requester, request id), is kept already fails with an
// error wrapping ErrExists. Expired tasks are forgotten first. A
// requester at its share (b.PerRequester) makes room by forgetting its own
// finished task that expires first: its newest work matters more than the
// memory of its oldest, and a busy requester is never shut out for a TTL.
// Only a requester whose kept tasks are all still running is refused. A
// task that would take the store past the count or the bytes fails; each
// refusal wraps ErrFull and says which bound.
func (s *Store) AddTask(ctx context.Context, r TaskRecord, b TaskBounds) error {
	if err := r.check(); err != nil {
		return fmt.Errorf("store: add task: %w", err)
	}
	b = b.withDefaults()
	val, err := encode(taskRecord{Requester: r.Requester, RequestID: r.RequestID, Final: r.Final, Expires: r.Expires.UnixNano(), Data: r.Data})
	if err != nil {
		return err
	}
	if len(val) > s.cfg.maxRecordSize {
		return fmt.Errorf("store: add task %s: %w: %d bytes, the limit is %d", r.ID, ErrTooLarge, len(val), s.cfg.maxRecordSize)
	}
	now := s.cfg.clock().UnixNano()
	err = s.update(ctx, func(tx *bolt.Tx) error {
		tasks, reqs := bucket(tx, bucketTasks), bucket(tx, bucketTaskReqs)
		if tasks.Get([]byte(r.ID)) != nil {
			return fmt.Errorf("%w: task %s", ErrExists, r.ID)
		}
		rk := taskReqKey(r.Requester, r.RequestID)
		if id := reqs.Get(rk); id != nil {
			return fmt.Errorf("%w: request %s of %s is task %s", ErrExists, r.RequestID, r.Requester, id)
		}
		if _, err := pruneTasks(tx, now, 1024); err != nil {
			return err
		}
		if err := makeRequesterRoom(tx, r.Requester, b.PerRequester); err != nil {
			return err
		}
		count, err := metaInt(tx, metaTaskCount)
		if err != nil {
			return err
		}
		size, err := metaInt(tx, metaTaskBytes)
		if err != nil {
			return err
		}
		if count >= int64(b.Total) {
			return fmt.Errorf("%w: %d tasks are kept, the limit", ErrFull, count)
		}
		if add := taskSize(r.ID, val); size+add > b.Bytes {
			return fmt.Errorf("%w: tasks keep %d bytes, and %d more would pass the limit of %d", ErrFull, size, add, b.Bytes)
		}
		if err := tasks.Put([]byte(r.ID), val); err != nil {
			return err
		}
		if err := reqs.Put(rk, []byte(r.ID)); err != nil {
			return err
		}
		if err := bucket(tx, bucketTaskExp).Put(taskExpKey(r.Expires.UnixNano(), r.ID), nil); err != nil {
			return err
		}
		if err := addMetaInt(tx, metaTaskCount, 1); err != nil {
			return err
		}
		return addMetaInt(tx, metaTaskBytes, taskSize(r.ID, val))
	})
	if err != nil {
		return fmt.Errorf("store: add task %s: %w", r.ID, err)
	}
	return nil
}

// makeRequesterRoom leaves requester fewer than share tasks, forgetting
// its finished task that expires first when it has share already; a
// requester with share tasks none of which is finished gets ErrFull.
func makeRequesterRoom(tx *bolt.Tx, requester string, share int) error {
	tasks, reqs := bucket(tx, bucketTasks), bucket(tx, bucketTaskReqs)
	prefix := concat([]byte(requester), []byte{0})
	mine := 0
	c := reqs.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		mine++
	}
	if mine < share {
		return nil
	}
	var (
		oldest    TaskRecord
		oldestVal []byte
	)
	for k, id := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, id = c.Next() {
		v := tasks.Get(id)
		if v == nil {
			return &CorruptError{Bucket: bucketTaskReqs, Key: bytes.Clone(k), Err: fmt.Errorf("names task %s, which is not kept", id)}
		}
		r, err := decodeTask(string(id), v)
		if err != nil {
			return err
		}
		if r.Final && (oldestVal == nil || r.Expires.Before(oldest.Expires)) {
			oldest, oldestVal = r, v
		}
	}
	if oldestVal == nil {
		return fmt.Errorf("%w: %d tasks of %s are kept and running, the limit per requester", ErrFull, mine, requester)
	}
	for _, del := range []struct {
		b   string
		key []byte
	}{{bucketTasks, []byte(oldest.ID)}, {bucketTaskReqs, taskReqKey(oldest.Requester, oldest.RequestID)}, {bucketTaskExp, taskExpKey(oldest.Expires.UnixNano(), oldest.ID)}} {
		if err := bucket(tx, del.b).Delete(del.key); err != nil {
			return err
		}
	}
	if err := addMetaInt(tx, metaTaskCount, -1); err != nil {
		return err
	}
	return addMetaInt(tx, metaTaskBytes, -taskSize(oldest.ID, oldestVal))
}

// UpdateTask replaces the Final, Expires and Data of a task kept already
// (its requester and request id stay) and returns once it is on disk; an
// unknown id fails with an error wrapping ErrNotFound. The byte bound is
// not checked here: a task admitted within it keeps its answer, so the
// bytes may pass it by the answers of the tasks running at the time.
func (s *Store) UpdateTask(ctx context.Context, r TaskRecord) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		tasks := bucket(tx, bucketTasks)
		old := tasks.Get([]byte(r.ID))
		if old == nil {
			return fmt.Errorf("%w: task %s", ErrNotFound, r.ID)
		}
		or, err := decodeTask(r.ID, old)
		if err != nil {
			return err
		}
		r.Requester, r.RequestID = or.Requester, or.RequestID
		if err := r.check(); err != nil {
			return err
		}
		val, err := encode(taskRecord{Requester: r.Requester, RequestID: r.RequestID, Final: r.Final, Expires: r.Expires.UnixNano(), Data: r.Data})
		if err != nil {
			return err
		}
		if len(val) > s.cfg.maxRecordSize {
			return fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, len(val), s.cfg.maxRecordSize)
		}
		exp := bucket(tx, bucketTaskExp)
		if err := exp.Delete(taskExpKey(or.Expires.UnixNano(), r.ID)); err != nil {
			return err
		}
		if err := exp.Put(taskExpKey(r.Expires.UnixNano(), r.ID), nil); err != nil {
			return err
		}
		if err := tasks.Put([]byte(r.ID), val); err != nil {
			return err
		}
		return addMetaInt(tx, metaTaskBytes, taskSize(r.ID, val)-taskSize(r.ID, old))
	})
	if err != nil {
		return fmt.Errorf("store: update task %s: %w", r.ID, err)
	}
	return nil
}

func decodeTask(id string, v []byte) (TaskRecord, error) {
	var tr taskRecord
	err := decodeValue(v, &tr)
	switch {
	case err != nil:
	case tr.Requester == "" || tr.RequestID == "":
		err = errors.New("empty requester or request id")
	case !json.Valid(tr.Data):
		err = errors.New("data is not valid JSON")
	}
	if err != nil {
		return TaskRecord{}, &CorruptError{Bucket: bucketTasks, Key: []byte(id), Err: err}
	}
	return TaskRecord{ID: id, Requester: tr.Requester, RequestID: tr.RequestID, Final: tr.Final,
		Expires: time.Unix(0, tr.Expires).UTC(), Data: bytes.Clone(tr.Data)}, nil
}

// Task returns the task of id, or an error wrapping ErrNotFound.
func (s *Store) Task(ctx context.Context, id string) (TaskRecord, error) {
	var out TaskRecord
	err := s.view(ctx, func(tx *bolt.Tx) error {
		v := bucket(tx, bucketTasks).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("%w: task %s", ErrNotFound, id)
		}
		var err error
		out, err = decodeTask(id, v)
		return err
	})
	return out, err
}

// TaskByRequest returns the task of the request requestID of requester,
// or an error wrapping ErrNotFound.
func (s *Store) TaskByRequest(ctx context.Context, requester, requestID string) (TaskRecord, error) {
	var out TaskRecord
	err := s.view(ctx, func(tx *bolt.Tx) error {
		id := bucket(tx, bucketTaskReqs).Get(taskReqKey(requester, requestID))
		if id == nil {
			return fmt.Errorf("%w: request %s of %s", ErrNotFound, requestID, requester)
		}
		v := bucket(tx, bucketTasks).Get(id)
		if v == nil {
			return &CorruptError{Bucket: bucketTaskReqs, Key: taskReqKey(requester, requestID), Err: fmt.Errorf("names task %s, which is not kept", id)}
		}
		var err error
		out, err = decodeTask(string(id), v)
		return err
	})
	return out, err
}

// Tasks calls fn with every task kept (at most TaskBounds.Total), in id
// order, until fn returns false. A record that cannot be decoded ends the
// walk with its *CorruptError.
func (s *Store) Tasks(ctx context.Context, fn func(TaskRecord) bool) error {
	return s.view(ctx, func(tx *bolt.Tx) error {
		c := bucket(tx, bucketTasks).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			r, err := decodeTask(string(k), v)
			if err != nil {
				return err
			}
			if !fn(r) {
				return nil
			}
		}
		return nil
	})
}

// PruneTasks forgets the tasks whose expiry is before now and returns how
// many it forgot. The store's pruner runs it with Prune.
func (s *Store) PruneTasks(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		var n int
		err := s.update(ctx, func(tx *bolt.Tx) error {
			var err error
			n, err = pruneTasks(tx, now.UnixNano(), 1000)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("store: prune tasks: %w", err)
		}
		total += n
		if n < 1000 {
			return total, nil
		}
	}
}

// pruneTasks deletes at most limit tasks that expired before now.
func pruneTasks(tx *bolt.Tx, now int64, limit int) (int, error) {
	tasks, reqs, exp := bucket(tx, bucketTasks), bucket(tx, bucketTaskReqs), bucket(tx, bucketTaskExp)
	var gone [][]byte
	c := exp.Cursor()
	for k, _ := c.First(); k != nil && len(gone) < limit; k, _ = c.Next() {
		if len(k) < 8 {
			return 0, &CorruptError{Bucket: bucketTaskExp, Key: bytes.Clone(k), Err: errors.New("key shorter than a time")}
		}
		if keyNano(k[:8]) >= now {
			break
		}
		gone = append(gone, bytes.Clone(k))
	}
	var freed, deleted int64
	for _, k := range gone {
		id := k[8:]
		if v := tasks.Get(id); v != nil {
			if r, err := decodeTask(string(id), v); err == nil {
				if err := reqs.Delete(taskReqKey(r.Requester, r.RequestID)); err != nil {
					return 0, err
				}
			}
			freed += taskSize(string(id), v)
			deleted++
			if err := tasks.Delete(id); err != nil {
				return 0, err
			}
		}
		if err := exp.Delete(k); err != nil {
			return 0, err
		}
	}
	if len(gone) == 0 {
		return 0, nil
	}
	if err := addMetaInt(tx, metaTaskCount, -deleted); err != nil {
		return 0, err
	}
	return len(gone), addMetaInt(tx, metaTaskBytes, -freed)
}

// TaskUsage returns how many tasks are kept and their bytes.
func (s *Store) TaskUsage(ctx context.Context) (count int, size int64, err error) {
	err = s.view(ctx, func(tx *bolt.Tx) error {
		c, err := metaInt(tx, metaTaskCount)
		if err != nil {
			return err
		}
		size, err = metaInt(tx, metaTaskBytes)
		count = int(c)
		return err
	})
	return count, size, err
}
