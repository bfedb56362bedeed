import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A producer that resends the records refused by the disk-pressure stop (Java, kafka-clients).
 *
 * <p>During a stop the brokers refuse writes to the topics on a full disk: a send fails with a
 * TopicAuthorizationException, which the producer does not retry. An application that must not lose records keeps
 * them: while writes are refused this one holds every record (the refused ones and the new ones) and sends the
 * oldest again every RESEND_EVERY_MS; once that one is acknowledged it sends all the others. When the oldest has
 * been held for RESEND_FOR_MS, every held record is given up (a refusal by your own ACLs looks the same: the bound
 * ends that too). A resent record may arrive after later ones: give records a key and a timestamp if order matters.
 *
 * <p>Usage: java -cp "$KAFKA_HOME/libs/*" ResendingProducer.java BOOTSTRAP TOPIC [COUNT]
 */
public final class ResendingProducer implements AutoCloseable {
    static final long RESEND_EVERY_MS = 1_000;
    static final long RESEND_FOR_MS = 600_000;

    /** A record the application sent, until it is acknowledged or given up; heldSinceMs 0: never held. */
    private record Pending(ProducerRecord<String, String> record, CompletableFuture<RecordMetadata> done,
                           long heldSinceMs) { }

    private final KafkaProducer<String, String> producer;
    // Resends go from this thread, not from a send's callback: that runs on the producer's network thread, which a
    // send may have to wait for.
    private final ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor();
    private final Deque<Pending> held = new ArrayDeque<>();  // guarded by this
    private Pending probe;  // the oldest held record, out again; guarded by this
    final AtomicInteger refused = new AtomicInteger();  // records refused at least once
    final AtomicInteger resentAcked = new AtomicInteger();  // acknowledged after a hold

    ResendingProducer(Properties config) {
        producer = new KafkaProducer<>(config, new StringSerializer(), new StringSerializer());
        timer.scheduleWithFixedDelay(this::sendProbe, RESEND_EVERY_MS, RESEND_EVERY_MS, TimeUnit.MILLISECONDS);
    }

    /** Completes once the record is acknowledged; exceptionally once it failed or was given up. */
    CompletableFuture<RecordMetadata> send(ProducerRecord<String, String> record) {
        CompletableFuture<RecordMetadata> done = new CompletableFuture<>();
        synchronized (this) {
            if (probe != null || !held.isEmpty()) {  // writes are refused: it waits behind the others
                held.addLast(new Pending(record, done, System.currentTimeMillis()));
                return done;
            }
        }
        send(new Pending(record, done, 0));
        return done;
    }

    private void send(Pending p) {
        producer.send(p.record(), (metadata, error) -> ended(p, metadata, error));
    }

    private void ended(Pending p, RecordMetadata metadata, Exception error) {
        List<Pending> release = new ArrayList<>();
        synchronized (this) {
            boolean wasProbe = p == probe;
            if (wasProbe) {
                probe = null;
            }
            long now = System.currentTimeMillis();
            if (error == null) {
                if (p.heldSinceMs() > 0) {
                    resentAcked.incrementAndGet();
                }
                p.done().complete(metadata);
                if (wasProbe) {  // writes are accepted again: everything held goes
                    release.addAll(held);
                    held.clear();
                }
            } else if (!(error instanceof TopicAuthorizationException)) {
                p.done().completeExceptionally(error);
            } else if (wasProbe && now - p.heldSinceMs() >= RESEND_FOR_MS) {  // refused for too long: give up all
                p.done().completeExceptionally(error);
                held.forEach(h -> h.done().completeExceptionally(error));
                held.clear();
            } else {
                if (p.heldSinceMs() == 0) {
                    refused.incrementAndGet();
                }
                if (held.isEmpty() && probe == null && !wasProbe) {
                    System.err.printf("writes to %s refused (a disk-pressure stop?): holding the records, sending the "
                            + "oldest again every %d s for up to %d s%n", p.record().topic(), RESEND_EVERY_MS / 1000,
                            RESEND_FOR_MS / 1000);
                }
                Pending again = p.heldSinceMs() > 0 ? p : new Pending(p.record(), p.done(), now);
                if (wasProbe) {  // still the oldest
                    held.addFirst(again);
                } else {
                    held.addLast(again);
                }
            }
        }
        if (!release.isEmpty()) {
            timer.execute(() -> release.forEach(this::send));
        }
    }

    private void sendProbe() {
        Pending p;
        synchronized (this) {
            if (probe != null || held.isEmpty()) {
                return;
            }
            probe = held.pollFirst();
            p = probe;
        }
        send(p);
    }

    @Override
    public void close() {
        timer.shutdownNow();
        producer.close();
    }

    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        int count = args.length > 2 ? Integer.parseInt(args[2]) : 20;
        int acked = 0;
        int failed = 0;
        int refused;
        int resent;
        try (ResendingProducer producer = new ResendingProducer(config)) {
            List<CompletableFuture<RecordMetadata>> sends = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                sends.add(producer.send(new ProducerRecord<>(args[1], "record " + i)));
                Thread.sleep(100);
            }
            for (CompletableFuture<RecordMetadata> send : sends) {
                try {
                    send.get();
                    acked++;
                } catch (ExecutionException e) {
                    failed++;
                }
            }
            refused = producer.refused.get();
            resent = producer.resentAcked.get();
        }
        System.out.printf("acknowledged %d of %d records (%d refused, %d held and sent again), %d failed%n", acked,
                count, refused, resent, failed);
        System.exit(acked == count ? 0 : 1);
    }
}
