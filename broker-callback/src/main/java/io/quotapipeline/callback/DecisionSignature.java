package io.quotapipeline.callback;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Signed decision records: the pipeline signs each record with an HMAC-SHA-256 over its key and value, and a reader
 * given keys ({@code quota.pipeline.signing.keys}) refuses every record not signed with one of them, so that anyone
 * else who can write the decision topic cannot move the factor (docs/security.md). The Python side is
 * quota_pipeline/core/signing.py; the two are held equal by tests/vectors/broker_quota_vectors.json.
 *
 * <p>The signature travels in the record header {@value #HEADER} as {@code <key id>:<64 hex digits>}; the MAC is
 * over the key's length (4 bytes, big-endian; a null key counts as empty), the key's bytes and the value's bytes,
 * exactly as written to the topic, so no JSON is re-encoded to check it.
 */
final class DecisionSignature {
    static final String HEADER = "quota-pipeline-signature";
    static final int MIN_SECRET_CHARS = 32;
    static final int MAX_KEYS = 2;
    private static final String ALGORITHM = "HmacSHA256";
    private static final Pattern ID = Pattern.compile("[A-Za-z0-9._-]{1,64}");
    private static final Pattern HEX = Pattern.compile("[0-9a-fA-F]{64}");

    /** No key configured: records are taken signed or not. */
    static final DecisionSignature NONE = new DecisionSignature(List.of());

    /** One shared key: its id (named in the header) and its secret, which is never printed. */
    record SigningKey(String id, String secret) {
        @Override
        public String toString() {
            return id + ":[hidden]";
        }
    }

    private final List<SigningKey> keys;

    DecisionSignature(List<SigningKey> keys) {
        this.keys = List.copyOf(keys);
    }

    /**
     * {@code <id>:<secret>} entries, ','-separated, at most two; blank: none. The messages are the Python config's.
     *
     * @throws IllegalArgumentException with the message to show after the property name
     */
    static List<SigningKey> parse(String raw) {
        List<SigningKey> keys = new ArrayList<>();
        for (String part : raw.split(",", -1)) {
            String entry = part.strip();
            if (entry.isEmpty()) {
                continue;
            }
            int colon = entry.indexOf(':');
            String id = colon < 0 ? "" : entry.substring(0, colon).strip();
            if (!ID.matcher(id).matches()) {
                throw new IllegalArgumentException("each ','-separated key must be written <id>:<secret>, the id of "
                        + "letters, digits, '.', '_' or '-' (at most 64 characters)");
            }
            String secret = entry.substring(colon + 1).strip();
            if (secret.length() < MIN_SECRET_CHARS) {
                throw new IllegalArgumentException("each key's secret must be at least " + MIN_SECRET_CHARS
                        + " characters (for example the output of openssl rand -base64 32)");
            }
            keys.add(new SigningKey(id, secret));
        }
        if (keys.size() > MAX_KEYS) {
            throw new IllegalArgumentException("at most two keys: the one the pipeline signs with and one more "
                    + "during a rotation");
        }
        Set<String> ids = new HashSet<>();
        for (SigningKey key : keys) {
            if (!ids.add(key.id())) {
                throw new IllegalArgumentException("two keys have the id " + key.id() + ": give each its own");
            }
        }
        return keys;
    }

    List<SigningKey> keys() {
        return keys;
    }

    /** For a start-up line: whether records must be signed, and with which key ids (never the secrets). */
    String describe() {
        return keys.isEmpty() ? "unsigned records taken (" + CallbackConfig.SIGNING_KEYS + " not set)"
                : "only records signed with key " + keys.stream().map(SigningKey::id).collect(Collectors.joining(" or "))
                + " taken";
    }

    /** True when records must carry a valid signature. */
    boolean required() {
        return !keys.isEmpty();
    }

    /**
     * Why a reader holding these keys must not take the record, or null when it may (no key configured, or the
     * header names one of them and its MAC matches).
     *
     * @param signature the value of the record's last {@value #HEADER} header, or null
     */
    String refusal(byte[] key, byte[] value, byte[] signature) {
        if (keys.isEmpty()) {
            return null;
        }
        if (signature == null) {
            return "it carries no " + HEADER + " header, and " + CallbackConfig.SIGNING_KEYS + " requires one";
        }
        String text = new String(signature, StandardCharsets.UTF_8);
        int colon = text.lastIndexOf(':');
        if (colon < 0 || !HEX.matcher(text.substring(colon + 1)).matches()) {
            return "its " + HEADER + " header is not <key id>:<64 hex digits>";
        }
        String id = text.substring(0, colon);
        for (SigningKey k : keys) {
            if (k.id().equals(id)) {
                byte[] expected = mac(k.secret(), key, value);
                byte[] given = HexFormat.of().parseHex(text.substring(colon + 1).toLowerCase(Locale.ROOT));
                return MessageDigest.isEqual(expected, given) ? null : "its signature does not match key "
                        + Printable.quote(id) + ": not written by the pipeline, or altered";
            }
        }
        return "it is signed with key id " + Printable.quote(id) + ", which this reader does not hold (it holds "
                + keys.stream().map(SigningKey::id).collect(Collectors.joining(", ")) + ")";
    }

    /** The {@value #HEADER} header value for a record signed with {@code signingKey}. */
    static byte[] sign(SigningKey signingKey, byte[] key, byte[] value) {
        return (signingKey.id() + ":" + HexFormat.of().formatHex(mac(signingKey.secret(), key, value)))
                .getBytes(StandardCharsets.UTF_8);
    }

    /** HMAC-SHA-256 under {@code secret} (UTF-8) over the key's length, the key and the value. */
    static byte[] mac(String secret, byte[] key, byte[] value) {
        byte[] k = key == null ? new byte[0] : key;
        try {
            Mac mac = Mac.getInstance(ALGORITHM);
            mac.init(new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), ALGORITHM));
            mac.update(ByteBuffer.allocate(4).putInt(k.length).array());
            mac.update(k);
            mac.update(value);
            return mac.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("this JVM has no " + ALGORITHM + ", which every Java 17 has", e);
        }
    }
}
