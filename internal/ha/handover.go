package ha

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"

	"github.com/kaon-storage/kaon/internal/kv"
)

// What a server that steps down cleanly hands its successor. The service
// keeps some state in memory only (the namespace: uploads claimed by
// storage servers, quota booked by uploads in flight); a server that takes
// over after a crash cannot have it and starts without, but one that hands
// over can pass it on: once its store took the last write it writes
// Config.HandOver's answer under handoverKey, guarded by its leadership,
// with its term. The next active server takes it (and deletes it) in a
// transaction guarded by its own leadership, before its first commit, and
// uses it only if the term it names is the one in termKey: the server that
// handed over was the last to hold the role, so nothing was committed
// after it (a record left by an older term is dropped).

const handoverKey = "ha/handover"

type handoverRecord struct {
	Term uint64 `json:"term"` // kv.Leadership.Rev of the server that handed over
	Data []byte `json:"data"`
}

// writeHandOver records what the service svc hands over, guarded by l. A
// failure is logged: the successor then starts as after a crash.
func (n *Node) writeHandOver(l kv.Leadership, svc any, log *slog.Logger) {
	if n.cfg.HandOver == nil {
		return
	}
	rec, _ := json.Marshal(handoverRecord{Term: l.Rev(), Data: n.cfg.HandOver(svc)})
	b := n.cfg.Remote.NewBatch()
	b.If(l.Cond())
	b.Put([]byte(handoverKey), rec)
	if err := b.Commit(true); err != nil {
		log.Warn("stepping down: what the service hands over was not recorded (the next active server starts as after a crash)", "err", err)
	}
}

// takeHandOver removes the hand-over record from remote, guarded by cond
// (the new active server's leadership, before its first commit), and
// returns its data if the server that wrote it held the role last; nil
// otherwise.
func takeHandOver(ctx context.Context, remote kv.Engine, cond kv.Cond) ([]byte, error) {
	var data []byte
	err := remote.TxnIf(ctx, []kv.Cond{cond}, func(tx kv.Tx) error {
		data = nil
		v, err := tx.Get([]byte(handoverKey))
		if errors.Is(err, kv.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		tx.Delete([]byte(handoverKey))
		var rec handoverRecord
		if json.Unmarshal(v, &rec) != nil {
			return nil
		}
		t, err := tx.Get([]byte(termKey))
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			return err
		}
		var last struct {
			Rev uint64 `json:"rev"`
		}
		if t != nil && json.Unmarshal(t, &last) == nil && last.Rev == rec.Term {
			data = rec.Data
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return data, nil
}
