package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/meridian-coord/meridian/internal/server"
)

// checkDevPorts returns an error naming the first port of an n-node dev
// cluster at base that cannot be listened on, and the process listening
// there when /proc tells (Linux, same user).
func checkDevPorts(n, base int) error {
	for i := 1; i <= n; i++ {
		zk, grpc, http, peer := server.DevPorts(i, base)
		for _, p := range []struct {
			what string
			port int
		}{{"ZooKeeper", zk}, {"gRPC", grpc}, {"HTTP", http}, {"peer", peer}} {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p.port))
			if err == nil {
				l.Close()
				continue
			}
			owner := ""
			if o := portOwner(p.port); o != "" {
				owner = " by " + o
			}
			return fmt.Errorf("node %d's %s port %d is taken%s (%v); stop what holds it or move every port with --base-port",
				i, p.what, p.port, owner, err)
		}
	}
	return nil
}

// portOwner names the process listening on TCP port ("pid 123 (meridian)"),
// or returns "" when it cannot be found out.
func portOwner(port int) string {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		file, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			// sl local_address rem_address st ... inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
				inodes["socket:["+fields[9]+"]"] = true
			}
		}
		file.Close()
	}
	if len(inodes) == 0 {
		return ""
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if link, err := os.Readlink(fd); err == nil && inodes[link] {
			pid := strings.Split(fd, "/")[2]
			comm, _ := os.ReadFile(filepath.Join("/proc", pid, "comm"))
			return fmt.Sprintf("pid %s (%s)", pid, strings.TrimSpace(string(comm)))
		}
	}
	return ""
}
