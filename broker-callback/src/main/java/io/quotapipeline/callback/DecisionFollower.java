package io.quotapipeline.callback;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.header.Header;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Follows the decision topic on its own daemon thread: every partition from offset 0 with assign (no consumer
 * group, no commits), each record handed to a {@link RecordSink}. A missing topic or an unreachable cluster
 * is waited out with a growing pause; nothing here can fail the broker, and {@link #close()} returns within
 * {@link #CLOSE_TIMEOUT} whatever the consumer is doing.
 */
final class DecisionFollower implements Follower, Runnable {
    private static final Logger log = LoggerFactory.getLogger(DecisionFollower.class);
    static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(5);
    private static final Duration METADATA_TIMEOUT = Duration.ofSeconds(5);
    private static final Duration POLL_TIMEOUT = Duration.ofMillis(500);
    private static final Duration PARTITION_RECHECK = Duration.ofMinutes(1);
    private static final long FIRST_RETRY_MS = 1_000;
    /** Short: a decision topic created after the broker started must be picked up within seconds. */
    private static final long MAX_RETRY_MS = 5_000;

    private final String topic;
    private final RecordSink sink;
    private final Function<Map<String, Object>, Consumer<byte[], byte[]>> consumers;
    private final Map<String, Object> settings;
    private final CountDownLatch stopped = new CountDownLatch(1);
    private final Thread thread;
    private volatile boolean closing;
    private volatile Consumer<byte[], byte[]> consumer;
    private volatile boolean assigned;
    private long retryMs = FIRST_RETRY_MS;

    DecisionFollower(String topic, Map<String, Object> settings, RecordSink sink,
                     Function<Map<String, Object>, Consumer<byte[], byte[]>> consumers) {
        this.topic = topic;
        this.settings = settings;
        this.sink = sink;
        this.consumers = consumers;
        this.thread = new Thread(this, "quota-pipeline-callback-follower");
        this.thread.setDaemon(true);
    }

    /** Starts following with a real KafkaConsumer. */
    static DecisionFollower start(String topic, Map<String, Object> settings, RecordSink sink) {
        return new DecisionFollower(topic, settings, sink, KafkaConsumer::new).startThread();
    }

    DecisionFollower startThread() {
        thread.start();
        return this;
    }

    /** True while the topic's partitions are assigned (the topic exists and was found). */
    boolean assigned() {
        return assigned;
    }

    boolean isAlive() {
        return thread.isAlive();
    }

    @Override
    public void run() {
        while (!closing) {
            Consumer<byte[], byte[]> c = null;
            try {
                c = consumers.apply(settings);
                consumer = c;
                if (!closing) {
                    follow(c);
                }
            } catch (WakeupException | InterruptException e) {
                if (!closing) {
                    log.warn("the decision follower was interrupted; starting again");
                }
            } catch (RuntimeException e) {
                log.warn("following {} failed ({}); retrying in {} ms", topic, e.toString(), retryMs);
            } finally {
                consumer = null;
                assigned = false;
                closeQuietly(c);
            }
            pause();
        }
        log.info("stopped following {}", topic);
    }

    @SuppressWarnings("deprecation")  // close(Duration) is what every Kafka client from 2.0 to 4.1 has
    private static void closeQuietly(Consumer<byte[], byte[]> c) {
        if (c == null) {
            return;
        }
        try {
            c.close(Duration.ofSeconds(1));  // no group to leave, no offsets to commit: nothing to wait for
        } catch (RuntimeException e) {
            log.debug("closing the decision consumer failed", e);
        }
    }

    private void follow(Consumer<byte[], byte[]> c) {
        List<TopicPartition> partitions = waitForPartitions(c);
        if (partitions.isEmpty()) {
            return;  // closing
        }
        c.assign(partitions);
        c.seekToBeginning(partitions);
        assigned = true;
        retryMs = FIRST_RETRY_MS;
        log.info("following {} ({} partitions) from the beginning", topic, partitions.size());
        long nextCheck = System.nanoTime() + PARTITION_RECHECK.toNanos();
        while (!closing) {
            for (ConsumerRecord<byte[], byte[]> r : c.poll(POLL_TIMEOUT)) {
                Header signature = r.headers().lastHeader(DecisionSignature.HEADER);
                sink.accept(r.key(), r.value(), signature == null ? null : signature.value(),
                        " at " + r.topic() + "/" + r.partition() + "@" + r.offset());
            }
            if (System.nanoTime() - nextCheck > 0) {
                nextCheck = System.nanoTime() + PARTITION_RECHECK.toNanos();
                partitions = addNewPartitions(c, partitions);
            }
        }
    }

    /** Waits until the topic has partitions; empty only when closing. */
    private List<TopicPartition> waitForPartitions(Consumer<byte[], byte[]> c) {
        boolean warned = false;
        while (!closing) {
            String why;
            try {
                List<TopicPartition> found = partitionsOf(c.partitionsFor(topic, METADATA_TIMEOUT));
                if (!found.isEmpty()) {
                    return found;
                }
                why = "the topic does not exist yet";
            } catch (WakeupException | InterruptException e) {
                throw e;
            } catch (RuntimeException e) {
                why = e.toString();
            }
            if (!warned) {
                log.warn("cannot follow {} yet ({}); the validity and then the fallback apply meanwhile; retrying",
                        topic, why);
                warned = true;
            } else {
                log.debug("cannot follow {} yet ({})", topic, why);
            }
            pause();
        }
        return List.of();
    }

    private List<TopicPartition> addNewPartitions(Consumer<byte[], byte[]> c, List<TopicPartition> current) {
        List<TopicPartition> all;
        try {
            all = partitionsOf(c.partitionsFor(topic, METADATA_TIMEOUT));
        } catch (WakeupException | InterruptException e) {
            throw e;
        } catch (RuntimeException e) {
            return current;  // metadata is refreshed again in a minute
        }
        List<TopicPartition> added = new ArrayList<>(all);
        added.removeAll(current);
        if (added.isEmpty()) {
            return current;
        }
        List<TopicPartition> union = new ArrayList<>(current);
        union.addAll(added);
        c.assign(union);
        c.seekToBeginning(added);
        log.info("following {} new partitions of {}", added.size(), topic);
        return union;
    }

    private static List<TopicPartition> partitionsOf(List<PartitionInfo> infos) {
        List<TopicPartition> partitions = new ArrayList<>();
        if (infos != null) {
            for (PartitionInfo info : infos) {
                partitions.add(new TopicPartition(info.topic(), info.partition()));
            }
        }
        partitions.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
        return partitions;
    }

    private void pause() {
        try {
            stopped.await(retryMs, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            closing = true;
        }
        retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
    }

    /** Stops the thread: wakes the consumer out of any wait and joins within {@link #CLOSE_TIMEOUT}. */
    @Override
    public void close() {
        closing = true;
        stopped.countDown();
        Consumer<byte[], byte[]> c = consumer;
        if (c != null) {
            c.wakeup();
        }
        try {
            thread.join(CLOSE_TIMEOUT.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (thread.isAlive()) {
            log.warn("the decision follower did not stop within {}; it is a daemon thread and ends with the broker",
                    CLOSE_TIMEOUT);
            thread.interrupt();
        }
    }
}
