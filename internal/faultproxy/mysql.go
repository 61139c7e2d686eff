package faultproxy

import (
	"bufio"
	"io"
)

// CommandTap is a Tap for a MySQL server that sees each command a client
// sends: it copies the client's packets unchanged and calls note with the
// first bytes, at most peek, of each command's payload (the first byte is
// the command: 0x03 COM_QUERY, 0x16 COM_STMT_PREPARE, 0x17
// COM_STMT_EXECUTE...). The MySQL client protocol frames every packet with
// a 3-byte length and a sequence id; a client packet with sequence id 0
// starts a command
// (https://dev.mysql.com/doc/dev/mysql-server/latest/page_protocol_basic_packets.html).
// TLS and compression hide the commands: use it on connections without
// either. note runs on the connection's goroutine, one call per command.
func CommandTap(peek int, note func(payload []byte)) Tap {
	return func(dst io.Writer, src io.Reader) {
		r := bufio.NewReaderSize(src, 64<<10)
		w := bufio.NewWriterSize(dst, 64<<10)
		var head [4]byte
		for {
			if _, err := io.ReadFull(r, head[:]); err != nil {
				return
			}
			n := int(head[0]) | int(head[1])<<8 | int(head[2])<<16
			if _, err := w.Write(head[:]); err != nil {
				return
			}
			if head[3] == 0 && n > 0 {
				payload, err := r.Peek(min(n, peek))
				if err != nil {
					return
				}
				note(payload)
			}
			if _, err := io.CopyN(w, r, int64(n)); err != nil {
				return
			}
			// Flush at the end of what the client has sent so far: a
			// command is never held back waiting for more input.
			if r.Buffered() == 0 {
				if err := w.Flush(); err != nil {
					return
				}
			}
		}
	}
}
