package codec

import (
	"encoding/binary"
	"fmt"
)

// maxMsgPackDepth matches encoding/json's nesting limit.
const maxMsgPackDepth = 10000

// checkMsgPack walks one MessagePack value without building it and rejects input that
// would make the decoder misbehave. vmihailenco/msgpack sizes allocations from declared
// lengths (make([]any, 0, n) and make(map[string]any, n) take n straight from the
// wire) and recurses without a depth limit, so a 5-byte payload declaring 2^28 map
// entries makes the process die of an unrecoverable out-of-memory, and deep nesting can
// exhaust the goroutine stack. After this check every declared count is backed by that
// many encoded elements, so what the decoder allocates is linear in len(b), and nesting
// is bounded. The walk is iterative (no recursion of its own) and allocation-free up to
// a modest depth.
//
// It also enforces "exactly one value": trailing bytes are an error.
func checkMsgPack(b []byte) error {
	var stackBuf [32]uint64
	stack := append(stackBuf[:0], 1) // values still expected at each open level
	pos := 0
	for {
		for len(stack) > 0 && stack[len(stack)-1] == 0 {
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			break
		}
		if pos >= len(b) {
			return fmt.Errorf("truncated: value expected at offset %d", pos)
		}
		stack[len(stack)-1]--
		c := b[pos]
		pos++

		var skip, children uint64 // payload bytes after the type byte; nested values
		lenField := 0             // width of a big-endian length that follows the type byte
		extra := uint64(0)        // bytes after the length field besides the data (ext type)
		switch {
		case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
			// fixint, nil, false, true: the type byte is the whole value
		case c <= 0x8f: // fixmap
			children = 2 * uint64(c&0x0f)
		case c <= 0x9f: // fixarray
			children = uint64(c & 0x0f)
		case c <= 0xbf: // fixstr
			skip = uint64(c & 0x1f)
		case c == 0xc4, c == 0xd9: // bin8, str8
			lenField = 1
		case c == 0xc5, c == 0xda: // bin16, str16
			lenField = 2
		case c == 0xc6, c == 0xdb: // bin32, str32
			lenField = 4
		case c == 0xc7: // ext8
			lenField, extra = 1, 1
		case c == 0xc8: // ext16
			lenField, extra = 2, 1
		case c == 0xc9: // ext32
			lenField, extra = 4, 1
		case c == 0xca, c == 0xce, c == 0xd2: // float32, uint32, int32
			skip = 4
		case c == 0xcb, c == 0xcf, c == 0xd3: // float64, uint64, int64
			skip = 8
		case c == 0xcc, c == 0xd0: // uint8, int8
			skip = 1
		case c == 0xcd, c == 0xd1: // uint16, int16
			skip = 2
		case c >= 0xd4 && c <= 0xd8: // fixext 1, 2, 4, 8, 16: type byte + data
			skip = 1 + 1<<(c-0xd4)
		case c == 0xdc, c == 0xde: // array16, map16
			lenField = 2
		case c == 0xdd, c == 0xdf: // array32, map32
			lenField = 4
		default: // 0xc1 is never used
			return fmt.Errorf("invalid type byte 0x%02x at offset %d", c, pos-1)
		}

		if lenField > 0 {
			if len(b)-pos < lenField {
				return fmt.Errorf("truncated length of type 0x%02x at offset %d", c, pos-1)
			}
			var n uint64
			switch lenField {
			case 1:
				n = uint64(b[pos])
			case 2:
				n = uint64(binary.BigEndian.Uint16(b[pos:]))
			case 4:
				n = uint64(binary.BigEndian.Uint32(b[pos:]))
			}
			pos += lenField
			switch c {
			case 0xdc, 0xdd:
				children = n
			case 0xde, 0xdf:
				children = 2 * n
			default:
				skip = n + extra
			}
		}

		rest := uint64(len(b) - pos)
		if skip > rest {
			return fmt.Errorf("type 0x%02x at offset %d declares %d bytes, %d remain", c, pos-1, skip, rest)
		}
		pos += int(skip)
		if children > 0 {
			// Every nested value takes at least one byte.
			if children > rest {
				return fmt.Errorf("container at offset %d declares %d values, only %d bytes remain",
					pos-1-lenField, children, rest)
			}
			if len(stack) > maxMsgPackDepth {
				return fmt.Errorf("nested deeper than %d levels", maxMsgPackDepth)
			}
			stack = append(stack, children)
		}
	}
	if pos != len(b) {
		return fmt.Errorf("%d trailing bytes after the value", len(b)-pos)
	}
	return nil
}
