package config

import (
	"os"
	"path/filepath"
	"testing"
)

// The configs shipped with the project (docker-compose, examples) must
// parse and validate: they are what users copy.
func TestShippedConfigsParse(t *testing.T) {
	files, _ := filepath.Glob("../../deploy/docker/*.yaml")
	more, _ := filepath.Glob("../../examples/*/*.yaml")
	files = append(files, more...)
	if len(files) == 0 {
		t.Fatal("no shipped configs found")
	}
	env := map[string]string{"RELAY_SOURCE_PASSWORD": "s", "RELAY_PRIMARY_PASSWORD": "p", "RELAY_BROKER_PASSWORD": "b"}
	lookup := func(k string) (string, bool) {
		if v, ok := env[k]; ok {
			return v, true
		}
		return os.LookupEnv(k)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(raw, lookup); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
