package io.quotapipeline.callback;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.config.ConfigException;
import org.junit.jupiter.api.Test;

/** Signed decisions: only a record signed with a configured key moves the factor (docs/security.md). */
class DecisionSignatureTest {
    private static final Instant START = Instant.parse("2026-11-21T10:00:00Z");
    private static final String SECRET_1 = "k1-secret-0123456789abcdef0123456789";
    private static final String SECRET_2 = "k2-secret-abcdefghijklmnopqrstuvwxyz";
    private static final DecisionSignature.SigningKey K1 = new DecisionSignature.SigningKey("k1", SECRET_1);
    private static final DecisionSignature.SigningKey K2 = new DecisionSignature.SigningKey("k2", SECRET_2);
    private static final byte[] C1 = "c1".getBytes(StandardCharsets.UTF_8);

    private final MutableClock clock = new MutableClock(START.plusSeconds(1));

    private static byte[] record(Instant observed, double factor) {
        return ("{\"schema_version\": 1, " + TestRecords.required(observed) + ", \"observed_at\": \"" + observed
                + "\", \"throttle_factor\": " + factor + ", \"source\": \"OBSERVATION\", \"valid_until\": \""
                + observed.plusSeconds(300) + "\"}").getBytes(StandardCharsets.UTF_8);
    }

    private DecisionHolder holder(DecisionSignature.SigningKey... keys) {
        return new DecisionHolder("c1", Duration.ofMinutes(5), 1.0, Duration.ofSeconds(30), clock,
                new DecisionSignature(List.of(keys)));
    }

    @Test
    void theMacIsHmacSha256OverTheKeysLengthTheKeyAndTheValue() {
        // Computed with openssl (printf '\x00\x00\x00\x02c1{"a":1}' | openssl dgst -sha256 -mac HMAC -macopt key:...),
        // neither implementation: quota_pipeline/core/signing.py is held to the same bytes.
        byte[] value = "{\"a\":1}".getBytes(StandardCharsets.UTF_8);
        assertEquals("k1:918eb5b439ca6cc0a061b3245a221920f6b967713ddc500db74eefb912d3e715",
                new String(DecisionSignature.sign(K1, C1, value), StandardCharsets.UTF_8));
    }

    @Test
    void onlyARecordSignedWithAConfiguredKeyIsTakenAndEveryOtherIsRefusedAndCounted() {
        DecisionHolder holder = holder(K1, K2);
        List<String> lines = new ArrayList<>();
        holder.warnTo(lines::add);
        byte[] stop = record(START, 0.0);
        assertEquals(DecisionHolder.Outcome.APPLIED, holder.apply(C1, stop, DecisionSignature.sign(K1, C1, stop), ""));

        byte[] release = record(START.plusSeconds(1), 1.0);
        DecisionSignature.SigningKey foreign = new DecisionSignature.SigningKey("k1", SECRET_2);
        List<byte[]> forged = List.of(
                new byte[0],
                "k1:zz".getBytes(StandardCharsets.UTF_8),
                DecisionSignature.sign(foreign, C1, release),
                DecisionSignature.sign(new DecisionSignature.SigningKey("k3", SECRET_1), C1, release),
                DecisionSignature.sign(K1, "c2".getBytes(StandardCharsets.UTF_8), release),  // another key's record
                DecisionSignature.sign(K1, C1, record(START.plusSeconds(1), 0.5)));  // another value
        assertEquals(DecisionHolder.Outcome.REFUSED, holder.apply(C1, release, null, ""));
        for (byte[] signature : forged) {
            assertEquals(DecisionHolder.Outcome.REFUSED, holder.apply(C1, release, signature, ""));
        }
        assertEquals(1 + forged.size(), holder.refused());
        assertEquals(0.0, holder.answer(clock.instant()).factor(), "the stop in force is kept");
        assertTrue(holder.lastRefusal().reason().contains("does not match key \"k1\""), holder.lastRefusal().reason());
        assertEquals(1, lines.size(), "one refusal line per 10 s: " + lines);
        assertTrue(lines.get(0).contains("carries no quota-pipeline-signature header"), lines.get(0));

        // A rotation: the second key is accepted as well.
        assertEquals(DecisionHolder.Outcome.APPLIED,
                holder.apply(C1, release, DecisionSignature.sign(K2, C1, release), ""));
        assertEquals(1.0, holder.answer(clock.instant()).factor());
    }

