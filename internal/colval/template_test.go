package colval

import (
	"strings"
	"testing"
)

func TestTemplates(t *testing.T) {
	row := map[string]any{"biz_type": "order", "status": int8(0), "topic": []byte("shop"), "nothing": nil}
	lookup := func(c string) (any, bool) { v, ok := row[c]; return v, ok }
	for _, c := range []struct {
		tmpl, want, missing string
		cols                []string
	}{
		{"{biz_type}.{status}", "order.0", "", []string{"biz_type", "status"}},
		{"fixed.exchange", "fixed.exchange", "", nil},
		{"{topic}", "shop", "", []string{"topic"}},
		{"pre.{topic}.post", "pre.shop.post", "", []string{"topic"}},
		{"", "", "", nil},
		{"{nothing}.x", "", "nothing", []string{"nothing"}},
		{"{absent}", "", "absent", []string{"absent"}},
	} {
		tp, err := ParseTemplate(c.tmpl)
		if err != nil {
			t.Fatalf("%q: %v", c.tmpl, err)
		}
		got, missing := tp.Render(lookup)
		if got != c.want || missing != c.missing {
			t.Errorf("%q renders %q (missing %q), want %q (missing %q)", c.tmpl, got, missing, c.want, c.missing)
		}
		if strings.Join(tp.Columns(), ",") != strings.Join(c.cols, ",") {
			t.Errorf("%q columns %v, want %v", c.tmpl, tp.Columns(), c.cols)
		}
	}
}

func TestTemplateErrors(t *testing.T) {
	for _, c := range []struct{ tmpl, want string }{
		{"{biz-type}", "placeholder {biz-type}"},
		{"{a", "unclosed"},
		{"a}", "unmatched"},
		{"{}", "placeholder {}"},
		{"{a b}", "placeholder {a b}"},
	} {
		if _, err := ParseTemplate(c.tmpl); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.tmpl, err, c.want)
		}
	}
}
