package sweeper

import (
	"testing"
	"time"
)

func TestFormatOffset(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "+00:00"},
		{9 * time.Hour, "+09:00"},
		{-5 * time.Hour, "-05:00"},
		{5*time.Hour + 45*time.Minute, "+05:45"},
		{-(9*time.Hour + 30*time.Minute), "-09:30"},
		{14 * time.Hour, "+14:00"},
		{44*time.Minute + 30*time.Second, ""}, // not a session time_zone value
	} {
		if got := FormatOffset(c.d); got != c.want {
			t.Errorf("FormatOffset(%s) = %q, want %q", c.d, got, c.want)
		}
	}
}

// clock is a Clock read at at with one offset per probe.
func clock(tz, sys string, at time.Time, offsets ...time.Duration) Clock {
	c := Clock{TimeZone: tz, SystemZone: sys, ReadAt: at}
	copy(c.Offsets[:], offsets)
	return c
}

func TestClockZones(t *testing.T) {
	h := time.Hour
	jan := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	// Europe/Berlin read on 10 January: +1h now, +2h in April, July and
	// October (the probes are 91, 182 and 273 days on).
	berlin := []time.Duration{h, 2 * h, 2 * h, 2 * h}
	summer := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	winter := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		c      Clock
		steady bool
		// offsets the Location gives in summer and winter (nil Location: none)
		located              bool
		summerOff, winterOff time.Duration
	}{
		{"fixed offset", clock("+09:00", "UTC", jan, 9*h, 9*h, 9*h, 9*h), true, true, 9 * h, 9 * h},
		{"SYSTEM without DST", clock("SYSTEM", "JST", jan, 9*h, 9*h, 9*h, 9*h), true, true, 9 * h, 9 * h},
		{"UTC", clock("SYSTEM", "UTC", jan), true, true, 0, 0},
		{"named zone with DST: Go's zone database follows it", clock("Europe/Berlin", "UTC", jan, berlin...), false, true, 2 * h, h},
		{"SYSTEM with DST: only the offset read", clock("SYSTEM", "CET", jan, berlin...), false, false, 0, 0},
		{"a name the server reads otherwise than Go", clock("Europe/Berlin", "UTC", jan, h, h, 2*h, h), false, false, 0, 0},
		{"a name Go does not know", clock("Mars/Olympus", "UTC", jan, berlin...), false, false, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.c.Steady(); got != c.steady {
				t.Errorf("Steady() = %v, want %v", got, c.steady)
			}
			loc := c.c.Location()
			if (loc != nil) != c.located {
				t.Fatalf("Location() = %v, want one: %v", loc, c.located)
			}
			if loc == nil {
				return
			}
			for _, at := range []struct {
				t    time.Time
				want time.Duration
			}{{summer, c.summerOff}, {winter, c.winterOff}} {
				if _, off := at.t.In(loc).Zone(); time.Duration(off)*time.Second != at.want {
					t.Errorf("offset on %s = %s, want %s", at.t.Format(time.DateOnly), time.Duration(off)*time.Second, at.want)
				}
			}
		})
	}
}

func TestClockString(t *testing.T) {
	jan := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		c    Clock
		want string
	}{
		{clock("SYSTEM", "JST", jan, 9*time.Hour, 9*time.Hour, 9*time.Hour, 9*time.Hour), "+09:00 (time_zone SYSTEM, system_time_zone JST)"},
		{clock("-05:00", "UTC", jan, -5*time.Hour, -5*time.Hour, -5*time.Hour, -5*time.Hour), "-05:00 (time_zone -05:00)"},
	} {
		if got := c.c.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}

// The session zone a pre-check takes: none where the clocks agree (DST
// included), the primary's offset at the time of the look otherwise,
// followed across a DST change when the zone is known by name.
func TestPrecheckZone(t *testing.T) {
	h := time.Hour
	jan := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	summer := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	utc := clock("SYSTEM", "UTC", jan)
	tokyo := clock("SYSTEM", "JST", jan, 9*h, 9*h, 9*h, 9*h)
	berlin := []time.Duration{h, 2 * h, 2 * h, 2 * h}
	cases := []struct {
		name             string
		primary, replica Clock
		at               time.Time
		zone             string
		exact            bool
	}{
		{"both at UTC", utc, utc, jan, "", true},
		{"one zone under two settings", tokyo, clock("+09:00", "UTC", jan, 9*h, 9*h, 9*h, 9*h), jan, "", true},
		{"both in one zone with DST", clock("SYSTEM", "CET", jan, berlin...), clock("SYSTEM", "CET", jan, berlin...), summer, "", true},
		{"the issue: primary at +09:00, replica at UTC", tokyo, utc, jan, "+09:00", true},
		{"replica ahead of the primary", utc, tokyo, jan, "+00:00", true},
		{"named primary zone, in summer", clock("Europe/Berlin", "UTC", jan, berlin...), utc, summer, "+02:00", true},
		{"named primary zone, in winter", clock("Europe/Berlin", "UTC", jan, berlin...), utc, jan, "+01:00", true},
		{"SYSTEM primary zone with DST: the offset read", clock("SYSTEM", "CET", jan, berlin...), utc, summer, "+01:00", false},
		{"same offset now, other DST rules", clock("Europe/Berlin", "UTC", jan, berlin...), clock("+01:00", "UTC", jan, h, h, h, h), jan, "+01:00", true},
	}
	for _, c := range cases {
		zone, exact := PrecheckZone(c.primary, c.replica, c.at)
		if zone != c.zone || exact != c.exact {
			t.Errorf("%s: PrecheckZone = %q, exact %v; want %q, exact %v", c.name, zone, exact, c.zone, c.exact)
		}
	}
}

