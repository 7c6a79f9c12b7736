package erasure

import (
	"encoding/binary"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// EncodeRow makes the frames of one row (read-modify-write of rows in an
// update): row holds the row's RowSize() logical bytes (the part past
// the file's end zero, as the writer pads the last row), frames
// Shards() buffers of FrameSize() bytes each, filled with shard i's frame.
func EncodeRow(l Layout, row []byte, frames [][]byte) error {
	if int64(len(row)) != l.RowSize() || len(frames) != l.Shards() {
		return kerr.New(kerr.Internal, "ec encode", l.String(), "row or frames of the wrong size")
	}
	enc, err := encoderFor(l)
	if err != nil {
		return err
	}
	views := make([][]byte, l.Shards())
	for i, f := range frames {
		if int64(len(f)) != l.FrameSize() {
			return kerr.New(kerr.Internal, "ec encode", l.String(), "frame of the wrong size")
		}
		views[i] = f[:l.Unit]
		if i < l.K {
			copy(views[i], row[i*l.Unit:(i+1)*l.Unit])
		}
	}
	if err := enc.Encode(views); err != nil {
		return kerr.Wrap(kerr.Internal, "ec encode", l.String(), err)
	}
	for _, f := range frames {
		binary.LittleEndian.PutUint32(f[l.Unit:], checksum.CRC32CSum(f[:l.Unit]))
	}
	return nil
}
