package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/meridian-coord/meridian/internal/server"
)

// versionInfo is what `meridian version` prints; the same three values
// label the meridian_build_info metric.
type versionInfo struct {
	Version          string `json:"version"`
	GoVersion        string `json:"go_version"`
	ZooKeeperVersion string `json:"zookeeper_version"`
}

func thisVersion() versionInfo {
	return versionInfo{Version: server.Version, GoVersion: runtime.Version(), ZooKeeperVersion: server.ZooKeeperVersion}
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print this binary's version, the Go release that built it and the ZooKeeper protocol version it serves",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v := thisVersion()
			return output(v, func() {
				fmt.Printf("meridian %s\ngo %s\nzookeeper protocol %s\n", v.Version, v.GoVersion, v.ZooKeeperVersion)
			})
		},
	}
}
