// Command meridian is Meridian's single binary: the server, a local
// development cluster, and a client CLI for the native API.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "meridian",
		Short:         "Meridian: a coordination service built for wide-area round trips",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serverCmd(), devCmd(), certsCmd(), versionCmd())
	addClientCommands(root)
	return root
}
