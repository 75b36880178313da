package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/meridian-coord/meridian/client"
)

// createParents creates every missing ancestor of path (persistent, no
// data; existing ones are fine, like mkdir -p), then path itself. It runs
// after a create failed with ErrNoNode, so a create whose parent exists
// costs one round trip.
func createParents(ctx context.Context, c *client.Client, path string, data []byte, opts client.CreateOptions) (string, *client.Stat, error) {
	parent := path[:max(strings.LastIndexByte(path, '/'), 0)]
	for i := 1; i <= len(parent); i++ {
		if i < len(parent) && parent[i] != '/' {
			continue
		}
		if _, _, err := c.Create(ctx, parent[:i], nil, client.CreateOptions{}); err != nil && !errors.Is(err, client.ErrNodeExists) {
			return "", nil, err
		}
	}
	return c.Create(ctx, path, data, opts)
}

// deleteTree deletes path and everything below it, children first. A node
// someone else deleted meanwhile is fine; a child created meanwhile is
// deleted on a second pass (a few at most: a busy writer wins).
func deleteTree(ctx context.Context, c *client.Client, path string, version int32) error {
	if path == "/" {
		return fmt.Errorf("rm -r /: refusing to delete the whole tree; delete its children one by one")
	}
	for pass := 0; ; pass++ {
		kids, _, err := c.Children(ctx, path)
		if err != nil {
			return err
		}
		for _, k := range kids {
			if err := deleteTree(ctx, c, path+"/"+k, client.AnyVersion); err != nil && !errors.Is(err, client.ErrNoNode) {
				return err
			}
		}
		err = c.Delete(ctx, path, version)
		if errors.Is(err, client.ErrNotEmpty) && pass < 3 {
			continue
		}
		return err
	}
}
