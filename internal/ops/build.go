package ops

import "runtime/debug"

// BuildInfo names the running build in binlog_relay_build_info.
type BuildInfo struct {
	Version string // "dev" when empty
	// Commit is the VCS revision; empty: the one Go stamped into the binary
	// (vcs.revision, "-dirty" added for a modified tree), else "unknown".
	Commit string
}

// Resolved fills in what the build left empty.
func (b BuildInfo) Resolved() BuildInfo {
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit != "" {
		return b
	}
	b.Commit = "unknown"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		b.Commit = rev
		if modified == "true" {
			b.Commit += "-dirty"
		}
	}
	return b
}
