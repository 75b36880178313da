package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/meridian-coord/meridian/internal/pki"
)

// certsCmd creates the certificates of a real deployment: a cluster CA, a
// certificate per member, client certificates, and a cluster token.
func certsCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Create a cluster CA, member and client certificates, and a cluster token",
		Long: `Creates what a secured cluster needs (docs/security.md), as PEM files in --dir:

  meridian certs ca                          ca.pem, ca-key.pem (keep the key offline) and a cluster token
  meridian certs member 1 --host 10.0.0.1    member-1.pem, member-1-key.pem for member 1
  meridian certs client ops                  ops.pem, ops-key.pem; prints its x509 subject

A member certificate names its member (member-{id}.meridian unless
--identity-pattern says otherwise: use the same pattern as the servers'
tls.member_identity) and carries every --host as an alternative name, so
clients can verify the server they dial.`,
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", "certs", "directory of the CA and the certificates")

	ca := &cobra.Command{
		Use:   "ca",
		Short: "Create a CA in --dir and print a new cluster token",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := os.Stat(filepath.Join(dir, pki.CAFile)); err == nil {
				return fmt.Errorf("%s already holds a CA; refusing to replace it", dir)
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			c, err := pki.NewCA("meridian cluster CA")
			if err != nil {
				return err
			}
			if err := c.Write(dir); err != nil {
				return err
			}
			tok, err := newToken()
			if err != nil {
				return err
			}
			fmt.Printf("wrote %s and %s\ncluster_token: %s   # put this in every member's config before the first start\n",
				filepath.Join(dir, pki.CAFile), filepath.Join(dir, "ca-key.pem"), tok)
			return nil
		},
	}

	var hosts []string
	var pattern string
	member := &cobra.Command{
		Use:   "member ID --host ADDR [--host ADDR...]",
		Short: "Issue member ID's certificate from the CA in --dir",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || id == 0 {
				return fmt.Errorf("member id %q: want a number > 0", args[0])
			}
			if pattern == "" {
				pattern = pki.DefaultMemberIdentity
			}
			if err := pki.ValidPattern(pattern); err != nil {
				return err
			}
			if len(hosts) == 0 {
				return fmt.Errorf("--host: give the addresses (IP or DNS name) clients reach member %d at", id)
			}
			c, err := pki.LoadCA(dir)
			if err != nil {
				return err
			}
			identity := pki.MemberIdentity(pattern, id)
			leaf, err := c.IssueMember(identity, hosts)
			if err != nil {
				return err
			}
			name := fmt.Sprintf("member-%d", id)
			if err := leaf.Write(dir, name); err != nil {
				return err
			}
			fmt.Printf("wrote %s.pem and %s-key.pem (identity %s)\n", filepath.Join(dir, name), filepath.Join(dir, name), identity)
			return nil
		},
	}
	member.Flags().StringArrayVar(&hosts, "host", nil, "an address (IP or DNS name) the member is reached at; repeat for several")
	member.Flags().StringVar(&pattern, "identity-pattern", "", "member identity pattern, {id} for the id (default "+pki.DefaultMemberIdentity+")")

	var org string
	client := &cobra.Command{
		Use:   "client NAME",
		Short: "Issue a client certificate (x509 identity) named NAME from the CA in --dir",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if name == "" || filepath.Base(name) != name || name == "ca" {
				return fmt.Errorf("client name %q: want a plain file name other than ca", name)
			}
			c, err := pki.LoadCA(dir)
			if err != nil {
				return err
			}
			leaf, err := c.IssueClient(name, org)
			if err != nil {
				return err
			}
			if err := leaf.Write(dir, name); err != nil {
				return err
			}
			fmt.Printf("wrote %s.pem and %s-key.pem\nx509 subject: %s   # for ACLs (x509:SUBJECT) and admin_subjects\n",
				filepath.Join(dir, name), filepath.Join(dir, name), pki.Subject(leaf.Cert))
			return nil
		},
	}
	client.Flags().StringVar(&org, "org", "", "organization in the subject (O=)")

	token := &cobra.Command{
		Use:   "token",
		Short: "Print a new random cluster token",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := newToken()
			if err == nil {
				fmt.Println(tok)
			}
			return err
		},
	}
	cmd.AddCommand(ca, member, client, token)
	return cmd
}

func newToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", b), nil
}
