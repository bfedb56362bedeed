package io.quotapipeline.callback;

import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small strict JSON reader (RFC 8259) so the callback needs no JSON library on the broker's classpath.
 *
 * <p>Values: {@code Map<String, Object>} (insertion order), {@code List<Object>}, {@code String}, {@code Long} or
 * {@code BigInteger} for integer literals, {@code Double} for the others, {@code Boolean}, and {@link #NULL}.
 * Like Python's {@code json.loads} it also accepts {@code NaN}, {@code Infinity} and {@code -Infinity}, so a
 * record the Python reader takes is never refused here for a field neither of them reads.
 */
final class Json {
    /** JSON null (a Map cannot tell an absent key from a null value otherwise). */
    static final Object NULL = new Object() {
        @Override
        public String toString() {
            return "null";
        }
    };

    private static final int MAX_DEPTH = 200;
    private final String text;
    private int pos;

    private Json(String text) {
        this.text = text;
    }

    /** Thrown for anything that is not one well-formed JSON value. */
    static final class ParseException extends Exception {
        private static final long serialVersionUID = 1L;

        ParseException(String message) {
            super(message);
        }
    }

    static Object parse(byte[] utf8) throws ParseException {
        return parse(decode(utf8));
    }

    static Object parse(String text) throws ParseException {
        Json reader = new Json(text.startsWith("\uFEFF") ? text.substring(1) : text);
        reader.skipWhitespace();
        Object value = reader.value(0);
        reader.skipWhitespace();
        if (reader.pos != reader.text.length()) {
            throw reader.error("unexpected text after the JSON value");
        }
        return value;
    }

    private static String decode(byte[] utf8) throws ParseException {
        try {
            return StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(utf8)).toString();
        } catch (CharacterCodingException e) {
            throw new ParseException("the value is not UTF-8");
        }
    }

    private Object value(int depth) throws ParseException {
        if (depth > MAX_DEPTH) {
            throw error("nested too deeply");
        }
        if (pos >= text.length()) {
            throw error("unexpected end of input");
        }
        char c = text.charAt(pos);
        switch (c) {
            case '{':
                return object(depth);
            case '[':
                return array(depth);
            case '"':
                return string();
            case 't':
                return literal("true", Boolean.TRUE);
            case 'f':
                return literal("false", Boolean.FALSE);
            case 'n':
                return literal("null", NULL);
            case 'N':
                return literal("NaN", Double.NaN);
            case 'I':
                return literal("Infinity", Double.POSITIVE_INFINITY);
            default:
                if (c == '-' && text.startsWith("-Infinity", pos)) {
                    return literal("-Infinity", Double.NEGATIVE_INFINITY);
                }
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw error("unexpected character '" + c + "'");
        }
    }

    private Map<String, Object> object(int depth) throws ParseException {
        Map<String, Object> map = new LinkedHashMap<>();
        pos++;
        skipWhitespace();
        if (peek('}')) {
            pos++;
            return map;
        }
        while (true) {
            skipWhitespace();
            if (!peek('"')) {
                throw error("expected a string key");
            }
            String key = string();
            skipWhitespace();
            expect(':');
            skipWhitespace();
            map.put(key, value(depth + 1));  // a repeated key keeps its last value, as in Python
            skipWhitespace();
            if (peek(',')) {
                pos++;
            } else {
                expect('}');
                return map;
            }
        }
    }

    private List<Object> array(int depth) throws ParseException {
        List<Object> list = new ArrayList<>();
        pos++;
        skipWhitespace();
        if (peek(']')) {
            pos++;
            return list;
        }
        while (true) {
            skipWhitespace();
            list.add(value(depth + 1));
            skipWhitespace();
            if (peek(',')) {
                pos++;
            } else {
                expect(']');
                return list;
            }
        }
    }

    private String string() throws ParseException {
        StringBuilder out = new StringBuilder();
        pos++;
        while (pos < text.length()) {
            char c = text.charAt(pos++);
            if (c == '"') {
                return out.toString();
            }
            if (c < 0x20) {
                throw error("control character in a string");
            }
            if (c != '\\') {
                out.append(c);
                continue;
            }
            if (pos >= text.length()) {
                break;
            }
            char e = text.charAt(pos++);
            switch (e) {
                case '"': case '\\': case '/': out.append(e); break;
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'n': out.append('\n'); break;
                case 'r': out.append('\r'); break;
                case 't': out.append('\t'); break;
                case 'u': out.append(unicodeEscape()); break;
                default: throw error("invalid escape \\" + e);
            }
        }
        throw error("unterminated string");
    }

    private char unicodeEscape() throws ParseException {
        if (pos + 4 > text.length()) {
            throw error("short \\u escape");
        }
        String hex = text.substring(pos, pos + 4);
        if (!hex.matches("[0-9A-Fa-f]{4}")) {
            throw error("invalid \\u escape");
        }
        pos += 4;
        return (char) Integer.parseInt(hex, 16);
    }

    private Object number() throws ParseException {
        int start = pos;
        if (peek('-')) {
            pos++;
        }
        if (peek('0')) {
            pos++;
        } else if (!digits()) {
            throw error("invalid number");
        }
        boolean integral = true;
        if (peek('.')) {
            pos++;
            integral = false;
            if (!digits()) {
                throw error("invalid number");
            }
        }
        if (peek('e') || peek('E')) {
            pos++;
            integral = false;
            if (peek('+') || peek('-')) {
                pos++;
            }
            if (!digits()) {
                throw error("invalid number");
            }
        }
        String literal = text.substring(start, pos);
        if (!integral) {
            return Double.parseDouble(literal);
        }
        BigInteger value = new BigInteger(literal);
        return value.bitLength() < 64 ? (Object) value.longValue() : value;
    }

    private boolean digits() {
        int start = pos;
        while (pos < text.length() && text.charAt(pos) >= '0' && text.charAt(pos) <= '9') {
            pos++;
        }
        return pos > start;
    }

    private Object literal(String word, Object value) throws ParseException {
        if (!text.startsWith(word, pos)) {
            throw error("unexpected token");
        }
        pos += word.length();
        return value;
    }

    private boolean peek(char c) {
        return pos < text.length() && text.charAt(pos) == c;
    }

    private void expect(char c) throws ParseException {
        if (!peek(c)) {
            throw error("expected '" + c + "'");
        }
        pos++;
    }

    private void skipWhitespace() {
        while (pos < text.length()) {
            char c = text.charAt(pos);
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                return;
            }
            pos++;
        }
    }

    private ParseException error(String what) {
        return new ParseException("invalid JSON at character " + pos + ": " + what);
    }
}