    @Test
    void anOldGenuineRecordWrittenAgainChangesNothing() {
        DecisionHolder holder = holder(K1);
        byte[] release = record(START, 1.0);
        byte[] stop = record(START.plusSeconds(10), 0.0);
        clock.set(START.plusSeconds(11));
        holder.apply(C1, release, DecisionSignature.sign(K1, C1, release), "");
        holder.apply(C1, stop, DecisionSignature.sign(K1, C1, stop), "");
        assertEquals(DecisionHolder.Outcome.REFUSED,
                holder.apply(C1, release, DecisionSignature.sign(K1, C1, release), " at t/0@2"));
        assertEquals(1, holder.refused());
        assertTrue(holder.lastRefusal().reason().contains("a record written again"), holder.lastRefusal().reason());
        assertEquals(0.0, holder.answer(clock.instant()).factor());

        // A broker restarting from its stored decision reads the topic's older records after it: not refused.
        DecisionHolder restarted = holder(K1);
        restarted.restore(C1, stop, DecisionSignature.sign(K1, C1, stop), " from a file");
        assertEquals(DecisionHolder.Outcome.OLDER,
                restarted.apply(C1, release, DecisionSignature.sign(K1, C1, release), " at t/0@0"));
        assertEquals(DecisionHolder.Outcome.APPLIED, restarted.apply(C1, stop, DecisionSignature.sign(K1, C1, stop), ""));
        assertEquals(0, restarted.refused());
    }

    @Test
    void withoutKeysEveryRecordIsTakenSignedOrNot() {
        DecisionHolder holder = holder();
        byte[] stop = record(START, 0.0);
        assertEquals(DecisionHolder.Outcome.APPLIED, holder.apply(C1, stop, null, ""));
        assertEquals(DecisionHolder.Outcome.APPLIED, holder.apply(C1, stop, "junk".getBytes(StandardCharsets.UTF_8), ""));
    }

    @Test
    void keysAreValidatedWithThePythonMessagesAndNeverShown() {
        Map<String, Object> props = new HashMap<>(Map.of("quota.pipeline.cluster.name", "c1",
                "quota.pipeline.output.kafka.bootstrap.servers", "127.0.0.1:9"));
        props.put(CallbackConfig.SIGNING_KEYS, "k1:" + SECRET_1 + ", k2:" + SECRET_2);
        CallbackConfig config = CallbackConfig.parse(props);
        assertEquals(List.of(K1, K2), config.signature().keys());
        String described = config.signature().describe() + config.signature().keys();
        assertFalse(described.contains(SECRET_1) || described.contains(SECRET_2), described);

        Map<String, String> bad = Map.of(
                "k1:short", "each key's secret must be at least 32 characters (for example the output of openssl rand -base64 32)",
                SECRET_1, "each ','-separated key must be written <id>:<secret>, the id of letters, digits, '.', '_' or '-' (at most 64 characters)",
                "k1:" + SECRET_1 + ",k2:" + SECRET_2 + ",k3:" + SECRET_1, "at most two keys: the one the pipeline signs with and one more during a rotation",
                "k1:" + SECRET_1 + ",k1:" + SECRET_2, "two keys have the id k1: give each its own");
        bad.forEach((raw, message) -> {
            props.put(CallbackConfig.SIGNING_KEYS, raw);
            ConfigException e = assertThrows(ConfigException.class, () -> CallbackConfig.parse(props));
            assertTrue(e.getMessage().contains("Invalid value [hidden] for configuration quota.pipeline.signing.keys: "
                    + message), e.getMessage());
            assertFalse(e.getMessage().contains(SECRET_1) || e.getMessage().contains("short"), e.getMessage());
        });
    }

    @Test
    void theRefusalNamesAForeignKeyIdQuotedAndCut() {
        String reason = new DecisionSignature(List.of(K1)).refusal(C1, record(START, 0.0),
                ("k\n" + "x".repeat(500) + ":" + "0".repeat(64)).getBytes(StandardCharsets.UTF_8));
        assertFalse(reason.contains("\n"), reason);
        assertTrue(reason.length() < 300, reason);
        assertNull(new DecisionSignature(List.of()).refusal(C1, record(START, 0.0), null));
    }
}
