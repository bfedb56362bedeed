package io.quotapipeline.callback;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.lifecycle.AfterContainer;

/**
 * Fuzzing the record parser as a broker meets it (DecisionHolder.apply, then answer): random bytes, mutated valid
 * records, deep nesting, huge numbers and odd times. Property: every input is taken or counted as skipped, and no
 * exception escapes; each input is answered well within a second (no hang). Each property tries jqwik's default
 * 1000 inputs in `mvn verify`; a longer run: mvn -f broker-callback verify -Dtest=RecordFuzzTest -Djqwik.tries.default=20000
 */
class RecordFuzzTest {
    private static final Instant NOW = Instant.parse("2026-11-21T10:00:30Z");
    private static final String VALID = "{\"schema_version\":1,\"cluster_id\":\"c1\",\"status\":\"SUCCESS\",\"active_brokers\":3,"
            + "\"active_log_dirs\":6,\"violations\":0,\"observed_at\":"
            + "\"2026-11-21T10:00:10.000Z\",\"decided_at\":\"2026-11-21T10:00:11.000Z\",\"throttle_factor\":0.5,"
            + "\"source\":\"OBSERVATION\",\"valid_until\":\"2026-11-21T10:05:10.000Z\",\"reason\":\"x\"}";
    private static final List<String> ODD_VALUES = List.of("1e400", "-1e400", "-0", "0.0000000000000000001",
            "1" + "0".repeat(4400), "9".repeat(4300), "NaN", "-Infinity", "Infinity", "+Infinity", "INF", "[]", "{}",
            "null", "true", "\"\"", "\"\\ud800\"", "\"\\u0000\"", "01", "1.", ".5", "1e", "0x1F", "2", "1.0", "-1",
            "9223372036854775808", "\"9999-12-31T23:59:59.999999999-23:59\"", "\"0000-01-01T00:00Z\"");
    private static final AtomicLong TRIES = new AtomicLong();
    private static final AtomicLong TAKEN = new AtomicLong();
    private static final AtomicLong SKIPPED = new AtomicLong();

    /** Applies one value as the broker would; asserts the property and returns normally. */
    private static void check(byte[] value) {
        MutableClock clock = new MutableClock(NOW);
        DecisionHolder holder = new DecisionHolder("c1", Duration.ofMinutes(5), 1.0, Duration.ofSeconds(30), clock);
        long started = System.nanoTime();
        DecisionHolder.Outcome outcome = holder.apply("c1".getBytes(StandardCharsets.UTF_8), value, "");
        holder.answer(NOW);
        clock.advance(Duration.ofDays(400));
        holder.answer(clock.instant());
        long millis = (System.nanoTime() - started) / 1_000_000;
        assertTrue(millis < 1_000, "one record took " + millis + " ms");
        boolean parsed;
        try {
            DecisionRecord.parse(value);
            parsed = true;
        } catch (DecisionRecord.InvalidRecordException e) {
            parsed = false;
        }
        assertEquals(parsed ? 0 : 1, holder.skipped(), "a record the parser refuses is counted as skipped");
        assertEquals(parsed, outcome != DecisionHolder.Outcome.SKIPPED);
        TRIES.incrementAndGet();
        (parsed ? TAKEN : SKIPPED).incrementAndGet();
    }

    @Property
    void randomBytes(@ForAll("bytes") byte[] value) {
        check(value);
    }

    @Property
    void mutatedValidRecords(@ForAll("mutated") String value) {
        check(value.getBytes(StandardCharsets.UTF_8));
    }

    @Property
    void deepNesting(@ForAll("nested") String value) {
        check(value.getBytes(StandardCharsets.UTF_8));
    }

    @Property
    void oddValuesInEveryField(@ForAll("oddFields") String value) {
        check(value.getBytes(StandardCharsets.UTF_8));
    }

    @Property
    void oddTimes(@ForAll("times") String time) {
        check(VALID.replace("2026-11-21T10:00:10.000Z", time).getBytes(StandardCharsets.UTF_8));
        check(VALID.replace("2026-11-21T10:05:10.000Z", time).getBytes(StandardCharsets.UTF_8));
        check(VALID.replace("2026-11-21T10:00:11.000Z", time).getBytes(StandardCharsets.UTF_8));
    }

    @AfterContainer
    static void report() {
        System.out.printf("RecordFuzzTest: %d inputs, %d taken, %d counted as skipped%n", TRIES.get(), TAKEN.get(),
                SKIPPED.get());
    }

