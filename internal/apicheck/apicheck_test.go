// Package apicheck holds the test that keeps the public packages' API free
// of types a user cannot name or should not depend on.
package apicheck

import (
	"fmt"
	"go/types"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// forbidden says why a package may not appear in a public signature of
// the package pub, or "" when it may.
func forbidden(pub, path string) string {
	switch {
	case strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal"):
		return "an internal package, which no other module can import"
	case strings.HasPrefix(path, "github.com/go-mysql-org/"):
		return "go-mysql, which the binlog reader keeps as an implementation detail"
	case strings.HasPrefix(path, "go.uber.org/zap"):
		// One convention for every public package: a *slog.Logger (nil
		// logs nothing). A zap user brings zap through zapslog.
		return "zap: the public packages take a *slog.Logger (a zap user passes slog.New(zapslog.NewHandler(core)))"
	}
	return ""
}

// TestPublicSignatures fails when an exported identifier of pkg/... (a
// function's parameters or results, a type, an exported field or method)
// mentions a type from an internal package, go-mysql or zap.
func TestPublicSignatures(t *testing.T) {
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedTypes, Dir: "../.."},
		"github.com/binlog-relay/binlog-relay/pkg/...")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 5 {
		t.Fatalf("loaded %d public packages, want pkg/binlog, checkpoint, inbox, outbox, router at least", len(pkgs))
	}
	var problems []string
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Errorf("%s: %v", p.PkgPath, e)
		}
		if p.Types == nil {
			continue
		}
		w := walker{pkg: p.PkgPath, seen: map[types.Type]bool{}}
		scope := p.Types.Scope()
		for _, name := range scope.Names() {
			obj := scope.Lookup(name)
			if !obj.Exported() {
				continue
			}
			w.where = p.PkgPath + "." + name
			w.typ(obj.Type())
			if tn, ok := obj.(*types.TypeName); ok {
				if named, ok := tn.Type().(*types.Named); ok {
					for i := 0; i < named.NumMethods(); i++ {
						if m := named.Method(i); m.Exported() {
							w.where = p.PkgPath + "." + name + "." + m.Name()
							w.typ(m.Type())
						}
					}
				}
			}
		}
		problems = append(problems, w.problems...)
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

// walker visits the types reachable from one exported identifier.
type walker struct {
	pkg      string // the public package
	where    string
	seen     map[types.Type]bool
	problems []string
}

func (w *walker) typ(t types.Type) {
	switch t := t.(type) {
	case *types.Named:
		if obj := t.Obj(); obj.Pkg() != nil {
			if why := forbidden(w.pkg, obj.Pkg().Path()); why != "" {
				w.problems = append(w.problems, fmt.Sprintf("%s mentions %s.%s: %s", w.where, obj.Pkg().Path(), obj.Name(), why))
				return
			}
		}
		for i := 0; i < t.TypeArgs().Len(); i++ {
			w.typ(t.TypeArgs().At(i))
		}
		// A public type's own exported fields are part of the API; types
		// from other modules are checked by name only.
		if w.seen[t] || t.Obj().Pkg() == nil || !strings.HasPrefix(t.Obj().Pkg().Path(), "github.com/binlog-relay/binlog-relay/") {
			return
		}
		w.seen[t] = true
		w.typ(t.Underlying())
	case *types.Pointer:
		w.typ(t.Elem())
	case *types.Slice:
		w.typ(t.Elem())
	case *types.Array:
		w.typ(t.Elem())
	case *types.Map:
		w.typ(t.Key())
		w.typ(t.Elem())
	case *types.Chan:
		w.typ(t.Elem())
	case *types.Signature:
		for i := 0; i < t.Params().Len(); i++ {
			w.typ(t.Params().At(i).Type())
		}
		for i := 0; i < t.Results().Len(); i++ {
			w.typ(t.Results().At(i).Type())
		}
	case *types.Struct:
		for i := 0; i < t.NumFields(); i++ {
			if f := t.Field(i); f.Exported() {
				w.typ(f.Type())
			}
		}
	case *types.Interface:
		for i := 0; i < t.NumMethods(); i++ {
			w.typ(t.Method(i).Type())
		}
	}
}

// The check itself must catch what it is there for: an internal type in a
// signature, through a pointer, a slice, a field and a method.
func TestWalkerFindsForbiddenTypes(t *testing.T) {
	internalPkg := types.NewPackage("github.com/binlog-relay/binlog-relay/internal/x", "x")
	secret := types.NewNamed(types.NewTypeName(0, internalPkg, "Secret", nil), types.NewStruct(nil, nil), nil)
	mysqlPkg := types.NewPackage("github.com/go-mysql-org/go-mysql/mysql", "mysql")
	gtid := types.NewNamed(types.NewTypeName(0, mysqlPkg, "GTIDSet", nil), types.NewInterfaceType(nil, nil), nil)
	pub := types.NewPackage("github.com/binlog-relay/binlog-relay/pkg/p", "p")
	field := types.NewField(0, pub, "S", types.NewSlice(types.NewPointer(secret)), false)
	holder := types.NewNamed(types.NewTypeName(0, pub, "Holder", nil), types.NewStruct([]*types.Var{field}, nil), nil)
	sig := types.NewSignatureType(nil, nil, nil, types.NewTuple(types.NewVar(0, pub, "h", holder)),
		types.NewTuple(types.NewVar(0, pub, "", gtid)), false)
	w := walker{pkg: pub.Path(), where: "p.F", seen: map[types.Type]bool{}}
	w.typ(sig)
	if len(w.problems) != 2 || !strings.Contains(w.problems[0], "internal/x.Secret") || !strings.Contains(w.problems[1], "go-mysql") {
		t.Fatalf("problems %q, want the internal type behind the field and go-mysql's GTIDSet", w.problems)
	}
}

// zap is refused in every public package, pkg/inbox included (it took a
// *zap.Logger until the public packages agreed on log/slog).
func TestZapRefusedEverywhere(t *testing.T) {
	for _, pub := range []string{"github.com/binlog-relay/binlog-relay/pkg/inbox", "github.com/binlog-relay/binlog-relay/pkg/binlog"} {
		if why := forbidden(pub, "go.uber.org/zap"); !strings.Contains(why, "*slog.Logger") {
			t.Errorf("%s may mention zap: %q", pub, why)
		}
	}
	if why := forbidden("github.com/binlog-relay/binlog-relay/pkg/inbox", "log/slog"); why != "" {
		t.Errorf("log/slog refused: %s", why)
	}
}
