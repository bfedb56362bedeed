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
        assertTrue(line.contains("observed_at is not an ISO-8601 timestamp: \"2026-11-21T10:00:00Z\\u000aWARN forged"),
                line);

        clock.advance(Duration.ofSeconds(10));
        holder.apply("c1".getBytes(StandardCharsets.UTF_8), value, " at t/0@1000");
        assertEquals(2, lines.size());
        assertTrue(lines.get(1).endsWith("(1001 skipped so far, 999 of them not logged)"), lines.get(1));
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
