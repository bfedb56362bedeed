package io.quotapipeline.callback;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.stream.Stream;

import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.authorizer.AuthorizationResult;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Runs tests/vectors/broker_quota_vectors.json, the file the Python reader's tests run too
 * (tests/unit/test_broker_vectors.py): one behaviour, two languages. Format: tests/vectors/README.md.
 */
class SharedVectorsTest {
    static final Path VECTORS = Path.of("..", "tests", "vectors", "broker_quota_vectors.json");

    static Map<String, Object> vectors() throws IOException {
        if (!Files.isRegularFile(VECTORS)) {
            fail("the shared vectors file " + VECTORS.toAbsolutePath().normalize() + " is missing: run the tests "
                    + "from broker-callback/ inside the repository (mvn -f broker-callback verify)");
        }
        return map(JsonText.read(Files.readString(VECTORS, StandardCharsets.UTF_8)));
    }

    @Test
    void theFileHoldsEnoughCases() throws Exception {
        assertTrue(list(vectors().get("cases")).size() >= 25, "the vectors file must hold at least 25 cases");
    }

    @TestFactory
    Stream<DynamicTest> behaviourCases() throws Exception {
        return behaviour("cases");
    }

    /** Which (principal, topic) a stop lets through, with the decision topic on this cluster or not. */
    @TestFactory
    Stream<DynamicTest> stopExemptionCases() throws Exception {
        return behaviour("stop_exemption_cases");
    }

    /** The cases of one section of the file, each run over the file's defaults. */
    private static Stream<DynamicTest> behaviour(String section) throws Exception {
        Map<String, Object> vectors = vectors();
        Map<String, Object> defaults = map(vectors.get("defaults"));
        return list(vectors.get(section)).stream().map(c -> {
            Map<String, Object> testCase = map(c);
            return DynamicTest.dynamicTest((String) testCase.get("name"), () -> run(testCase, defaults));
        });
    }

    @TestFactory
    Stream<DynamicTest> configCases() throws Exception {
        Map<String, Object> vectors = vectors();
        Map<String, Object> defaults = map(vectors.get("defaults"));
        return list(vectors.get("config_cases")).stream().map(c -> {
            Map<String, Object> testCase = map(c);
            return DynamicTest.dynamicTest((String) testCase.get("name"), () -> runConfig(testCase, defaults));
        });
    }

    /** The record grammar: which values the callback takes, and the observed_at it reads (records in the file). */
    @TestFactory
    Stream<DynamicTest> recordCases() throws Exception {
        Map<String, Object> vectors = vectors();
        Map<String, Object> records = map(vectors.get("records"));
        Map<String, Object> record = new LinkedHashMap<>(map(map(vectors.get("defaults")).get("record")));
        record.putAll(map(records.get("base")));
        return list(records.get("cases")).stream().map(c -> {
            Map<String, Object> testCase = map(c);
            return DynamicTest.dynamicTest((String) testCase.get("name"), () -> runRecord(testCase, record));
        });
    }

    private static void runRecord(Map<String, Object> testCase, Map<String, Object> base) throws Exception {
        Map<String, Object> fields = new LinkedHashMap<>(base);
        if (testCase.containsKey("fields")) {
            fields.putAll(map(testCase.get("fields")));
        }
        String text = (Boolean.TRUE.equals(testCase.get("bom")) ? "\uFEFF" : "") + JsonText.write(fields);
        byte[] value = text.getBytes(Charset.forName((String) testCase.getOrDefault("encoding", "UTF-8")));
        if ("refuse".equals(testCase.get("expect"))) {
            assertThrows(DecisionRecord.InvalidRecordException.class, () -> DecisionRecord.parse(value));
        } else {
            assertEquals(testCase.get("observed_at_utc"), MICROS.format(DecisionRecord.parse(value).observedAt()));
        }
    }

    private static final DateTimeFormatter MICROS =
            DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSSSSS'Z'").withZone(ZoneOffset.UTC);

