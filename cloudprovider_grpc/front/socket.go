package main

// The public port as a unix socket, when Python's --address is unix:///PATH. Python has checked the
// path and removed a stale socket before starting the front (cloudprovider_grpc/core/unixsocket.py).

import (
	"net"
	"os"
	"syscall"
)

// listen opens the public port on `network` ("tcp", or "unix" with `address` the socket's path). A
// socket is bound under a umask that leaves only `mode`, so its file never exists with wider
// permissions, then given exactly `mode`. Go's unix listener removes the file when it is closed, so a
// clean stop leaves nothing behind.
func listen(network, address string, mode os.FileMode) (net.Listener, error) {
	if network != "unix" {
		return net.Listen("tcp", address)
	}
	// the umask is process-wide: the front binds once, at start, before it creates any other file
	old := syscall.Umask(int(0o777 &^ mode.Perm()))
	lis, err := net.Listen("unix", address)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(address, mode.Perm()); err != nil {
		_ = lis.Close()
		return nil, err
	}
	return lis, nil
}
