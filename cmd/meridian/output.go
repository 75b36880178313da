package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/meridian-coord/meridian/internal/jsonform"
)

// outputFormats are the values of -o.
var outputFormats = []string{"text", "json"}

func checkOutputFormat() error {
	if !slices.Contains(outputFormats, flagOutput) {
		return fmt.Errorf("-o %q: supported formats are %s", flagOutput, strings.Join(outputFormats, ", "))
	}
	return nil
}

// output prints v as JSON with -o json, else runs text.
func output(v any, text func()) error {
	if flagOutput == "json" {
		return writeJSON(os.Stdout, v)
	}
	text()
	return nil
}

// writeJSON writes v as indented JSON in the CLI's stable form (see
// internal/jsonform, which /status shares).
func writeJSON(w io.Writer, v any) error { return jsonform.Write(w, v) }
