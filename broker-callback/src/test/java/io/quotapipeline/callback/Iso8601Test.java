package io.quotapipeline.callback;

import java.time.Duration;
import java.time.Instant;
import java.util.Set;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** The configuration's durations as the Python config reads them, and a record's RFC 3339 timestamps. */
class Iso8601Test {

    @ParameterizedTest(name = "{0} = {1}")
    @CsvSource({
        "PT5M, PT5M",
        "PT30S, PT30S",
        "P1W, P7D",
        "P1W2D, P9D",
        "P2DT3H, P2DT3H",
        "PT5M30S, PT5M30S",
        "PT1.5S, PT1.5S",
        "'PT1,5S', PT1.5S",
        "P1.5D, PT36H",
        "P1DT, P1D",
        "PT, PT0S",
        "P0D, PT0S",
        "P0Y, PT0S",
        "P0Y0M1D, P1D",
        "+PT5M, PT5M",
        "-PT0S, PT0S",
        "PT0.0001S, PT0.0001S",
        "PT0.0000004S, PT0S",
    })
    void readsDurationsLikeIsodate(String text, String expected) {
        assertEquals(Duration.parse(expected), Iso8601.duration(text));
    }

    @ParameterizedTest
    @ValueSource(strings = {"P", "pt5m", "5M", "PT5M ", "PT-5M", "PT1H1H", "PT1e3S", "PT.5S", "PT1.S", ""})
    void refusesWhatIsNotAnIsoDuration(String text) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Iso8601.duration(text));
        assertEquals("must be an ISO-8601 duration such as PT30S or PT5M", e.getMessage());
    }

    @ParameterizedTest
    @ValueSource(strings = {"P1Y", "P1M", "P1Y0M", "-P1Y", "P0.5M"})
    void refusesYearsAndMonths(String text) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Iso8601.duration(text));
        assertEquals("years and months have no fixed length; use days, hours, minutes or seconds", e.getMessage());
    }

    @ParameterizedTest
    @ValueSource(strings = {"-PT5M", "-P1D"})
    void refusesNegativeDurations(String text) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Iso8601.duration(text));
        assertEquals("must not be negative", e.getMessage());
    }

    @ParameterizedTest(name = "{0} = {1}")
    @CsvSource({
        "2026-11-21T10:00:00.000Z, 2026-11-21T10:00:00Z",
        "2026-11-21T10:00:00+01:00, 2026-11-21T09:00:00Z",
        "2026-11-21T10:00:00.000-00:00, 2026-11-21T10:00:00Z",
        "2026-11-21t10:00:00z, 2026-11-21T10:00:00Z",
        "2026-11-21T10:00:00.123456789Z, 2026-11-21T10:00:00.123456Z",
        "2026-11-22T09:59:00+23:59, 2026-11-21T10:00:00Z",
    })
    void readsRfc3339Timestamps(String text, String expected) {
        assertEquals(Instant.parse(expected), Iso8601.instant(text));
    }

    @ParameterizedTest
    @ValueSource(strings = {"2026-11-21", "2026-11-21 10:00:00Z", "2026-11-21T24:00:00Z", "2026-11-21T10:00:60Z",
        " 2026-11-21T10:00:00Z", "2026-11-21T10:00:00.Z", "yesterday", "2026-11-21T10:00:00", "2026-11-21T10:00Z",
        "2026-11-21T10Z", "2026-11-21T10:00:00+0100", "2026-11-21T10:00:00+01", "2026-11-21T10:00:00,5Z",
        "2026-W47-6T10:00:00Z", "2026-325T10:00:00Z", "20261121T100000Z", "2026-11-21T10.5Z",
        "2026-11-21T10:00:00.1234567890Z", "2026-11-21T10:00:00+24:00", "0000-01-01T00:00:00Z",
        "0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59-00:01"})
    void refusesWhatIsNotAnRfc3339Timestamp(String text) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Iso8601.instant(text));
        // Why, never the text itself: the caller quotes it, escaped and cut.
        assertTrue(Set.of("not an RFC 3339 timestamp such as " + Iso8601.EXAMPLE, "no such date or time",
                "the offset is not within -23:59 .. +23:59", "the instant is outside the years 0001 to 9999")
                .contains(e.getMessage()), e.getMessage());
    }
}
