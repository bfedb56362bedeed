package io.quotapipeline.callback;

import java.io.IOException;
import java.io.InputStream;
import java.nio.channels.Channels;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.OpenOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.UserPrincipal;
import java.util.Arrays;
import java.util.Set;
import java.util.function.Supplier;
import java.util.regex.Pattern;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The last decision record this broker applied, kept on its own disk so a restart starts from it.
 *
 * <p>Without it a broker that restarts while the decision topic cannot be read (the output cluster down, a slow
 * consumer) answers "no decision yet", factor 1.0 for one validity, even when the decision it held a moment before
 * was a stop still in force. Restored, the record goes through the holder's usual rules (a record dated ahead is
 * refused, one past observed_at + validity + skew means the fallback), so a stale or foreign file can never extend
 * a decision. The file holds the record exactly as read from the topic: its signature header's value on a first line
 * {@code quota-pipeline-signature: <value>} when it had one (so a restored record is checked like one from the topic),
 * then the value. Writes are atomic (a temporary file renamed over it), and a write that fails (a full disk) is
 * logged once and never fails the broker.
 *
 * <p>Only a regular file owned by the broker's own user is read, and never through a link: a local user who could
 * put a FIFO there would hang the broker's start, a link would make it read another file (one clear line says why the
 * file was ignored).
 */
final class LastDecisionFile {
    private static final Logger log = LoggerFactory.getLogger(LastDecisionFile.class);
    /** A decision record is a few kilobytes; anything larger is not one of ours. */
    static final int MAX_BYTES = 1 << 20;

    /** The first line of a file whose record was signed. */
    static final byte[] SIGNATURE_LINE = (DecisionSignature.HEADER + ": ").getBytes(StandardCharsets.UTF_8);
    private static final Set<OpenOption> READ_NO_LINKS = Set.of(StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS);

    /** A record as stored: its signature header's value (or null) and its value. */
    record Stored(byte[] signature, byte[] value) {
    }

    private final Path path;
    private final Supplier<UserPrincipal> brokerUser;
    private boolean failing;  // follower thread only: a failed write is logged once until one succeeds

    LastDecisionFile(Path path) {
        this(path, null);
    }

    /** @param brokerUser the user the broker runs as; null: this JVM's own (see {@link #ownUser}) */
    LastDecisionFile(Path path, Supplier<UserPrincipal> brokerUser) {
        this.path = path;
        this.brokerUser = brokerUser != null ? brokerUser : this::ownUser;
    }

    /** The pipeline's safe names (core/names.py): a cluster name that is not one never becomes a path. */
    private static final Pattern SAFE_NAME = Pattern.compile("[A-Za-z0-9_-][A-Za-z0-9._-]{0,248}");

    /**
     * The file for {@code cluster} under {@code dir}, or null (kept in memory only) when {@code dir} is empty or the
     * cluster name is not a safe file name (logged).
     */
    static LastDecisionFile in(String dir, String cluster) {
        if (dir == null || dir.isBlank()) {
            return null;
        }
        if (cluster == null || !SAFE_NAME.matcher(cluster).matches()) {
            log.warn("the last decision is kept in memory only: cluster name {} is not a safe file name "
                    + "(letters, digits, '.', '_', '-')", Printable.quote(cluster));
            return null;
        }
        return new LastDecisionFile(Path.of(dir, cluster + ".decision.json"));
    }

    /** Applies the stored record to {@code holder} under the holder's usual rules; what became of it, or null. */
    DecisionHolder.Outcome restore(DecisionHolder holder, String cluster) {
        Stored stored = read();
        if (stored == null) {
            return null;
        }
        DecisionHolder.Outcome outcome = holder.restore(cluster.getBytes(StandardCharsets.UTF_8), stored.value(),
                stored.signature(), " from " + path);
        log.info("last decision from {}: {}", path, outcome);
        return outcome;
    }

    /** A sink that applies each record to {@code holder} and keeps the ones it applied in this file. */
    RecordSink keeping(DecisionHolder holder) {
        return (key, value, signature, where) -> {
            if (holder.apply(key, value, signature, where) == DecisionHolder.Outcome.APPLIED) {
                write(value, signature);
            }
        };
    }

    Path path() {
        return path;
    }

    /** The stored record, or null when there is none, it cannot be read or it is refused (logged). */
    Stored read() {
        try {
            BasicFileAttributes attributes = Files.readAttributes(path, BasicFileAttributes.class,
                    LinkOption.NOFOLLOW_LINKS);
            if (!attributes.isRegularFile()) {
                return refuse("it is " + kind(attributes) + ", not a regular file");
            }
            UserPrincipal owner = Files.getOwner(path, LinkOption.NOFOLLOW_LINKS);
            UserPrincipal broker = brokerUser.get();
            if (broker == null) {
                return refuse("the user this broker runs as could not be told");
            }
            if (!owner.equals(broker)) {
                return refuse("it is owned by " + Printable.quote(owner.getName()) + ", not by the broker's user "
                        + Printable.quote(broker.getName()));
            }
        } catch (NoSuchFileException e) {
            return null;
        } catch (IOException | UnsupportedOperationException | SecurityException e) {
            log.warn("cannot read the last decision from {}: {}; starting without it", path, e.toString());
            return null;
        }
        try (InputStream in = Channels.newInputStream(Files.newByteChannel(path, READ_NO_LINKS))) {
            byte[] content = in.readNBytes(MAX_BYTES + 1);
            if (content.length > MAX_BYTES) {
                return refuse("it is larger than " + MAX_BYTES + " bytes, not a decision record");
            }
            return stored(content);
        } catch (NoSuchFileException e) {
            return null;
        } catch (IOException | SecurityException e) {
            log.warn("cannot read the last decision from {}: {}; starting without it", path, e.toString());
            return null;
        }
    }