    @Provide
    Arbitrary<byte[]> bytes() {
        return Arbitraries.bytes().array(byte[].class).ofMaxSize(400);
    }

    @Provide
    Arbitrary<String> mutated() {
        Arbitrary<String> piece = Arbitraries.oneOf(Arbitraries.of("{", "}", "[", "]", "\"", ",", ":", "\\", "\\u",
                "\uFEFF", "\u0000", "\n", " ", "e", "-", "+", ".", "0", "9"), Arbitraries.of(ODD_VALUES),
                Arbitraries.strings().ofMaxLength(8));
        Arbitrary<int[]> spot = Arbitraries.integers().between(0, VALID.length()).array(int[].class).ofSize(2);
        return Combinators.combine(piece.list().ofMinSize(1).ofMaxSize(4), spot.list().ofMinSize(1).ofMaxSize(4),
                Arbitraries.integers().between(0, 2)).as((pieces, spots, kind) -> {
                    StringBuilder text = new StringBuilder(VALID);
                    for (int i = 0; i < spots.size(); i++) {
                        int a = Math.min(Math.min(spots.get(i)[0], spots.get(i)[1]), text.length());
                        int b = Math.min(Math.max(spots.get(i)[0], spots.get(i)[1]), text.length());
                        String p = pieces.get(i % pieces.size());
                        if (kind == 0) {
                            text.insert(a, p);
                        } else if (kind == 1) {
                            text.replace(a, b, p);
                        } else {
                            text.insert(a, text.substring(a, b));  // a duplicated stretch
                        }
                    }
                    return text.toString();
                });
    }

    @Provide
    Arbitrary<String> nested() {
        return Combinators.combine(Arbitraries.integers().between(0, 20_000), Arbitraries.of("[", "{\"a\":"),
                Arbitraries.of("schema_version", "throttle_factor", "reason", "observed_at"), Arbitraries.of(true, false))
                .as((depth, open, field, closed) -> {
                    String close = open.equals("[") ? "]" : "}";
                    String inner = open.repeat(depth) + "1" + (closed ? close.repeat(depth) : "");
                    return VALID.replaceFirst("\"" + field + "\":[^,}]*", "\"" + field + "\":" + inner);
                });
    }

    @Provide
    Arbitrary<String> oddFields() {
        return Combinators.combine(Arbitraries.of("schema_version", "throttle_factor", "source", "observed_at",
                "valid_until", "decided_at", "cluster_id", "reason"), Arbitraries.of(ODD_VALUES))
                .as((field, odd) -> VALID.replaceFirst("\"" + field + "\":(\"[^\"]*\"|[^,}]*)", "\"" + field + "\":"
                        + java.util.regex.Matcher.quoteReplacement(odd)));
    }

    @Provide
    Arbitrary<String> times() {
        Arbitrary<String> digits = Arbitraries.strings().withCharRange('0', '9').ofMinLength(0).ofMaxLength(5);
        Arbitrary<String> sep = Arbitraries.of("-", ":", "T", ".", ",", "Z", "+", "", " ", "t", "z");
        Arbitrary<String> offset = Arbitraries.of("", "Z", "+01:00", "-23:59", "+24:00", "+0130", "+01", "+01:00:30",
                "-00:00", "+99:99", "Z+01:00", "[Europe/Paris]");
        Arbitrary<String> shapeless = Combinators.combine(digits.list().ofSize(7), sep.list().ofSize(6), offset)
                .as((d, s, off) -> d.get(0) + s.get(0) + d.get(1) + s.get(1) + d.get(2) + s.get(2) + d.get(3)
                        + s.get(3) + d.get(4) + s.get(4) + d.get(5) + s.get(5) + d.get(6) + off);
        Arbitrary<String> fraction = Arbitraries.oneOf(Arbitraries.just(""), Combinators.combine(Arbitraries.of(".", ","),
                Arbitraries.strings().withCharRange('0', '9').ofMinLength(1).ofMaxLength(30)).as(String::concat));
        Arbitrary<String> dated = Combinators.combine(Arbitraries.integers().between(0, 9999),
                Arbitraries.integers().between(0, 13), Arbitraries.integers().between(0, 32),
                Arbitraries.integers().between(0, 25), Arbitraries.integers().between(0, 61),
                Arbitraries.integers().between(0, 61), fraction, offset)
                .as((y, mo, d, h, mi, sec, f, off) -> String.format("%04d-%02d-%02dT%02d:%02d:%02d%s%s", y, mo, d, h,
                        mi, sec, f, off));
        return Arbitraries.oneOf(shapeless, dated);
    }
}
