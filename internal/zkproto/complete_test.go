package zkproto

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// TestAllRecordsCovered keeps allRecords (used by the round-trip test and
// the fuzz seeds) in step with the package: every type with a Decode
// method must have a sample there.
func TestAllRecordsCovered(t *testing.T) {
	have := map[string]bool{}
	for _, r := range allRecords() {
		have[reflect.TypeOf(r).Elem().Name()] = true
	}
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	checked := 0
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Name.Name != "Decode" {
				continue
			}
			star, ok := fn.Recv.List[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			name := star.X.(*ast.Ident).Name
			if ast.IsExported(name) {
				checked++
				if !have[name] {
					missing = append(missing, name)
				}
			}
		}
	}
	if checked < 40 {
		t.Fatalf("found only %d records; is the parse broken?", checked)
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("records without a round-trip sample: %v", missing)
	}
}
