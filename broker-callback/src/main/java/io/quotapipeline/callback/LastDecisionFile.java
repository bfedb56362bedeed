package io.quotapipeline.callback;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
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
 * a decision. The file holds the record's value exactly as read from the topic; writes are atomic (a temporary file
 * renamed over it), and a write that fails (a full disk) is logged once and never fails the broker.
 */
final class LastDecisionFile {
    private static final Logger log = LoggerFactory.getLogger(LastDecisionFile.class);
    /** A decision record is a few kilobytes; anything larger is not one of ours. */
    static final int MAX_BYTES = 1 << 20;

    private final Path path;
    private boolean failing;  // follower thread only: a failed write is logged once until one succeeds

    LastDecisionFile(Path path) {
        this.path = path;
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
        byte[] value = read();
        if (value == null) {
            return null;
        }
        DecisionHolder.Outcome outcome = holder.apply(cluster.getBytes(StandardCharsets.UTF_8), value, " from " + path);
        log.info("last decision from {}: {}", path, outcome);
        return outcome;
    }

    /** A sink that applies each record to {@code holder} and keeps the ones it applied in this file. */
    RecordSink keeping(DecisionHolder holder) {
        return (key, value, where) -> {
            if (holder.apply(key, value, where) == DecisionHolder.Outcome.APPLIED) {
                write(value);
            }
        };
    }

    Path path() {
        return path;
    }

    /** The stored record value, or null when there is none or it cannot be read (logged). */
    byte[] read() {
        try (InputStream in = Files.newInputStream(path)) {
            byte[] value = in.readNBytes(MAX_BYTES + 1);
            if (value.length > MAX_BYTES) {
                log.warn("ignored {}: larger than {} bytes, not a decision record", path, MAX_BYTES);
                return null;
            }
            return value;
        } catch (NoSuchFileException e) {
            return null;
        } catch (IOException | SecurityException e) {
            log.warn("cannot read the last decision from {}: {}; starting without it", path, e.toString());
            return null;
        }
    }

    /** Replaces the stored record with {@code value}; never throws. */
    void write(byte[] value) {
        Path tmp = null;
        try {
            Files.createDirectories(path.getParent());
            tmp = Files.createTempFile(path.getParent(), path.getFileName().toString(), ".tmp");
            Files.write(tmp, value);
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
