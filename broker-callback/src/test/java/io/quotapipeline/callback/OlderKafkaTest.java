package io.quotapipeline.callback;

import java.io.IOException;
import java.io.InputStream;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The classes a broker before Kafka 4.1 loads (the quota callback, BasicStopAuthorizer and what they use) name no type
 * that Kafka lacks there: a missing interface or class stops the broker at start (NoClassDefFoundError).
 */
class OlderKafkaTest {
    /** Types of Kafka 4.1 and later (plugin metrics), and AppInfoParser, which Kafka 4.4 moved. */
    private static final List<String> NEWER = List.of("org/apache/kafka/common/metrics/Monitorable",
            "org/apache/kafka/common/metrics/PluginMetrics", "org/apache/kafka/common/utils/AppInfoParser");
    /** The classes only Kafka 4.1 and later load. */
    private static final Set<String> FOR_41 = Set.of("StopAuthorizer.class", "MonitorablePipelineQuotaCallback.class");

    @Test
    void noClassOlderBrokersLoadNamesANewerType() throws IOException, URISyntaxException {
        Path dir = Path.of(BasicStopAuthorizer.class.getResource("BasicStopAuthorizer.class").toURI()).getParent();
        List<String> found = new ArrayList<>();
        try (Stream<Path> classes = Files.list(dir)) {
            for (Path path : (Iterable<Path>) classes::iterator) {
                String file = path.getFileName().toString();
                if (!file.endsWith(".class") || FOR_41.contains(file)) {
                    continue;
                }
                String text = new String(Files.readAllBytes(path), StandardCharsets.ISO_8859_1);
                NEWER.stream().filter(text::contains).forEach(type -> found.add(file + " names " + type));
            }
        }
        assertEquals(List.of(), found);
    }

    @Test
    void theCheckFindsPluginMetricsInTheClassForNewerBrokers() throws IOException {
        try (InputStream in = StopAuthorizer.class.getResourceAsStream("StopAuthorizer.class")) {
            String text = new String(in.readAllBytes(), StandardCharsets.ISO_8859_1);
            assertTrue(text.contains(NEWER.get(0)) && text.contains(NEWER.get(1)));
        }
    }
}