    /** Outside text in a log line: Printable.quote and Printable.visible say what the Python side says. */
    @TestFactory
    Stream<DynamicTest> escapeCases() throws Exception {
        return list(vectors().get("escapes")).stream().map(c -> {
            Map<String, Object> testCase = map(c);
            String text = (String) testCase.get("text");
            int limit = testCase.containsKey("limit") ? ((Number) testCase.get("limit")).intValue() : Printable.MAX;
            return DynamicTest.dynamicTest((String) testCase.get("name"), () -> {
                assertEquals(testCase.get("quoted"), Printable.quote(text, limit), "quoted");
                assertEquals(testCase.get("visible"), Printable.visible(text), "visible");
            });
        });
    }

    private static void runConfig(Map<String, Object> testCase, Map<String, Object> defaults) {
        Map<String, Object> props = properties(defaults, testCase);
        Object error = testCase.get("error");
        if (error == JsonText.NULL) {
            CallbackConfig.parse(props);
            return;
        }
        Map<String, Object> expected = map(error);
        ConfigException e = assertThrows(ConfigException.class, () -> CallbackConfig.parse(props));
        String wanted = "for configuration " + expected.get("property") + ": " + expected.get("message");
        assertTrue(e.getMessage().contains(wanted), "expected \"" + wanted + "\" in: " + e.getMessage());
        assertTrue(!e.getMessage().contains("; Invalid") && !e.getMessage().contains("; Missing"),
                "expected one problem only: " + e.getMessage());
    }

    private static void run(Map<String, Object> testCase, Map<String, Object> defaults) {
        MutableClock clock = new MutableClock(Iso8601.instant((String) testCase.get("start")));
        List<RecordSink> sinks = new ArrayList<>();
        FollowerFactory followers = (topic, settings, sink) -> {
            sinks.add(sink);
            return () -> { };
        };
        PipelineQuotaCallback callback = new PipelineQuotaCallback(clock, followers);
        callback.configure(properties(defaults, testCase));
        // The authorizer follows the same decisions (one shared follower) and allows all but what a stop refuses.
        StopAuthorizer authorizer = new StopAuthorizer(clock, followers, StopAuthorizer::newDelegate);
        Map<String, Object> authorizerProps = properties(defaults, testCase);
        authorizerProps.put(StopAuthorizer.DELEGATE, StopAuthorizer.NONE);
        authorizer.configure(authorizerProps);
        try {
            int index = 0;
            for (Object s : list(testCase.get("steps"))) {
                Map<String, Object> step = map(s);
                clock.set(Iso8601.instant((String) step.get("at")));
                String where = testCase.get("name") + " step " + index++;
                if (step.containsKey("value") || step.containsKey("value_hex")) {
                    long applied = callback.holder().applied();
                    Object signature = step.get("signature");
                    sinks.get(0).accept(key(step), value(step, map(defaults.get("record"))),
                            signature == null ? null : ((String) signature).getBytes(StandardCharsets.UTF_8), "");
                    if (step.containsKey("expect")) {
                        String taken = callback.holder().applied() > applied ? "accept" : "refuse";
                        assertEquals(step.get("expect"), taken, where + ": the record is taken or not");
                    }
                } else {
                    check(callback, step, where);
                    checkRefusals(authorizer, step, where);
                }
            }
        } finally {
            callback.close();
            closeQuietly(authorizer);
        }
    }

    private static void checkRefusals(StopAuthorizer authorizer, Map<String, Object> step, String where) {
        for (Object w : step.containsKey("refused_writes") ? list(step.get("refused_writes")) : List.of()) {
            Map<String, Object> write = map(w);
            String topic = (String) write.get("topic");
            String principal = (String) write.getOrDefault("principal", "User:ANONYMOUS");
            String clientId = (String) write.getOrDefault("client_id", "client");
            List<AuthorizationResult> results = authorizer.authorize(RequestContexts.of(principal, clientId),
                    List.of(RequestContexts.write(topic)));
            boolean refused = results.get(0) == AuthorizationResult.DENIED;
            assertEquals(write.get("refused"), refused, where + ": write of " + principal + " to " + topic);
        }
    }