// What the sweeper knows of the primary's clock, and when it reads it
// again: at the first round, 30 s after a failure, hourly when only the
// offset is known, never when the zone gives the offset at any time.
func TestZonesPrimaryOffsetAndReads(t *testing.T) {
	h := time.Hour
	jan := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	summer := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	berlin := []time.Duration{h, 2 * h, 2 * h, 2 * h}

	var z zones
	if _, ok := z.primaryOffset(jan); ok {
		t.Fatal("an offset before any read")
	}
	if !z.readDue(jan) {
		t.Fatal("no read due at the first round")
	}
	z.lastRead, z.nextRead = jan, jan.Add(clockRetry) // a failed read
	if z.readDue(jan.Add(clockRetry-time.Second)) || !z.readDue(jan.Add(clockRetry)) {
		t.Errorf("after a failed read, a read is due only %s later", clockRetry)
	}

	z.set(clock("Europe/Berlin", "UTC", jan, berlin...), jan)
	if off, ok := z.primaryOffset(summer); !ok || off != 2*h {
		t.Errorf("named zone: offset in summer %s (%v), want 2h", off, ok)
	}
	if z.readDue(jan.Add(365 * 24 * h)) {
		t.Error("named zone: read again, though its offset is known at any time")
	}

	z.set(clock("SYSTEM", "CET", jan, berlin...), jan)
	if off, ok := z.primaryOffset(summer); !ok || off != h {
		t.Errorf("SYSTEM zone with DST: offset %s (%v), want the 1h read", off, ok)
	}
	if z.readDue(jan.Add(clockRefresh-time.Second)) || !z.readDue(jan.Add(clockRefresh)) {
		t.Errorf("SYSTEM zone with DST: not read again every %s", clockRefresh)
	}
}

// A clock is the same as a zone that has its offsets all year; IANAZone
// names one that route.time_zone takes.
func TestClockSameAsAndIANAZone(t *testing.T) {
	h := time.Hour
	jan := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	for _, c := range []struct {
		name       string
		c          Clock
		sameUTC    bool
		sameTokyo  bool
		sameBerlin bool
		iana       string
	}{
		{"UTC", clock("SYSTEM", "UTC", jan), true, false, false, "UTC"},
		{"fixed +09:00", clock("+09:00", "UTC", jan, 9*h, 9*h, 9*h, 9*h), false, true, false, "Etc/GMT-9"},
		{"named Asia/Tokyo", clock("Asia/Tokyo", "UTC", jan, 9*h, 9*h, 9*h, 9*h), false, true, false, "Asia/Tokyo"},
		{"fixed -05:00", clock("-05:00", "UTC", jan, -5*h, -5*h, -5*h, -5*h), false, false, false, "Etc/GMT+5"},
		{"named Europe/Berlin", clock("Europe/Berlin", "UTC", jan, h, 2*h, 2*h, 2*h), false, false, true, "Europe/Berlin"},
		{"SYSTEM with DST", clock("SYSTEM", "CET", jan, h, 2*h, 2*h, 2*h), false, false, true, ""},
		{"fixed +05:30", clock("+05:30", "UTC", jan, 5*h+30*time.Minute, 5*h+30*time.Minute, 5*h+30*time.Minute, 5*h+30*time.Minute), false, false, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.c.SameAs(time.UTC); got != c.sameUTC {
				t.Errorf("SameAs(UTC) = %v", got)
			}
			if got := c.c.SameAs(tokyo); got != c.sameTokyo {
				t.Errorf("SameAs(Asia/Tokyo) = %v", got)
			}
			if got := c.c.SameAs(berlin); got != c.sameBerlin {
				t.Errorf("SameAs(Europe/Berlin) = %v", got)
			}
			got := c.c.IANAZone()
			if got != c.iana {
				t.Fatalf("IANAZone() = %q, want %q", got, c.iana)
			}
			if got != "" {
				loc, err := time.LoadLocation(got)
				if err != nil || !c.c.SameAs(loc) {
					t.Errorf("IANAZone() %q does not tell the clock's time (%v)", got, err)
				}
			}
		})
	}
}
