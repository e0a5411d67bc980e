package wire

import (
	"errors"
	"testing"
)

func TestDecodeRunRequestRefusesInvalidUTF8JSON(t *testing.T) {
	t.Parallel()
	data := []byte("{\"job_id\":\"j1\",\"operation\":\"lint\",\"node\":{\"text\":\"x\xff\"}}")
	_, err := DecodeRunRequest(data, "application/json")
	var re *RequestError
	if !errors.As(err, &re) || re.Code != CodeUndecodable || !errors.Is(err, ErrUndecodable) {
		t.Fatalf("got %v, want an undecodable-payload error", err)
	}
}