    private Stored refuse(String why) {
        log.warn("ignored the last decision file {}: {}; starting without it (remove it, and give {} to the Kafka "
                + "user alone)", path, why, CallbackConfig.STATE_DIR);
        return null;
    }

    private static String kind(BasicFileAttributes attributes) {
        if (attributes.isSymbolicLink()) {
            return "a symbolic link";
        }
        return attributes.isDirectory() ? "a directory" : "a FIFO, socket or device";
    }

    /** The file's content read back: a signature line when the record was signed, then the value. */
    static Stored stored(byte[] content) {
        if (!startsWith(content, SIGNATURE_LINE)) {
            return new Stored(null, content);
        }
        int end = SIGNATURE_LINE.length;
        while (end < content.length && content[end] != '\n') {
            end++;
        }
        byte[] signature = Arrays.copyOfRange(content, SIGNATURE_LINE.length, end);
        return new Stored(signature, Arrays.copyOfRange(content, Math.min(end + 1, content.length), content.length));
    }

    /** What {@link #write} stores for a record. */
    static byte[] content(byte[] value, byte[] signature) {
        if (signature == null) {
            return value;
        }
        byte[] out = Arrays.copyOf(SIGNATURE_LINE, SIGNATURE_LINE.length + signature.length + 1 + value.length);
        System.arraycopy(signature, 0, out, SIGNATURE_LINE.length, signature.length);
        out[SIGNATURE_LINE.length + signature.length] = '\n';
        System.arraycopy(value, 0, out, SIGNATURE_LINE.length + signature.length + 1, value.length);
        return out;
    }

    private static boolean startsWith(byte[] content, byte[] prefix) {
        return content.length >= prefix.length && Arrays.equals(content, 0, prefix.length, prefix, 0, prefix.length);
    }

    /**
     * The user this JVM runs as, found without writing anything (the disk may be the full one): the owner of
     * /proc/self on Linux, else the user named by user.name, else the owner of a file it creates (a UID without a
     * name in a container has no user.name to look up). Null when none of these answers.
     */
    private UserPrincipal ownUser() {
        try {
            Path self = Path.of("/proc/self");
            if (Files.isDirectory(self)) {
                return Files.getOwner(self);
            }
        } catch (IOException | UnsupportedOperationException | SecurityException e) {
            // not Linux, or no procfs: the next way
        }
        try {
            return path.getFileSystem().getUserPrincipalLookupService()
                    .lookupPrincipalByName(System.getProperty("user.name"));
        } catch (IOException | UnsupportedOperationException | SecurityException e) {
            // a UID without a name: the last way
        }
        Path probe = null;
        try {
            probe = Files.createTempFile(path.getParent(), ".owner", ".tmp");
            return Files.getOwner(probe, LinkOption.NOFOLLOW_LINKS);
        } catch (IOException | UnsupportedOperationException | SecurityException e) {
            return null;
        } finally {
            if (probe != null) {
                try {
                    Files.deleteIfExists(probe);
                } catch (IOException ignored) {
                    // a stray empty file of our own: harmless
                }
            }
        }
    }

    /** Replaces the stored record with {@code value} (unsigned); never throws. */
    void write(byte[] value) {
        write(value, null);
    }

    /** Replaces the stored record with {@code value} and its signature header's value (or null); never throws. */
    void write(byte[] value, byte[] signature) {
        Path tmp = null;
        try {
            Files.createDirectories(path.getParent());
            tmp = Files.createTempFile(path.getParent(), path.getFileName().toString(), ".tmp");
            Files.write(tmp, content(value, signature));
            try {
                Files.move(tmp, path, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, path, StandardCopyOption.REPLACE_EXISTING);
            }
            if (failing) {
                log.info("the last decision is written to {} again", path);
                failing = false;
            }
        } catch (IOException | SecurityException e) {
            if (tmp != null) {
                try {
                    Files.deleteIfExists(tmp);
                } catch (IOException ignored) {
                    // the same disk just failed a write: nothing more to do
                }
            }
            if (!failing) {
                log.warn("cannot write the last decision to {} ({}); a restart of this broker starts without it "
                        + "until a write succeeds (set quota.pipeline.state.dir to a writable directory)", path,
                        e.toString());
                failing = true;
            }
        }
    }
}
