package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	pb "github.com/meridian-coord/meridian/api/meridianpb"
	"github.com/meridian-coord/meridian/internal/errs"
)

// SaveSnapshot writes a backup of the whole cluster to w (admin only): the
// file `meridian snapshot save` writes (internal/backup's format). progress,
// when set, is called after each chunk with the bytes written and the
// file's total. A failure part way leaves w with a partial file, which
// inspection refuses (the file's checksum is its last bytes).
func (c *Client) SaveSnapshot(ctx context.Context, w io.Writer, progress func(done, total uint64)) error {
	c.mu.Lock()
	api := c.mu.api
	c.mu.Unlock()
	if api == nil {
		return ErrConnectionLoss
	}
	stream, err := api.SnapshotSave(ctx, &pb.SnapshotSaveRequest{})
	if err != nil {
		return errs.FromGRPC(err)
	}
	var done uint64
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if done == 0 {
				return fmt.Errorf("snapshot save: the server sent nothing")
			}
			return nil
		}
		if err != nil {
			return errs.FromGRPC(err)
		}
		if _, err := w.Write(chunk.GetData()); err != nil {
			return err
		}
		done += uint64(len(chunk.GetData()))
		if progress != nil {
			progress(done, chunk.GetTotalBytes())
		}
	}
}
