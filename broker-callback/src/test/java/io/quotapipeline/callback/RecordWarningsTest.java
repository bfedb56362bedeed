package io.quotapipeline.callback;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** What a record or the configuration can put in the broker's log: outside text quoted and cut, no flood, no secret. */
class RecordWarningsTest {
    private static final Instant START = Instant.parse("2026-11-21T10:00:00Z");

    @Test
    void aBadTimestampIsQuotedCutAndItsWarningRateLimited() {
        MutableClock clock = new MutableClock(START);
        DecisionHolder holder = new DecisionHolder("c1", Duration.ofMinutes(5), 1.0, Duration.ofSeconds(30), clock);
        List<String> lines = new ArrayList<>();
        holder.warnTo(lines::add);
        String bad = "2026-11-21T10:00:00Z\nWARN forged line " + "x".repeat(100_000);
        byte[] value = ("{\"schema_version\": 1, " + TestRecords.required(START) + ", \"observed_at\": \""
                + bad.replace("\n", "\\n") + "\", \"throttle_factor\": 0.0, \"source\": \"OBSERVATION\"}")
                .getBytes(StandardCharsets.UTF_8);
        for (int i = 0; i < 1000; i++) {
            holder.apply("c1".getBytes(StandardCharsets.UTF_8), value, " at t/0@" + i);
            clock.advance(Duration.ofMillis(5));
        }
        assertEquals(1000, holder.skipped());
        assertEquals(1, lines.size(), "the first line at once, then at most one per 10 s: " + lines.size());
        String line = lines.get(0);
        assertFalse(line.contains("\n"), line);
        assertTrue(line.length() < 400, "cut: " + line.length() + " characters");
        assertTrue(line.contains("observed_at is not an RFC 3339 timestamp (not an RFC 3339 timestamp such as "
                + Iso8601.EXAMPLE + "): \"2026-11-21T10:00:00Z\\x0aWARN forged"),
                line);

        clock.advance(Duration.ofSeconds(10));
        holder.apply("c1".getBytes(StandardCharsets.UTF_8), value, " at t/0@1000");
        assertEquals(2, lines.size());
        assertTrue(lines.get(1).endsWith("(1001 skipped so far, 999 of them not logged)"), lines.get(1));
    }

    /** ESC, NEL, CSI (U+009B), U+202E and U+2028: what a terminal or log viewer obeys or breaks a line at. */
    private static final String HOSTILE = "\u001b\u0085\u009b\u202e\u2028";

    @ParameterizedTest
    @ValueSource(strings = {
        "{\"schema_version\": x\u001b[2J\u0085\u009b31m\u202eEVIL}",  // the parser quotes the token
        "{\"schema_version\": \u2028}",  // the parser quotes the character it did not expect
        "{\"schema_version\": \u202e}",
    })
    void badJsonReachesTheLogWithoutItsControlAndBidiCharacters(String text) {
        MutableClock clock = new MutableClock(START);
        DecisionHolder holder = new DecisionHolder("c1", Duration.ofMinutes(5), 1.0, Duration.ofSeconds(30), clock);
        List<String> lines = new ArrayList<>();
        holder.warnTo(lines::add);
        holder.apply("c1\u202e".getBytes(StandardCharsets.UTF_8), text.getBytes(StandardCharsets.UTF_8), " at t/0@7");
        assertEquals(1, holder.skipped());
        String line = lines.get(0);
        assertTrue(line.startsWith("skipped a record at t/0@7 (key \"c1\\u202e\"): the value is not JSON"), line);
        for (char c : HOSTILE.toCharArray()) {
            assertEquals(-1, line.indexOf(c), String.format("U+%04X in the line: %s", (int) c, line));
        }
        assertTrue(line.matches(".*\\\\(x1b|x85|x9b|u202e|u2028).*"), "the character is shown escaped: " + line);
    }

    @Test
    void everySettingKafkaTypesAsAPasswordIsMaskedInTheLoggedConsumerSettings() {
        Map<String, Object> props = new HashMap<>(Map.of("quota.pipeline.cluster.name", "c1",
                "quota.pipeline.output.kafka.bootstrap.servers", "127.0.0.1:9",
                "quota.pipeline.output.kafka.sasl.oauthbearer.assertion.private.key.passphrase", "pass-phrase-1"));
        List<String> passwords = new ArrayList<>();
        for (ConfigDef.ConfigKey key : ConsumerConfig.configDef().configKeys().values()) {
            if (key.type == ConfigDef.Type.PASSWORD) {
                passwords.add(key.name);
            }
        }
        assertTrue(passwords.contains("sasl.oauthbearer.assertion.private.key.passphrase"), passwords.toString());
        Map<String, Object> settings = new HashMap<>();
        for (String name : passwords) {
            settings.put(name, "value-of-" + name);
        }
        String logged = CallbackConfig.forLog(settings).toString();
        for (String name : passwords) {
            assertFalse(logged.contains("value-of-" + name), name + " is shown: " + logged);
        }
        String consumer = CallbackConfig.forLog(CallbackConfig.parse(props).consumerSettings(1)).toString();
        assertFalse(consumer.contains("pass-phrase-1"), consumer);
    }
}
