package io.quotapipeline.callback;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

/**
 * The record parser (the broker's Jackson) takes and refuses what the Python reader's json.loads does: each case
 * below was checked against quota_pipeline.reader.parsing.parse_decision.
 */
class DecisionRecordTest {
    private static final String RECORD = "{\"schema_version\":1,\"cluster_id\":\"c1\",\"decided_at\":\"2026-11-21T10:00:10.100Z\","
            + "\"status\":\"SUCCESS\",\"active_brokers\":3,\"active_log_dirs\":6,\"violations\":0,\"observed_at\":"
            + "\"2026-11-21T10:00:10.000Z\",\"throttle_factor\":0.5,\"source\":\"OBSERVATION\",\"valid_until\":"
            + "\"2026-11-21T10:05:10.000Z\",\"x\":%s}";

    private static DecisionRecord parse(String text) throws DecisionRecord.InvalidRecordException {
        return DecisionRecord.parse(text.getBytes(StandardCharsets.UTF_8));
    }

    private static String withUnknownField(String value) {
        return RECORD.replace("%s", value);
    }

    @ParameterizedTest
    @ValueSource(strings = {"NaN", "Infinity", "-Infinity", "\"\\ud800\"", "[1, -2.5e1, true, false, null, {}]",
            "123456789012345678901234567890", "1e400"})
    void anUnknownFieldIsIgnoredWhateverJsonValueItHolds(String value) throws Exception {
        assertEquals(0.5, parse(withUnknownField(value)).throttleFactor());
    }

    @ParameterizedTest
    @ValueSource(strings = {"+Infinity", "INF", "-INF", "01", "1.", ".5", "'a'", "[1,]", "\"\u0001\""})
    void whatPythonsJsonRefusesIsRefused(String value) {
        assertThrows(DecisionRecord.InvalidRecordException.class, () -> parse(withUnknownField(value)));
    }

    @Test
    void limitsArePythons() throws Exception {
        parse(withUnknownField("1" + "0".repeat(4299)));  // Python's int limit: 4300 digits
        assertThrows(DecisionRecord.InvalidRecordException.class, () -> parse(withUnknownField("1" + "0".repeat(4400))));
        parse(withUnknownField("[".repeat(990) + "]".repeat(990)));  // Python's recursion limit: about 1000
        assertThrows(DecisionRecord.InvalidRecordException.class,
                () -> parse(withUnknownField("[".repeat(100_000) + "]".repeat(100_000))));
    }

    @Test
    void theLastOfDuplicateKeysWinsAndAByteOrderMarkIsRefused() throws Exception {
        assertEquals(0.25, parse(withUnknownField("0").replace("\"x\"", "\"throttle_factor\":0.1,\"throttle_factor\":0.25,\"y\""))
                .throttleFactor());
        byte[] body = withUnknownField("0").getBytes(StandardCharsets.UTF_8);
        byte[] bom = new byte[body.length + 3];
        bom[0] = (byte) 0xEF;
        bom[1] = (byte) 0xBB;
        bom[2] = (byte) 0xBF;
        System.arraycopy(body, 0, bom, 3, body.length);
        DecisionRecord.InvalidRecordException e = assertThrows(DecisionRecord.InvalidRecordException.class,
                () -> DecisionRecord.parse(bom));
        assertTrue(e.getMessage().contains("byte order mark"), e.getMessage());
        assertEquals(Instant.parse("2026-11-21T10:00:10Z"), DecisionRecord.parse(body).observedAt());
    }

    @Test
    void brokenTextIsRefusedWithWhatIsWrong() {
        DecisionRecord.InvalidRecordException e = assertThrows(DecisionRecord.InvalidRecordException.class,
                () -> DecisionRecord.parse(new byte[] {'{', (byte) 0xC3, '(', '}'}));
        assertTrue(e.getMessage().contains("not UTF-8"), e.getMessage());
        e = assertThrows(DecisionRecord.InvalidRecordException.class, () -> parse(withUnknownField("0") + " {}"));
        assertTrue(e.getMessage().startsWith("the value is not JSON"), e.getMessage());
        e = assertThrows(DecisionRecord.InvalidRecordException.class, () -> parse(""));
        assertTrue(e.getMessage().contains("not a JSON object"), e.getMessage());
        e = assertThrows(DecisionRecord.InvalidRecordException.class, () -> parse("[1]"));
        assertTrue(e.getMessage().contains("not a JSON object"), e.getMessage());
    }

    @ParameterizedTest
    @ValueSource(strings = {"1.0", "true", "\"1\"", "3", "18446744073709551617"})
    void schemaVersionMustBeTheInteger1Or2(String version) {
        assertThrows(DecisionRecord.InvalidRecordException.class,
                () -> parse(withUnknownField("0").replace("\"schema_version\":1", "\"schema_version\":" + version)));
    }

    @Test
    void aHugeInvalidValueIsCutShortInTheMessage() {
        DecisionRecord.InvalidRecordException e = assertThrows(DecisionRecord.InvalidRecordException.class,
                () -> parse(withUnknownField("0").replace("0.5", "\"" + "x".repeat(10_000) + "\"")));
        assertTrue(e.getMessage().length() < 200, e.getMessage());
    }
}
