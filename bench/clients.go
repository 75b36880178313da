package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/meridian-coord/meridian/client"
)

// A Flavor is one way of using one system: Meridian's native API, the
// ZooKeeper protocol (on Meridian or on ZooKeeper), etcd's clientv3, Redis.
type Flavor struct {
	Name   string // shown in reports
	System string // which cluster it needs
	lock   func(c *Cluster, region string, server int) (Locker, error)
	kv     func(c *Cluster, region string, server int) (KV, error)
}

// Locker acquires and releases named locks.
type Locker interface {
	Lock(ctx context.Context, name string) (release func() error, err error)
	Close()
}

// KV reads and writes whole values by key.
type KV interface {
	Create(ctx context.Context, key string, val []byte) error
	Put(ctx context.Context, key string, val []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
	Close()
}

// Flavors, in report order.
var Flavors = []Flavor{
	{Name: "Meridian (native)", System: "meridian", lock: nativeLock, kv: nativeKV},
	{Name: "Meridian (ZooKeeper protocol)", System: "meridian", lock: zkRecipeLock, kv: zkKV},
	{Name: "ZooKeeper 3.8", System: "zookeeper", lock: zkRecipeLock, kv: zkKV},
	{Name: "etcd 3.4", System: "etcd", lock: etcdLock, kv: etcdKV},
	{Name: "Redis 7 (single-instance Redlock)", System: "redis", lock: redisLock},
}

func newNative(c *Cluster, region string, server int) (*client.Client, error) {
	return newNativeAt(c, []string{c.Native[region][server]})
}

// newNativeAll is a native client configured with every server, as a user
// configures one, its session on the given server: its writes may go
// straight to the leader (client/route.go). Every endpoint is reached the
// way the given one is (through the topology's links from region).
func newNativeAll(c *Cluster, region string, server int) (*client.Client, error) {
	eps := []string{c.Native[region][server]}
	for i, ep := range c.Native[region] {
		if i != server {
			eps = append(eps, ep)
		}
	}
	return newNativeAt(c, eps)
}

func newNativeAt(c *Cluster, endpoints []string) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return client.New(ctx, client.Config{Endpoints: endpoints, KeepEndpointOrder: true, SessionTimeout: 10 * time.Second})
}

type nativeLocker struct {
	c    *client.Client
	opts client.LockOptions
}

func nativeLock(c *Cluster, region string, server int) (Locker, error) {
	cl, err := newNative(c, region, server)
	if err != nil {
		return nil, err
	}
	return nativeLocker{c: cl}, nil
}

func (n nativeLocker) Lock(ctx context.Context, name string) (func() error, error) {
	l, err := n.c.Lock(ctx, name, n.opts)
	if err != nil {
		return nil, err
	}
	return func() error { return l.Unlock(context.Background()) }, nil
}
func (n nativeLocker) Close() { n.c.Close() }

// nativeKVClient reads sequentially (from the connected server, as a
// ZooKeeper getData does), so both Meridian APIs answer the same question.
type nativeKVClient struct{ c *client.Client }

func nativeKV(c *Cluster, region string, server int) (KV, error) {
	cl, err := newNativeAll(c, region, server)
	if err != nil {
		return nil, err
	}
	return nativeKVClient{cl}, nil
}

func (n nativeKVClient) Create(ctx context.Context, key string, val []byte) error {
	_, _, err := n.c.Create(ctx, key, val, client.CreateOptions{})
	if errors.Is(err, client.ErrNodeExists) {
		_, err = n.c.Set(ctx, key, val, -1)
	}
	return err
}
func (n nativeKVClient) Put(ctx context.Context, key string, val []byte) error {
	_, err := n.c.Set(ctx, key, val, -1)
	return err
}
func (n nativeKVClient) Get(ctx context.Context, key string) ([]byte, error) {
	v, _, err := n.c.Get(ctx, key, client.WithConsistency(client.Sequential))
	return v, err
}
func (n nativeKVClient) Close() { n.c.Close() }

func newZK(c *Cluster, region string, server int) (*gozk.Conn, error) {
	conn, ev, err := gozk.Connect([]string{c.ZK[region][server]}, 10*time.Second, gozk.WithLogInfo(false), gozk.WithLogger(quiet{}))
	if err != nil {
		return nil, err
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case e := <-ev:
			if e.State == gozk.StateHasSession {
				return conn, nil
			}
		case <-deadline:
			conn.Close()
			return nil, fmt.Errorf("zookeeper protocol: no session with %s", c.ZK[region][server])
		}
	}
}

// zkRecipe is go-zookeeper's lock recipe (create ephemeral-sequential,
// getChildren, watch the predecessor): what Kafka-era clients run.
type zkRecipe struct{ c *gozk.Conn }

