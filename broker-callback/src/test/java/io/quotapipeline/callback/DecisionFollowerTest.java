package io.quotapipeline.callback;

import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;

import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The follower thread: it waits out a missing topic or cluster, never blocks the broker, and stops on close. */
class DecisionFollowerTest {
    private static final String TOPIC = "__quota_throttle_factors";
    private static final Duration PATIENCE = Duration.ofSeconds(20);

    /** MockConsumer answers poll at once; pausing a little keeps the follower from spinning a core. */
    private static final class SlowPollConsumer extends MockConsumer<byte[], byte[]> {
        SlowPollConsumer() {
            super("earliest");
        }

        @Override
        public ConsumerRecords<byte[], byte[]> poll(Duration timeout) {
            ConsumerRecords<byte[], byte[]> records = super.poll(timeout);
            if (records.isEmpty()) {
                try {
                    Thread.sleep(10);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            return records;
        }
    }

    private record Received(String key, String value, String where) {
    }

    private static void await(BooleanSupplier condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + PATIENCE.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out waiting until " + what);
            }
            Thread.sleep(20);
        }
    }

    private static List<PartitionInfo> partitions(int count) {
        return java.util.stream.IntStream.range(0, count)
                .mapToObj(p -> new PartitionInfo(TOPIC, p, null, null, null)).toList();
    }

    private static ConsumerRecord<byte[], byte[]> record(int partition, long offset, String key, String value) {
        return new ConsumerRecord<>(TOPIC, partition, offset, key.getBytes(StandardCharsets.UTF_8),
                value == null ? null : value.getBytes(StandardCharsets.UTF_8));
    }

    @Test
    void waitsForAMissingTopicThenReadsEveryPartitionFromTheBeginning() throws Exception {
        SlowPollConsumer consumer = new SlowPollConsumer();
        List<Received> received = new CopyOnWriteArrayList<>();
        DecisionFollower follower = new DecisionFollower(TOPIC, Map.of(),
                (k, v, signature, where) -> received.add(new Received(new String(k, StandardCharsets.UTF_8),
                        v == null ? null : new String(v, StandardCharsets.UTF_8), where)),
                settings -> consumer).startThread();
        try {
            Thread.sleep(300);
            assertFalse(follower.assigned(), "no topic yet: nothing to assign");
            consumer.updateBeginningOffsets(Map.of(new TopicPartition(TOPIC, 0), 0L, new TopicPartition(TOPIC, 1), 0L));
            consumer.updatePartitions(TOPIC, partitions(2));
            await(follower::assigned, "the topic is assigned once it exists");
            assertEquals(List.of(new TopicPartition(TOPIC, 0), new TopicPartition(TOPIC, 1)),
                    List.copyOf(consumer.assignment().stream().sorted((a, b) -> a.partition() - b.partition()).toList()));
            consumer.addRecord(record(1, 0, "c2", "{}"));
            consumer.addRecord(record(0, 0, "c1", "x"));
            consumer.addRecord(record(0, 1, "c1", null));
            await(() -> received.size() == 3, "three records are handed over");
            assertTrue(received.contains(new Received("c1", null, " at " + TOPIC + "/0@1")), received.toString());
            assertTrue(received.contains(new Received("c2", "{}", " at " + TOPIC + "/1@0")), received.toString());
        } finally {
            follower.close();
        }
        assertFalse(follower.isAlive());
        assertTrue(consumer.closed());
    }

    @Test
    void aFailingConsumerIsReplacedAndTheTopicReadAgain() throws Exception {
        AtomicInteger created = new AtomicInteger();
        List<String> keys = new CopyOnWriteArrayList<>();
        List<SlowPollConsumer> consumers = new CopyOnWriteArrayList<>();
        DecisionFollower follower = new DecisionFollower(TOPIC, Map.of(),
                (k, v, signature, where) -> keys.add(new String(k, StandardCharsets.UTF_8)),
                settings -> {
                    if (created.incrementAndGet() == 1) {
                        throw new KafkaException("Failed to construct kafka consumer");
                    }
                    SlowPollConsumer c = new SlowPollConsumer();
                    c.updateBeginningOffsets(Map.of(new TopicPartition(TOPIC, 0), 0L));
                    c.updatePartitions(TOPIC, partitions(1));
                    consumers.add(c);
                    return c;
                }).startThread();
        try {
            await(follower::assigned, "a second consumer is created after the first one failed");
            SlowPollConsumer first = consumers.get(0);
            first.addRecord(record(0, 0, "c1", "{}"));
            await(() -> keys.size() == 1, "the record is handed over");
            first.setPollException(new KafkaException("the broker went away"));
            await(() -> consumers.size() == 2 && follower.assigned(), "a failed poll starts a new consumer");
            assertTrue(first.closed());
        } finally {
            follower.close();
        }
        assertEquals(3, created.get());
    }

    @Test
    void anUnreachableClusterNeitherBlocksQuotaLimitNorStopsTheFollowerAndCloseIsPrompt() throws Exception {
        int closedPort;
        try (ServerSocket socket = new ServerSocket(0)) {
            closedPort = socket.getLocalPort();
        }
        PipelineQuotaCallback callback = new PipelineQuotaCallback();
        callback.configure(Map.of(
                "quota.pipeline.cluster.name", "c1", "quota.pipeline.state.dir", "",
                "quota.pipeline.output.kafka.bootstrap.servers", "127.0.0.1:" + closedPort,
                "client.quota.callback.static.produce", "1000",
                "quota.pipeline.produce.quota.floor", "1.0",
                "client.quota.callback.static.throttle.factor.validity.duration", "PT1S",
                "client.quota.callback.static.throttle.factor.fallback", "0.5"));
        Duration took;
        try {
            Map<String, String> tags = callback.quotaMetricTags(ClientQuotaType.PRODUCE,
                    new KafkaPrincipal(KafkaPrincipal.USER_TYPE, "alice"), "app");
            long slowest = 0;
            long until = System.nanoTime() + Duration.ofSeconds(3).toNanos();
            double limit = 0;
            while (System.nanoTime() < until) {
                long t = System.nanoTime();
                limit = callback.quotaLimit(ClientQuotaType.PRODUCE, tags);
                slowest = Math.max(slowest, System.nanoTime() - t);
            }
            // A call that waited on the consumer would take its connect/poll timeouts (seconds); a loaded CI
            // machine can pause any thread for a few hundred ms, so the bound is 1 s, not a latency target.
            assertTrue(slowest < Duration.ofSeconds(1).toNanos(), "slowest quotaLimit took " + slowest / 1e6 + " ms");
            assertEquals(500.0, limit, "past the validity with no decision: the fallback applies");
            assertTrue(followerThreadAlive(), "the follower keeps retrying");
        } finally {
            long t = System.nanoTime();
            callback.close();  // also on failure: its MBeans would otherwise be read by the next test
            took = Duration.ofNanos(System.nanoTime() - t);
        }
        assertTrue(took.compareTo(DecisionFollower.CLOSE_TIMEOUT) < 0, "close took " + took);
        await(() -> !followerThreadAlive(), "the follower thread ends");
    }

    private static boolean followerThreadAlive() {
        return Thread.getAllStackTraces().keySet().stream()
                .anyMatch(th -> th.getName().equals("quota-pipeline-callback-follower") && th.isAlive());
    }
}
