import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A Java producer with default settings (but acks, when given) that sends as fast as it can, or at RATE bytes/s,
 * and prints, every 250 ms, one JSON line: wall-clock ms, bytes acknowledged so far, failed sends so far, and the
 * producer's produce-throttle-time-max. It behaves as an application that must not lose a record: a send that
 * failed (a refused write is a TopicAuthorizationException, which the producer does not retry) is kept and sent
 * again; while writes are refused it sends one of them every 500 ms, and once one is acknowledged all of them.
 * Usage: java -cp "$KAFKA_HOME/libs/*:." ThrottleProducer BOOTSTRAP TOPIC CLIENT_ID RECORD_BYTES SECONDS [RATE [ACKS]]
 */
public final class ThrottleProducer {
    private static final long PROBE_EVERY_MS = 500;

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, args[2]);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        if (args.length > 6 && !args[6].equals("default")) {
            props.put(ProducerConfig.ACKS_CONFIG, args[6]);
        }
        String topic = args[1];
        byte[] value = new byte[Integer.parseInt(args[3])];
        long startMs = System.currentTimeMillis();
        long endMs = startMs + 1000L * Long.parseLong(args[4]);
        double rate = args.length > 5 ? Double.parseDouble(args[5]) : 0.0;
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        AtomicLong pending = new AtomicLong();
        AtomicBoolean refusing = new AtomicBoolean();
        long sent = 0;
        long probedMs = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            Thread reporter = new Thread(() -> report(producer, acked, failed, endMs), "reporter");
            reporter.setDaemon(true);
            reporter.start();
            Callback delivered = (metadata, error) -> {
                if (error == null) {
                    acked.addAndGet(value.length);
                    refusing.set(false);
                } else {
                    failed.incrementAndGet();
                    pending.incrementAndGet();
                    if (error instanceof TopicAuthorizationException) {
                        refusing.set(true);
                    }
                }
            };
            while (System.currentTimeMillis() < endMs) {
                long now = System.currentTimeMillis();
                if (refusing.get()) {
                    if (pending.get() > 0 && now - probedMs >= PROBE_EVERY_MS) {
                        pending.decrementAndGet();
                        probedMs = now;
                        producer.send(new ProducerRecord<>(topic, value), delivered);
                    }
                    Thread.sleep(20);
                } else if (pending.get() > 0) {
                    pending.decrementAndGet();
                    producer.send(new ProducerRecord<>(topic, value), delivered);
                } else if (rate > 0 && sent * value.length >= rate * (now - startMs) / 1000.0) {
                    Thread.sleep(Math.max(1, Math.min(50, (long) (1000.0 * value.length / rate))));
                } else {
                    // send() blocks up to max.block.ms while the buffer is full, as an application would.
                    producer.send(new ProducerRecord<>(topic, value), delivered);
                    sent++;
                }
            }
            reporter.join();
            producer.close(java.time.Duration.ZERO);
        }
    }

    private static void report(KafkaProducer<byte[], byte[]> producer, AtomicLong acked, AtomicLong failed,
                               long endMs) {
        while (System.currentTimeMillis() < endMs) {
            double throttleMax = 0;
            for (Map.Entry<MetricName, ? extends Metric> e : producer.metrics().entrySet()) {
                MetricName name = e.getKey();
                if (name.name().equals("produce-throttle-time-max") && name.group().equals("producer-metrics")) {
                    Object v = e.getValue().metricValue();
                    if (v instanceof Double d && !d.isNaN() && !d.isInfinite()) {
                        throttleMax = d;
                    }
                }
            }
            System.out.printf("{\"t_ms\": %d, \"acked\": %d, \"failed\": %d, \"throttle_max_ms\": %.0f}%n",
                    System.currentTimeMillis(), acked.get(), failed.get(), throttleMax);
            System.out.flush();
            try {
                Thread.sleep(250);
            } catch (InterruptedException ie) {
                return;
            }
        }
    }
}
