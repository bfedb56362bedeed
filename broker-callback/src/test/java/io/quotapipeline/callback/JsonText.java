package io.quotapipeline.callback;

import java.util.List;
import java.util.Map;

/** Writes the values {@link Json} reads back to JSON text (test records). */
final class JsonText {
    private JsonText() {
    }

    static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(value, out);
        return out.toString();
    }

    private static void write(Object value, StringBuilder out) {
        if (value == Json.NULL || value == null) {
            out.append("null");
        } else if (value instanceof String) {
            string((String) value, out);
        } else if (value instanceof Map) {
            out.append('{');
            String sep = "";
            for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
                out.append(sep);
                string((String) e.getKey(), out);
                out.append(':');
                write(e.getValue(), out);
                sep = ",";
            }
            out.append('}');
        } else if (value instanceof List) {
            out.append('[');
            String sep = "";
            for (Object item : (List<?>) value) {
                out.append(sep);
                write(item, out);
                sep = ",";
            }
            out.append(']');
        } else {
            out.append(value);  // Long, BigInteger, Double (NaN and Infinity as both readers accept), Boolean
        }
    }

    private static void string(String s, StringBuilder out) {
        out.append('"');
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        out.append('"');
    }
}