    private static void closeQuietly(StopAuthorizer authorizer) {
        try {
            authorizer.close();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static void check(PipelineQuotaCallback callback, Map<String, Object> step, String where) {
        Answer answer = callback.answer();
        if (step.containsKey("factor")) {
            assertEquals(number(step.get("factor")), answer.factor(), where + ": factor");
        }
        if (step.containsKey("basis")) {
            assertEquals(step.get("basis"), answer.basis().name().toLowerCase(Locale.ROOT), where + ": basis");
        }
        if (step.containsKey("reset_required")) {
            assertEquals(step.get("reset_required"), callback.quotaResetRequired(ClientQuotaType.PRODUCE),
                    where + ": quotaResetRequired(PRODUCE)");
        }
        if (step.containsKey("skipped")) {
            assertEquals(((Long) step.get("skipped")).longValue(), callback.holder().skipped(), where + ": skipped");
        }
        if (step.containsKey("refused")) {
            assertEquals(((Long) step.get("refused")).longValue(), callback.holder().refused(), where + ": refused");
        }
        for (Object l : step.containsKey("limits") ? list(step.get("limits")) : List.of()) {
            Map<String, Object> limit = map(l);
            ClientQuotaType type = ClientQuotaType.valueOf((String) limit.get("type"));
            String principal = (String) limit.getOrDefault("principal", "User:ANONYMOUS");
            String clientId = (String) limit.getOrDefault("client_id", "client");
            Map<String, String> tags = callback.quotaMetricTags(type, principal(principal), clientId);
            if (limit.containsKey("tags")) {
                assertEquals(limit.get("tags"), tags, where + ": tags of " + type + " for " + principal + " / "
                        + clientId);
            }
            double expected = "unlimited".equals(limit.get("limit")) ? Double.MAX_VALUE : number(limit.get("limit"));
            assertEquals(expected, callback.quotaLimit(type, tags),
                    where + ": limit of " + type + " for " + principal + " / " + clientId);
        }
    }

    static KafkaPrincipal principal(String text) {
        int colon = text.indexOf(':');
        return new KafkaPrincipal(text.substring(0, colon), text.substring(colon + 1));
    }

    private static byte[] key(Map<String, Object> step) {
        Object key = step.get("key");
        return key == JsonText.NULL || key == null ? null : ((String) key).getBytes(StandardCharsets.UTF_8);
    }

    /** null: a tombstone; a string: the raw text; an object: merged over the default record and written. */
    private static byte[] value(Map<String, Object> step, Map<String, Object> defaultRecord) {
        if (step.containsKey("value_hex")) {
            return HexFormat.of().parseHex((String) step.get("value_hex"));
        }
        Object value = step.get("value");
        if (value == JsonText.NULL) {
            return null;
        }
        if (value instanceof String) {
            return ((String) value).getBytes(StandardCharsets.UTF_8);
        }
        Map<String, Object> record = new LinkedHashMap<>(defaultRecord);
        record.putAll(map(value));
        return JsonText.write(record).getBytes(StandardCharsets.UTF_8);
    }

    private static Map<String, Object> properties(Map<String, Object> defaults, Map<String, Object> testCase) {
        Map<String, Object> props = new HashMap<>(map(map(defaults).get("properties")));
        props.putAll(map(testCase.get("properties")));
        props.putIfAbsent("quota.pipeline.state.dir", "");  // no last decision shared between cases
        return props;
    }

    private static double number(Object value) {
        return ((Number) value).doubleValue();
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> map(Object value) {
        return (Map<String, Object>) value;
    }

    @SuppressWarnings("unchecked")
    static List<Object> list(Object value) {
        return (List<Object>) value;
    }
}
