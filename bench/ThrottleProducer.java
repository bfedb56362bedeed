import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A Java producer with default settings that sends as fast as it can and prints, every 250 ms, one JSON line:
 * wall-clock ms, bytes acknowledged so far, failed sends so far, and the producer's produce-throttle-time-max.
 * Usage: java -cp "$KAFKA_HOME/libs/*:." ThrottleProducer BOOTSTRAP TOPIC CLIENT_ID RECORD_BYTES SECONDS
 */
public final class ThrottleProducer {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, args[2]);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        String topic = args[1];
        byte[] value = new byte[Integer.parseInt(args[3])];
        long endMs = System.currentTimeMillis() + 1000L * Long.parseLong(args[4]);
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            Thread reporter = new Thread(() -> report(producer, acked, failed, endMs), "reporter");
            reporter.setDaemon(true);
            reporter.start();
            while (System.currentTimeMillis() < endMs) {
                // send() blocks up to max.block.ms while the buffer is full, as an application would.
                producer.send(new ProducerRecord<>(topic, value), (metadata, error) -> {
                    if (error == null) {
                        acked.addAndGet(value.length);
                    } else {
                        failed.incrementAndGet();
                    }
                });
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
