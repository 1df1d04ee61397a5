//go:build linux

package sqlitelock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// notifier tells the processes sharing a lock file that a release committed, through
// inotify on a small file beside the database ("<db>-release"): a releaser writes one byte
// to it after its transaction commits, and the kernel wakes every process watching it.
//
// inotify rather than a Unix socket per process: the kernel does the fan-out to any number
// of processes, nothing in the state directory needs cleaning up after a crash (a socket
// file of a killed process stays behind and every releaser would have to find and skip
// it), and a releaser pays one pwrite whether zero or ten processes wait. Because the byte
// is written after the commit, a watcher that reads the release counters after taking an
// event sees that commit; events that arrive while it reads queue and cause one more read,
// so no release is missed. What inotify cannot see (a releaser killed between its commit
// and the write, a write from another kernel such as a VM's host sharing the directory)
// the hub's backstop poll still catches.
type notifier struct {
	file  *os.File // the release file, written to signal
	watch *os.File // the inotify descriptor, on the runtime poller so Close ends a Read
	c     chan struct{}
	dead  chan struct{} // closed when the watch ended: the hub falls back to its poll
	done  chan struct{}
}

// releaseFileSuffix names the release file beside the database.
const releaseFileSuffix = "-release"

// openNotifier watches the release file of the database at dbPath, creating it if needed.
func openNotifier(dbPath string) (*notifier, error) {
	path := dbPath + releaseFileSuffix
	file, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("release file: %w", err)
	}
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		_ = file.Close()
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := syscall.InotifyAddWatch(fd, path, syscall.IN_MODIFY|syscall.IN_DELETE_SELF|syscall.IN_MOVE_SELF); err != nil {
		_ = syscall.Close(fd)
		_ = file.Close()
		return nil, fmt.Errorf("inotify watch %s: %w", path, err)
	}
	n := &notifier{
		file:  file,
		watch: os.NewFile(uintptr(fd), "inotify:"+path),
		c:     make(chan struct{}, 1),
		dead:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go n.read()
	return n, nil
}

// signal tells every watching process (this one too) that a release committed.
func (n *notifier) signal() {
	_, _ = n.file.WriteAt([]byte{1}, 0)
}

// read turns inotify events into signals on c until the watch ends.
func (n *notifier) read() {
	defer close(n.done)
	defer close(n.dead)
	buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
	for {
		k, err := n.watch.Read(buf)
		if err != nil {
			return // closed, or the descriptor failed: the hub polls
		}
		ended := false
		for off := 0; off+syscall.SizeofInotifyEvent <= k; {
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := binary.NativeEndian.Uint32(buf[off+12:])
			// IN_Q_OVERFLOW (events lost) needs nothing more: the signal below causes a read.
			ended = ended || mask&(syscall.IN_IGNORED|syscall.IN_DELETE_SELF|syscall.IN_MOVE_SELF) != 0
			off += syscall.SizeofInotifyEvent + int(nameLen)
		}
		select {
		case n.c <- struct{}{}:
		default: // a signal is pending already: the read it causes covers this one too
		}
		if ended {
			return // the file was removed or renamed: nothing will signal it any more
		}
	}
}

func (n *notifier) close() error {
	err := n.watch.Close()
	<-n.done
	return errors.Join(err, n.file.Close())
}
