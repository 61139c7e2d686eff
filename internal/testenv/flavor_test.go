package testenv

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The flavours here and in scripts/stack.sh name the same servers: the
// same names, primary ports and brokers. A port changed on one side only
// would send a flavour's tests to another flavour's servers.
func TestFlavorsMatchTheStackScript(t *testing.T) {
	script, err := os.ReadFile(RepoPath("scripts/stack.sh"))
	if err != nil {
		t.Fatal(err)
	}
	table := func(name string) map[string]int {
		line := regexp.MustCompile(`declare -A ` + name + `=\(([^)]*)\)`).FindSubmatch(script)
		if line == nil {
			t.Fatalf("scripts/stack.sh has no %s table", name)
		}
		out := map[string]int{}
		for _, m := range regexp.MustCompile(`\[([^\]]+)\]=(\d+)`).FindAllSubmatch(line[1], -1) {
			n, _ := strconv.Atoi(string(m[2]))
			out[string(m[1])] = n
		}
		return out
	}
	ports, amqp := table("BASE_PORT"), table("AMQP_PORT_OF")
	if len(ports) != len(Flavors) {
		t.Fatalf("stack.sh has %d flavours %v, testenv %d", len(ports), ports, len(Flavors))
	}
	seen := map[int]string{}
	for _, f := range Flavors {
		if ports[f.Name] != f.BasePort || amqp[f.Name] != f.AMQPPort {
			t.Errorf("%s: testenv says ports %d and %d, stack.sh %d and %d", f.Name, f.BasePort, f.AMQPPort, ports[f.Name], amqp[f.Name])
		}
		for i := 0; i < 7; i++ {
			if other, ok := seen[f.BasePort+i]; ok {
				t.Errorf("port %d is %s's and %s's", f.BasePort+i, other, f.Name)
			}
			seen[f.BasePort+i] = f.Name
		}
		if want := map[int]string{5672: "3.10", 5673: "4.3"}[f.AMQPPort]; f.Broker != want {
			t.Errorf("%s: broker %s on port %d, want %s", f.Name, f.Broker, f.AMQPPort, want)
		}
	}
}

// RELAY_TEST_FLAVOR picks the flavour; the default is the first.
func TestCurrentFlavorFromTheEnvironment(t *testing.T) {
	for _, c := range []struct{ env, want string }{{"", "mariadb-10.11"}, {"mysql-9.7", "mysql-9.7"}, {"mariadb-11.8", "mariadb-11.8"},
		{"mysql", "mysql-9.7"}, {"mariadb", "mariadb-10.11"}} {
		t.Setenv("RELAY_TEST_FLAVOR", c.env)
		if got := currentFlavor(); got.Name != c.want {
			t.Errorf("RELAY_TEST_FLAVOR=%q: %s, want %s", c.env, got.Name, c.want)
		}
	}
	t.Setenv("RELAY_TEST_FLAVOR", "mysql-8.0")
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), `"mysql-8.0" is none of mariadb-10.11, mysql-9.7, mariadb-11.8`) {
				t.Errorf("an unknown flavour: %v, want a stop naming the flavours", r)
			}
		}()
		currentFlavor()
	}()
	if got := (Flavor{BasePort: 3317}).dsn(3); got != "root@tcp(127.0.0.1:3320)/" {
		t.Errorf("the fourth server's DSN: %s", got)
	}
}