func zkRecipeLock(c *Cluster, region string, server int) (Locker, error) {
	conn, err := newZK(c, region, server)
	if err != nil {
		return nil, err
	}
	return zkRecipe{conn}, nil
}

func (r zkRecipe) Lock(ctx context.Context, name string) (func() error, error) {
	l := gozk.NewLock(r.c, "/locks/"+name, gozk.WorldACL(gozk.PermAll))
	if err := l.Lock(); err != nil {
		return nil, err
	}
	return l.Unlock, nil
}
func (r zkRecipe) Close() { r.c.Close() }

type zkKVClient struct{ c *gozk.Conn }

func zkKV(c *Cluster, region string, server int) (KV, error) {
	conn, err := newZK(c, region, server)
	if err != nil {
		return nil, err
	}
	return zkKVClient{conn}, nil
}

func (z zkKVClient) Create(ctx context.Context, key string, val []byte) error {
	_, err := z.c.Create(key, val, 0, gozk.WorldACL(gozk.PermAll))
	if err == gozk.ErrNodeExists {
		_, err = z.c.Set(key, val, -1)
	}
	return err
}
func (z zkKVClient) Put(ctx context.Context, key string, val []byte) error {
	_, err := z.c.Set(key, val, -1)
	return err
}
func (z zkKVClient) Get(ctx context.Context, key string) ([]byte, error) {
	v, _, err := z.c.Get(key)
	return v, err
}
func (z zkKVClient) Close() { z.c.Close() }

func newEtcd(c *Cluster, region string, server int) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{c.Etcd[region][server]}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
}

// etcdLocker is etcd's concurrency.Mutex on a session lease (TTL 10 s).
type etcdLocker struct {
	c *clientv3.Client
	s *concurrency.Session
}

func etcdLock(c *Cluster, region string, server int) (Locker, error) {
	cl, err := newEtcd(c, region, server)
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(cl, concurrency.WithTTL(10))
	if err != nil {
		cl.Close()
		return nil, err
	}
	return etcdLocker{cl, s}, nil
}

func (e etcdLocker) Lock(ctx context.Context, name string) (func() error, error) {
	m := concurrency.NewMutex(e.s, "/locks/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return func() error { return m.Unlock(context.Background()) }, nil
}
func (e etcdLocker) Close() { e.s.Close(); e.c.Close() }

// etcdKVClient reads with etcd's default consistency (linearizable).
type etcdKVClient struct{ c *clientv3.Client }

func etcdKV(c *Cluster, region string, server int) (KV, error) {
	cl, err := newEtcd(c, region, server)
	if err != nil {
		return nil, err
	}
	return etcdKVClient{cl}, nil
}

func (e etcdKVClient) Create(ctx context.Context, key string, val []byte) error {
	return e.Put(ctx, key, val)
}
func (e etcdKVClient) Put(ctx context.Context, key string, val []byte) error {
	_, err := e.c.Put(ctx, key, string(val))
	return err
}
func (e etcdKVClient) Get(ctx context.Context, key string) ([]byte, error) {
	r, err := e.c.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if len(r.Kvs) == 0 {
		return nil, fmt.Errorf("etcd: %s not found", key)
	}
	return r.Kvs[0].Value, nil
}
func (e etcdKVClient) Close() { e.c.Close() }

// redisLocker is single-instance Redlock as redsync does it: SET key value
// NX PX ttl with a random value; on failure retry after a random 50–250 ms
// (redsync's default delay); release is a compare-and-delete script.
type redisLocker struct{ c *redis.Client }

func redisLock(c *Cluster, region string, server int) (Locker, error) {
	return redisLocker{redis.NewClient(&redis.Options{Addr: c.Redis[region]})}, nil
}

var redisRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

func (r redisLocker) Lock(ctx context.Context, name string) (func() error, error) {
	b := make([]byte, 16)
	rand.Read(b)
	val := hex.EncodeToString(b)
	key := "lock:" + name
	for {
		ok, err := r.c.SetNX(ctx, key, val, 10*time.Second).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return func() error { return redisRelease.Run(context.Background(), r.c, []string{key}, val).Err() }, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(50+mrand.IntN(200)) * time.Millisecond):
		}
	}
}
func (r redisLocker) Close() { r.c.Close() }

// CanLock and CanKV say which workloads a flavor runs.
func (f Flavor) CanLock() bool { return f.lock != nil }
func (f Flavor) CanKV() bool   { return f.kv != nil }

// quiet drops go-zookeeper's log lines (reconnect chatter during startup).
type quiet struct{}

func (quiet) Printf(string, ...any) {}
