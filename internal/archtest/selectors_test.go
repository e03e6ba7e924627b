package archtest

import "go/ast"

type selector struct{ pkg, name string }

// selectors lists every pkg.Name selector of a file whose left side is a
// bare identifier (an imported package's local name, or a variable).
func selectors(f *ast.File) []selector {
	var out []selector
	ast.Inspect(f, func(n ast.Node) bool {
		if s, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := s.X.(*ast.Ident); ok {
				out = append(out, selector{id.Name, s.Sel.Name})
			}
		}
		return true
	})
	return out
}
