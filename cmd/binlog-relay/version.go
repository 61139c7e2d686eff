package main

import "runtime/debug"

// commit is set at build time like version: -ldflags "-X main.version=v1.2.3
// -X main.commit=abc1234" (Makefile, Dockerfile, .goreleaser.yaml).
var commit = ""

// versionInfo returns the stamped version and commit. A build without the flags
// reports what the Go toolchain recorded instead: the module version of
// `go install ...@v1.2.3`, the revision of a build in a git checkout.
func versionInfo() (v, c string) {
	v, c = version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if c == "" && s.Key == "vcs.revision" {
				c = s.Value[:min(len(s.Value), 12)]
			}
		}
	}
	if c == "" {
		c = "unknown"
	}
	return v, c
}
