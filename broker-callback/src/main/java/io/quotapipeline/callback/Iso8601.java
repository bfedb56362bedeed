package io.quotapipeline.callback;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.time.DateTimeException;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.time.temporal.ChronoUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * ISO-8601 durations (the configuration's, read as the Python config reads them) and a decision record's timestamps
 * (RFC 3339 only, the grammar of quota_pipeline/core/record_time.py).
 */
final class Iso8601 {
    private static final String NUMBER = "(\\d+(?:[.,]\\d+)?)";
    private static final Pattern DURATION = Pattern.compile(
            "([+-])?P(?:" + NUMBER + "Y)?(?:" + NUMBER + "M)?(?:" + NUMBER + "W)?(?:" + NUMBER + "D)?"
                    + "(T(?:" + NUMBER + "H)?(?:" + NUMBER + "M)?(?:" + NUMBER + "S)?)?");
    private static final Pattern TIMESTAMP = Pattern.compile(
            "([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\\.([0-9]{1,9}))?"
                    + "(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))");
    /** The instants a Python datetime holds (years 0001 to 9999, microseconds). */
    private static final Instant EARLIEST = Instant.parse("0001-01-01T00:00:00Z");
    private static final Instant LATEST = Instant.parse("9999-12-31T23:59:59.999999Z");
    static final String EXAMPLE = "2026-11-21T10:00:00.000Z";
    private static final BigDecimal NANOS_PER_SECOND = BigDecimal.valueOf(1_000_000_000L);

    private Iso8601() {
    }

    /**
     * A non-negative duration such as PT30S, PT5M, P1D or P1W; the messages are those of the Python config.
     *
     * @throws IllegalArgumentException with the message to show after the property name
     */
    static Duration duration(String text) {
        Matcher m = DURATION.matcher(text);
        if (!m.matches() || "P".equals(text.replaceFirst("^[+-]", ""))) {
            throw new IllegalArgumentException("must be an ISO-8601 duration such as PT30S or PT5M");
        }
        if (amount(m.group(2)).signum() != 0 || amount(m.group(3)).signum() != 0) {
            throw new IllegalArgumentException(
                    "years and months have no fixed length; use days, hours, minutes or seconds");
        }
        BigDecimal seconds = amount(m.group(4)).multiply(BigDecimal.valueOf(7 * 86_400))
                .add(amount(m.group(5)).multiply(BigDecimal.valueOf(86_400)))
                .add(amount(m.group(7)).multiply(BigDecimal.valueOf(3_600)))
                .add(amount(m.group(8)).multiply(BigDecimal.valueOf(60)))
                .add(amount(m.group(9)));
        if ("-".equals(m.group(1)) && seconds.signum() != 0) {
            throw new IllegalArgumentException("must not be negative");
        }
        // Python keeps microseconds (timedelta); so do we, so both sides expire at the same instant.
        long micros = seconds.movePointRight(6).setScale(0, RoundingMode.HALF_EVEN).longValueExact();
        return Duration.of(micros, ChronoUnit.MICROS);
    }

    private static BigDecimal amount(String group) {
        return group == null ? BigDecimal.ZERO : new BigDecimal(group.replace(',', '.'));
    }

    /**
     * A decision record's timestamp, RFC 3339 and nothing else: {@code YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)},
     * {@code T} or {@code t}, {@code Z} or {@code z}, an offset required ({@code -00:00} is UTC), 1 to 9 fraction
     * digits truncated to microseconds like the Python reader's datetimes; a date and time that exist (no leap
     * second {@code :60}), offsets within 23:59, an instant within the years 0001 to 9999. Week and ordinal dates,
     * the basic format, fractional hours or minutes, a comma and a missing offset are refused.
     *
     * @throws IllegalArgumentException saying why, without the text (the caller quotes it)
     */
    static Instant instant(String text) {
        Matcher m = TIMESTAMP.matcher(text);
        if (!m.matches()) {
            throw new IllegalArgumentException("not an RFC 3339 timestamp such as " + EXAMPLE);
        }
        int offsetHours = field(m.group(9));
        int offsetMinutes = field(m.group(10));
        if (offsetHours > 23 || offsetMinutes > 59) {
            throw new IllegalArgumentException("the offset is not within -23:59 .. +23:59");
        }
        LocalDateTime local;
        try {
            local = LocalDateTime.of(
                    Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)), Integer.parseInt(m.group(3)),
                    Integer.parseInt(m.group(4)), Integer.parseInt(m.group(5)), Integer.parseInt(m.group(6)),
                    fractionNanos(m.group(7)));
        } catch (DateTimeException e) {
            throw new IllegalArgumentException("no such date or time", e);
        }
        int sign = "-".equals(m.group(8)) ? -1 : 1;
        Instant at = local.toInstant(ZoneOffset.UTC).minusSeconds(sign * (offsetHours * 3600L + offsetMinutes * 60L))
                .truncatedTo(ChronoUnit.MICROS);
        if (at.isBefore(EARLIEST) || at.isAfter(LATEST)) {
            throw new IllegalArgumentException("the instant is outside the years 0001 to 9999");
        }
        return at;
    }

    private static int field(String group) {
        return group == null ? 0 : Integer.parseInt(group);
    }

    private static int fractionNanos(String digits) {
        if (digits == null) {
            return 0;
        }
        return new BigDecimal("0." + digits).multiply(NANOS_PER_SECOND).setScale(0, RoundingMode.DOWN).intValueExact();
    }
}
