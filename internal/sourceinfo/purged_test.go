package sourceinfo

import "testing"

func TestPurgedMessage(t *testing.T) {
	for msg, want := range map[string]bool{
		"Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.": true,
		"Could not find first log file name in binary log index file":                                                                                       true,
		"Cannot replicate because the source purged required binary logs.":                                                                                  true,
		"A slave with the same server_uuid/server_id as this slave has connected to the master":                                                             false,
		"Error: connecting slave requested to start from GTID 0-1-5, which is not in the master's binlog":                                                   false,
	} {
		if IsPurgedMessage(msg) != want {
			t.Errorf("IsPurgedMessage(%q) = %v", msg, !want)
		}
	}
}
