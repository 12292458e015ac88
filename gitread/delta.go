package gitread

import (
	"errors"
)

var errCorruptDelta = errors.New("corrupt delta")

// applyDelta applies a git delta to base, refusing a result over max or
// over what w has left (nil: no bound but max), before it allocates it.
func applyDelta(base, delta []byte, max sizeLimit, w *work) ([]byte, error) {
	bad := errCorruptDelta
	varint := func() (int64, error) {
		var v int64
		for shift := 0; ; shift += 7 {
			if len(delta) == 0 || shift > 56 {
				return 0, bad
			}
			c := delta[0]
			delta = delta[1:]
			v |= int64(c&0x7f) << shift
			if c&0x80 == 0 {
				return v, nil
			}
		}
	}
	srcSize, err := varint()
	if err != nil || srcSize != int64(len(base)) {
		return nil, bad
	}
	dstSize, err := varint()
	if err != nil {
		return nil, bad
	}
	if err := max.check(dstSize); err != nil {
		return nil, err
	}
	if err := w.take(dstSize); err != nil {
		return nil, err
	}
	out := make([]byte, 0, dstSize) // bounded by the limit and paid for

	for len(delta) > 0 {
		op := delta[0]
		delta = delta[1:]
		switch {
		case op&0x80 != 0:
			var off, n int64
			for bit := 0; bit < 7; bit++ {
				if op&(1<<bit) == 0 {
					continue
				}
				if len(delta) == 0 {
					return nil, bad
				}
				if bit < 4 {
					off |= int64(delta[0]) << (8 * bit)
				} else {
					n |= int64(delta[0]) << (8 * (bit - 4))
				}
				delta = delta[1:]
			}
			if n == 0 {
				n = 0x10000
			}
			if off+n > int64(len(base)) || int64(len(out))+n > dstSize {
				return nil, bad
			}
			out = append(out, base[off:off+n]...)
		case op != 0:
			n := int64(op)
			if n > int64(len(delta)) || int64(len(out))+n > dstSize {
				return nil, bad
			}
			out = append(out, delta[:n]...)
			delta = delta[n:]
		default:
			return nil, bad
		}
	}
	if int64(len(out)) != dstSize {
		return nil, bad
	}
	return out, nil
}
