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

/** ISO-8601 durations and timestamps, read with the rules and precision of the Python side (isodate). */
final class Iso8601 {
    private static final String NUMBER = "(\\d+(?:[.,]\\d+)?)";
    private static final Pattern DURATION = Pattern.compile(
            "([+-])?P(?:" + NUMBER + "Y)?(?:" + NUMBER + "M)?(?:" + NUMBER + "W)?(?:" + NUMBER + "D)?"
                    + "(T(?:" + NUMBER + "H)?(?:" + NUMBER + "M)?(?:" + NUMBER + "S)?)?");
    private static final Pattern TIMESTAMP = Pattern.compile(
            "(\\d{4})-(\\d{2})-(\\d{2})T(\\d{2})(?::(\\d{2})(?::(\\d{2})(?:[.,](\\d+))?)?)?"
                    + "(Z|([+-])(\\d{2})(?::?(\\d{2}))?)?");
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
     * An extended-format timestamp (2026-11-21T10:00:00.000Z, +01:00 offsets, no zone taken as UTC), truncated
     * to microseconds like the Python reader's datetimes.
     *
     * @throws IllegalArgumentException when the text is not such a timestamp
     */
    static Instant instant(String text) {
        Matcher m = TIMESTAMP.matcher(text);
        if (!m.matches()) {
            throw new IllegalArgumentException("not an ISO-8601 timestamp: " + text);
        }
        try {
            LocalDateTime local = LocalDateTime.of(
                    Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)), Integer.parseInt(m.group(3)),
                    Integer.parseInt(m.group(4)), field(m.group(5)), field(m.group(6)), fractionNanos(m.group(7)));
            return local.toInstant(offset(m)).truncatedTo(ChronoUnit.MICROS);
        } catch (DateTimeException e) {
            throw new IllegalArgumentException("not an ISO-8601 timestamp: " + text, e);
        }
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

    private static ZoneOffset offset(Matcher m) {
        if (m.group(8) == null || "Z".equals(m.group(8))) {
            return ZoneOffset.UTC;
        }
        int sign = "-".equals(m.group(9)) ? -1 : 1;
        return ZoneOffset.ofHoursMinutes(sign * Integer.parseInt(m.group(10)), sign * field(m.group(11)));
    }
}
