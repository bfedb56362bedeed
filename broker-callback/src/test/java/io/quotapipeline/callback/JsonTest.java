package io.quotapipeline.callback;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The JSON reader accepts what Python's json.loads accepts, and refuses the rest. */
class JsonTest {

    @Test
    void readsObjectsArraysAndScalars() throws Exception {
        Object value = Json.parse(" {\"a\": [1, -2.5e1, true, false, null], \"b\": {\"c\": \"d\"}, \"a2\": 0} ");
        Map<?, ?> map = (Map<?, ?>) value;
        assertEquals(List.of(1L, -25.0, true, false, Json.NULL), map.get("a"));
        assertEquals(Map.of("c", "d"), map.get("b"));
        assertEquals(0L, map.get("a2"));
    }

    @Test
    void tellsIntegersFromOtherNumbers() throws Exception {
        assertEquals(1L, Json.parse("1"));
        assertEquals(1.0, Json.parse("1.0"));
        assertEquals(100.0, Json.parse("1E2"));
        assertEquals(new BigInteger("123456789012345678901234567890"), Json.parse("123456789012345678901234567890"));
    }

    @Test
    void readsEscapesAndUnicode() throws Exception {
        assertEquals("q\"b\\s/\b\f\n\r\t\u00e9\ud83d\ude00", Json.parse("\"q\\\"b\\\\s\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\""));
        assertEquals("é", Json.parse("\"é\"".getBytes(StandardCharsets.UTF_8)));
    }

    @Test
    void acceptsPythonsNonFiniteLiterals() throws Exception {
        assertEquals(List.of(Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY),
                Json.parse("[NaN, Infinity, -Infinity]"));
    }

    @Test
    void keepsTheLastOfRepeatedKeysAndSkipsAByteOrderMark() throws Exception {
        assertEquals(Map.of("k", 2L), Json.parse("{\"k\": 1, \"k\": 2}"));
        assertEquals(Map.of(), Json.parse(new byte[] {(byte) 0xEF, (byte) 0xBB, (byte) 0xBF, '{', '}'}));
    }

    @ParameterizedTest
    @ValueSource(strings = {"", " ", "{", "}", "[1,]", "{\"a\":1,}", "{'a': 1}", "01", "-", "1.", ".5", "1e", "+1",
        "tru", "nul", "\"unterminated", "\"bad \\x escape\"", "\"\\u12\"", "{\"a\" 1}", "[1 2]", "{} {}", "nan",
        "\"tab\tinside\""})
    void refusesMalformedText(String text) {
        assertThrows(Json.ParseException.class, () -> Json.parse(text));
    }

    @Test
    void refusesBytesThatAreNotUtf8() {
        Json.ParseException e = assertThrows(Json.ParseException.class,
                () -> Json.parse(new byte[] {'{', (byte) 0xC3, '(', '}'}));
        assertEquals("the value is not UTF-8", e.getMessage());
    }

    @Test
    void refusesNestingBeyondTheLimitInsteadOfOverflowingTheStack() {
        String deep = "[".repeat(100_000) + "]".repeat(100_000);
        Json.ParseException e = assertThrows(Json.ParseException.class, () -> Json.parse(deep));
        assertTrue(e.getMessage().contains("nested too deeply"));
    }

    @Test
    void nullIsOneSharedValue() throws Exception {
        assertSame(Json.NULL, ((Map<?, ?>) Json.parse("{\"x\": null}")).get("x"));
    }
}
