//go:build !amd64

package membw

const hasVector = false

func sum(b []byte) uint64 { return sumGeneric(b) }
