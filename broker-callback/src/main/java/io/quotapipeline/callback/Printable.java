package io.quotapipeline.callback;

/**
 * Text from outside (a record key or value, anyone may write one) as one log line may show it, so that a crafted
 * record can neither forge log lines, nor hide or reorder their text, nor flood the log.
 *
 * <p>The rule is the Python side's ({@code quota_pipeline.core.display.escape}, tests/vectors "escapes"): a code
 * point is shown as it is when printable, else escaped: {@code \xNN} below U+0100, {@code \\uNNNN} in the BMP, else
 * {@code \UNNNNNNNN}. Not printable are the general categories Cc, Cf (the bidirectional controls among them), Zl,
 * Zp, Zs but the ASCII space, Cs (a lone surrogate), Co and Cn, as Python's {@code str.isprintable} says. Code points
 * are counted, not UTF-16 chars.
 */
final class Printable {
    static final int MAX = 120;

    private Printable() {
    }

    /** {@code "text"}, escaped and cut after {@link #MAX} characters; {@code none} for null. */
    static String quote(String text) {
        return quote(text, MAX);
    }

    /** {@code "text"} ({@code "} and {@code \\} after a backslash), escaped, cut after {@code max} characters. */
    static String quote(String text, int max) {
        if (text == null) {
            return "none";
        }
        StringBuilder out = new StringBuilder(Math.min(text.length(), max) + 2).append('"');
        int more = append(out, text, max, true);
        out.append('"');
        return more == 0 ? out.toString() : out.append("... (").append(more).append(" more characters)").toString();
    }

    /** {@code text} with every code point that is not printable escaped (a backslash stays as it is). */
    static String visible(String text) {
        StringBuilder out = new StringBuilder(text.length());
        append(out, text, Integer.MAX_VALUE, false);
        return out.toString();
    }

    /** {@link #visible(String)}, cut after {@code max} characters. */
    static String visible(String text, int max) {
        StringBuilder out = new StringBuilder(Math.min(text.length(), max));
        int more = append(out, text, max, false);
        return more == 0 ? out.toString() : out.append("... (").append(more).append(" more characters)").toString();
    }

    /** Appends the first {@code max} code points of {@code text}, escaped; returns how many were left out. */
    private static int append(StringBuilder out, String text, int max, boolean quoting) {
        int shown = 0;
        for (int i = 0; i < text.length(); ) {
            if (shown == max) {
                return text.codePointCount(i, text.length());
            }
            int c = text.codePointAt(i);
            if (quoting && (c == '"' || c == '\\')) {
                out.append('\\').appendCodePoint(c);
            } else {
                escape(out, c);
            }
            i += Character.charCount(c);
            shown++;
        }
        return 0;
    }

    /** Appends {@code codePoint} as it is when printable, else its escape. */
    static void escape(StringBuilder out, int codePoint) {
        if (printable(codePoint)) {
            out.appendCodePoint(codePoint);
        } else if (codePoint < 0x100) {
            out.append(String.format("\\x%02x", codePoint));
        } else if (codePoint < 0x10000) {
            out.append(String.format("\\u%04x", codePoint));
        } else {
            out.append(String.format("\\U%08x", codePoint));
        }
    }

    /** Python's {@code str.isprintable} of one code point. */
    static boolean printable(int codePoint) {
        switch (Character.getType(codePoint)) {
            case Character.CONTROL, Character.FORMAT, Character.LINE_SEPARATOR, Character.PARAGRAPH_SEPARATOR,
                    Character.SURROGATE, Character.PRIVATE_USE, Character.UNASSIGNED:
                return false;
            case Character.SPACE_SEPARATOR:
                return codePoint == ' ';
            default:
                return true;
        }
    }
}
