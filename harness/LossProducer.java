import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java side of harness/loss_producers.py (its docstring says what is counted): a producer with default settings
 * sending RATE records/s of RECORD_BYTES until a line or the end of stdin, then waiting up to DRAIN_MS for every
 * record's end. "drop" loses a failed record; "resend" is docs/examples/ResendingProducer.java, compiled beside this.
 * A send that blocked longer than max.block.ms (a full buffer) ends in a TimeoutException: a timed-out record.
 * Usage: java -cp "$KAFKA_HOME/libs/*:." LossProducer BOOTSTRAP TOPIC CLIENT_ID drop|resend RATE RECORD_BYTES
 */
public final class LossProducer {
    private static final long DRAIN_MS = 330_000;
    private static final long REPORT_EVERY_MS = 250;

    private final AtomicLong sent = new AtomicLong();
    private final AtomicLong acked = new AtomicLong();
    private final AtomicLong refused = new AtomicLong();  // drop only: the example counts its own
    private final AtomicLong timedOut = new AtomicLong();
    private final AtomicLong failed = new AtomicLong();
    private final AtomicLong open = new AtomicLong();
    private ResendingProducer resending;

    private void ended(Throwable error) {
        Throwable e = error instanceof CompletionException && error.getCause() != null ? error.getCause() : error;
        if (e == null) {
            acked.incrementAndGet();
        } else if (e instanceof TimeoutException) {
            timedOut.incrementAndGet();
        } else if (e instanceof TopicAuthorizationException && resending == null) {
            refused.incrementAndGet();
        } else {
            failed.incrementAndGet();  // any other error, or a record the example gave up
        }
        open.decrementAndGet();
    }

    private String line(boolean last) {
        long refusedNow = resending == null ? refused.get() : resending.refused.get();
        long resent = resending == null ? 0 : resending.resentAcked.get();
        return String.format("{\"t_ms\": %d, \"sent\": %d, \"acked\": %d, \"refused\": %d, \"timed_out\": %d, "
                + "\"failed\": %d, \"resent_acked\": %d, \"open\": %d%s}", System.currentTimeMillis(), sent.get(),
                acked.get(), refusedNow, timedOut.get(), failed.get(), resent, open.get(),
                last ? ", \"final\": true" : "");
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, args[2]);
        String topic = args[1];
        double rate = Double.parseDouble(args[4]);
        String value = "x".repeat(Integer.parseInt(args[5]));
        LossProducer p = new LossProducer();
        KafkaProducer<String, String> dropping = null;
        if (args[3].equals("resend")) {
            p.resending = new ResendingProducer(props);
        } else {
            dropping = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
        }
        AtomicBoolean stopped = new AtomicBoolean();
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                in.readLine();
            } catch (Exception e) {
                // the end of stdin, as a line
            }
            stopped.set(true);
        }, "stdin");
        stdin.setDaemon(true);
        stdin.start();
        ScheduledExecutorService reporter = Executors.newSingleThreadScheduledExecutor();
        reporter.scheduleAtFixedRate(() -> System.out.println(p.line(false)), REPORT_EVERY_MS, REPORT_EVERY_MS,
                TimeUnit.MILLISECONDS);
        long startMs = System.currentTimeMillis();
        while (!stopped.get()) {
            long dueMs = startMs + (long) (1000.0 * p.sent.get() / rate);
            long now = System.currentTimeMillis();
            if (dueMs > now) {
                Thread.sleep(Math.min(10, dueMs - now));
                continue;
            }
            p.sent.incrementAndGet();  // behind after a blocked send: it catches up, as queued events would
            p.open.incrementAndGet();
            ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
            if (dropping == null) {
                CompletableFuture<RecordMetadata> done = p.resending.send(record);
                done.whenComplete((metadata, error) -> p.ended(error));
            } else {
                dropping.send(record, (metadata, error) -> p.ended(error));
            }
        }
        long endMs = System.currentTimeMillis() + DRAIN_MS;
        while (p.open.get() > 0 && System.currentTimeMillis() < endMs) {
            Thread.sleep(50);
        }
        reporter.shutdownNow();
        reporter.awaitTermination(5, TimeUnit.SECONDS);
        System.out.println(p.line(true));
        System.out.flush();
        System.exit(0);  // the producers' own threads (the example's timer) need no orderly close here
    }
}
