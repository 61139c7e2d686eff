package sourceinfo

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// ErrNoRSAKey: caching_sha2_password (MySQL's default, and the only password
// plugin MySQL 9 keeps) sends the password encrypted with the server's RSA
// public key when the connection has no TLS and the server has no cached
// login for the user (the first login after a restart or FLUSH
// PRIVILEGES); a server without an RSA key pair cannot take it. go-mysql
// panics on the empty key it gets (v1.16.0, packet.Conn.
// WritePublicKeyAuthPacket) and go-sql-driver reports "unexpected resp from
// server for caching_sha2_password, perform full authentication": both come
// out as this error.
var ErrNoRSAKey = errors.New("the server cannot take the password without TLS: caching_sha2_password needs the server's RSA public key " +
	"for a login it has not cached, and the server has none (Caching_sha2_password_rsa_public_key is empty: " +
	"caching_sha2_password_private_key_path and _public_key_path name no key pair). " +
	"Connect with TLS (source.tls / primary.tls: {enabled: true}) or give the server an RSA key pair")

// driverNoKey is go-sql-driver's message for the same refusal.
const driverNoKey = "unexpected resp from server for caching_sha2_password"

// Explain returns err with ErrNoRSAKey added when it is the driver's
// refusal, else err unchanged.
func Explain(err error) error {
	if err != nil && !errors.Is(err, ErrNoRSAKey) && strings.Contains(err.Error(), driverNoKey) {
		return fmt.Errorf("%w (%v)", ErrNoRSAKey, err)
	}
	return err
}

// Handshake runs a go-mysql connection (a binlog syncer's start) and turns
// a panic in it into an error: ErrNoRSAKey for the empty public key, else
// an error naming the panic, so a server's answer can never crash the
// relay.
func Handshake(connect func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if strings.Contains(string(debug.Stack()), "WritePublicKeyAuthPacket") {
				err = ErrNoRSAKey
				return
			}
			err = fmt.Errorf("the MySQL client failed in the handshake with the server: %v", p)
		}
	}()
	return Explain(connect())
}

// StartSync starts syncer's binlog stream at the GTID set set or, when set
// is nil, at file:pos, inside Handshake.
func StartSync(syncer *replication.BinlogSyncer, set mysql.GTIDSet, file string, pos uint32) (streamer *replication.BinlogStreamer, err error) {
	err = Handshake(func() (err error) {
		if set != nil {
			streamer, err = syncer.StartSyncGTID(set)
		} else {
			streamer, err = syncer.StartSync(mysql.Position{Name: file, Pos: pos})
		}
		return err
	})
	return streamer, err
}
