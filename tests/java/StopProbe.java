import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * What a default Java producer (idempotent: it asks InitProducerId first) sees when it sends one record:
 * {@code java -cp "$KAFKA_HOME/libs/*" tests/java/StopProbe.java BOOTSTRAP TOPIC CLIENT_ID} prints
 * {@code future ok <offset>} or {@code future error <exception class>: <message>}, then the same for the send
 * callback ({@code callback ...}). tests/realkafka/test_stop_authorizer.py reads it.
 */
public class StopProbe {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, args[2]);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "10000");
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
        AtomicReference<String> callback = new AtomicReference<>("callback none");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            var future = producer.send(new ProducerRecord<>(args[1], "k".getBytes(), "probe".getBytes()),
                    (metadata, e) -> callback.set(e == null ? "callback ok " + metadata.offset()
                            : "callback error " + e.getClass().getName() + ": " + e.getMessage()));
            try {
                RecordMetadata metadata = future.get();
                System.out.println("future ok " + metadata.offset());
            } catch (ExecutionException e) {
                System.out.println("future error " + e.getCause().getClass().getName() + ": " + e.getCause().getMessage());
            }
            producer.flush();
        }
        System.out.println(callback.get());
    }
}
