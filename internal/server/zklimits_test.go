package server

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/meridian-coord/meridian/internal/zkproto"
)

// TestZKClientThatDoesNotRead: a client that pipelines requests for large
// replies without reading them must not make the server buffer those
// replies (the queue was bounded by frames only: 10,000 replies of 512 KiB
// each is 5 GiB), must not hold up other clients, and, once it reads, gets
// every reply in order. The server stops reading its requests while more
// than zkReadPauseBytes of replies wait, so TCP holds the client back.
func TestZKClientThatDoesNotRead(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	tc.leader()
	addr := tc.zkAddrs()[0]
	other, _ := zkConnect(t, []string{addr})
	big := bytes.Repeat([]byte("m"), 512<<10)
	if _, err := other.Create("/big", big, 0, gozk.WorldACL(gozk.PermAll)); err != nil {
		t.Fatal(err)
	}
	const n = 800 // 400 MiB of replies
	c, _ := rawSession(t, addr, 0, nil, 0)
	go func() {
		for i := 1; i <= n; i++ {
			e := zkproto.NewEncoder(nil)
			(&zkproto.RequestHeader{Xid: int32(i), Type: zkproto.OpGetData}).Encode(e)
			(&zkproto.GetDataRequest{Path: "/big"}).Encode(e)
			if _, err := c.Write(zkproto.AppendFrame(nil, e.Bytes())); err != nil {
				return
			}
		}
	}()
	// Let the server serve what it will while nothing is read.
	time.Sleep(time.Second)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapAlloc > 128<<20 {
		t.Errorf("heap %d MiB while a client does not read its replies: the server buffers them", ms.HeapAlloc>>20)
	}
	// Others are served meanwhile.
	start := time.Now()
	if _, _, err := other.Exists("/big"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("another client waited %v", d)
	}
	// The slow client was held back, not dropped: every reply arrives, in order.
	for i := 1; i <= n; i++ {
		var got zkproto.GetDataResponse
		h := rawReply(t, c, &got)
		if h.Xid != int32(i) || h.Err != 0 || len(got.Data) != len(big) {
			t.Fatalf("reply %d: header %+v, %d bytes", i, h, len(got.Data))
		}
	}
}
