package io.quotapipeline.callback;

/**
 * Text from outside (a record key, anyone may write one) as one log line may show it: quoted, with control,
 * format and line-separator characters escaped as {@code \\uXXXX}, and cut after {@link #MAX} characters, so a
 * crafted key can neither forge log lines nor flood the log.
 */
final class Printable {
    static final int MAX = 120;

    private Printable() {
    }

    /** {@code "text"}, escaped and cut after {@link #MAX} characters; {@code none} for null. */
    static String quote(String text) {
        return quote(text, MAX);
    }

    /** {@code "text"}, escaped and cut after {@code max} characters; {@code none} for null. */
    static String quote(String text, int max) {
        if (text == null) {
            return "none";
        }
        StringBuilder out = new StringBuilder(Math.min(text.length(), max) + 2).append('"');
        int shown = 0;
        for (int i = 0; i < text.length(); i++) {
            if (shown == max) {
                return out.append("\"... (").append(text.length() - i).append(" more characters)").toString();
            }
            char c = text.charAt(i);
            int type = Character.getType(c);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (Character.isISOControl(c) || type == Character.FORMAT || type == Character.LINE_SEPARATOR
                    || type == Character.PARAGRAPH_SEPARATOR || type == Character.SURROGATE
                    || type == Character.UNASSIGNED || type == Character.PRIVATE_USE) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
            shown++;
        }
        return out.append('"').toString();
    }
}
