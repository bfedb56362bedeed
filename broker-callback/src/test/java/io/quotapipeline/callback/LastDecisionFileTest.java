package io.quotapipeline.callback;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.UserPrincipal;
import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The broker's last decision file: only a regular file of the broker's own user, never through a link. */
class LastDecisionFileTest {
    private static final Instant START = Instant.parse("2026-11-21T10:00:00Z");
    private static final byte[] C1 = "c1".getBytes(StandardCharsets.UTF_8);

    private static byte[] record(double factor) {
        return ("{\"schema_version\": 1, " + TestRecords.required(START) + ", \"observed_at\": \"" + START
                + "\", \"throttle_factor\": " + factor + ", \"source\": \"OBSERVATION\", \"valid_until\": \""
                + START.plusSeconds(300) + "\"}").getBytes(StandardCharsets.UTF_8);
    }

    private static DecisionHolder holder(List<DecisionSignature.SigningKey> keys) {
        return new DecisionHolder("c1", Duration.ofMinutes(5), 1.0, Duration.ofSeconds(30),
                new MutableClock(START.plusSeconds(1)), new DecisionSignature(keys));
    }

    @Test
    void aFifoInTheFilesPlaceNeitherHangsTheStartNorIsRead(@TempDir Path dir) throws Exception {
        Path fifo = dir.resolve("c1.decision.json");
        assertEquals(0, new ProcessBuilder("mkfifo", fifo.toString()).start().waitFor());
        LastDecisionFile file = new LastDecisionFile(fifo);
        assertTimeoutPreemptively(Duration.ofSeconds(5), () -> assertNull(file.read()));
    }

    @Test
    void aLinkIsNeverFollowed(@TempDir Path dir) throws Exception {
        Path elsewhere = Files.write(dir.resolve("elsewhere.json"), record(0.0));
        Path link = Files.createSymbolicLink(dir.resolve("c1.decision.json"), elsewhere);
        assertNull(new LastDecisionFile(link).read());
        assertNotNull(new LastDecisionFile(elsewhere).read(), "the same record in a regular file of ours is read");
    }

    @Test
    void aFileOfAnotherUserIsNotRead(@TempDir Path dir) throws Exception {
        Path path = Files.write(dir.resolve("c1.decision.json"), record(0.0));
        UserPrincipal owner = Files.getOwner(path, LinkOption.NOFOLLOW_LINKS);
        UserPrincipal other = path.getFileSystem().getUserPrincipalLookupService()
                .lookupPrincipalByName(owner.getName().equals("nobody") ? "root" : "nobody");
        assertNotEquals(owner, other);
        assertNull(new LastDecisionFile(path, () -> other).read());
        assertNotNull(new LastDecisionFile(path, () -> owner).read());
    }

    @Test
    void aStoredStopIsReadOnAFullDiskToo(@TempDir Path dir) throws Exception {
        // The broker's own user is found without writing a file: the disk holding the state may be the full one.
        Path path = Files.write(dir.resolve("c1.decision.json"), record(0.0));
        Files.setPosixFilePermissions(dir, java.nio.file.attribute.PosixFilePermissions.fromString("r-x------"));
        try {
            assertNotNull(new LastDecisionFile(path).read());
        } finally {
            Files.setPosixFilePermissions(dir, java.nio.file.attribute.PosixFilePermissions.fromString("rwx------"));
        }
    }

    @Test
    void aSignedRecordIsStoredWithItsSignatureAndCheckedAgainOnRestore(@TempDir Path dir) {
        DecisionSignature.SigningKey key = new DecisionSignature.SigningKey("k1", "k1-secret-0123456789abcdef0123456789");
        byte[] value = record(0.0);
        byte[] signature = DecisionSignature.sign(key, C1, value);
        LastDecisionFile file = LastDecisionFile.in(dir.toString(), "c1");
        file.keeping(holder(List.of(key))).accept(C1, value, signature, "");
        LastDecisionFile.Stored stored = file.read();
        assertArrayEquals(value, stored.value());
        assertArrayEquals(signature, stored.signature());
        assertEquals(DecisionHolder.Outcome.APPLIED, file.restore(holder(List.of(key)), "c1"));

        file.write(value, null);  // planted without a signature: refused where signatures are required
        assertEquals(DecisionHolder.Outcome.REFUSED, file.restore(holder(List.of(key)), "c1"));
        assertEquals(DecisionHolder.Outcome.APPLIED, file.restore(holder(List.of()), "c1"));
    }

    @Test
    void byDefaultTheStateLiesBesideTheBrokersOwnData() {
        Map<String, Object> props = new HashMap<>(Map.of("quota.pipeline.cluster.name", "c1",
                "quota.pipeline.output.kafka.bootstrap.servers", "127.0.0.1:9"));
        assertEquals("/tmp/kafka-logs", CallbackConfig.parse(props).stateDir(), "Kafka's own default log.dir");
        props.put("metadata.log.dir", "/var/lib/kafka/meta");
        assertEquals("/var/lib/kafka/meta", CallbackConfig.parse(props).stateDir());
        props.put("log.dirs", " /data/kafka-0 ,/data/kafka-1");
        assertEquals("/data/kafka-0", CallbackConfig.parse(props).stateDir());
        props.put("quota.pipeline.state.dir", "");
        assertEquals("", CallbackConfig.parse(props).stateDir(), "empty: memory only");
    }
}
