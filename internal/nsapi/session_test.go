package nsapi

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestMessageStream: one decoder reads the values of every message, a
// message holding several, one, or none, read a byte at a time; the
// connection's error ends it.
func TestMessageStream(t *testing.T) {
	msgs := []string{`{"id":1,"op":"a"}` + "\n" + `{"id":2,"op":"b"}` + "\n", ``, `{"id":3,"op":"c"}` + "\n"}
	broken := errors.New("connection reset")
	i := 0
	dec := json.NewDecoder(&MessageStream{Next: func() (io.Reader, error) {
		if i == len(msgs) {
			return nil, broken
		}
		i++
		return iotest.OneByteReader(strings.NewReader(msgs[i-1])), nil
	}})
	for want := uint64(1); want <= 3; want++ {
		var r SessionRequest
		if err := dec.Decode(&r); err != nil || r.ID != want {
			t.Fatalf("value %d: %+v, %v", want, r, err)
		}
		if want == 2 && i != 1 {
			t.Fatalf("the decoder read message %d for a value of message 1", i)
		}
	}
	var r SessionRequest
	if err := dec.Decode(&r); !errors.Is(err, broken) {
		t.Fatalf("after the last message: %v, want the connection's error", err)
	}
}
