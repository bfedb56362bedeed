package io.quotapipeline.callback;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;
import org.apache.kafka.common.config.ConfigException;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The Strimzi Kafka resource an operator applies (deploy/strimzi/kafka.yaml) configures this callback with settings
 * it accepts: its spec.kafka.config, as Strimzi writes it into each broker's properties, passes CallbackConfig.
 */
class DeployFragmentTest {

    static final Path KAFKA_RESOURCE = Path.of("..", "deploy", "strimzi", "kafka.yaml");

    static Map<String, String> brokerConfig() throws IOException {
        ObjectMapper yaml = new ObjectMapper(new YAMLFactory());
        List<JsonNode> docs = yaml.readValues(yaml.getFactory().createParser(Files.readString(KAFKA_RESOURCE)),
                JsonNode.class).readAll();
        JsonNode kafka = docs.stream().filter(d -> "Kafka".equals(d.path("kind").asText())).findFirst()
                .orElseThrow(() -> new AssertionError(KAFKA_RESOURCE + " holds no Kafka resource"));
        Map<String, String> config = new HashMap<>();
        // Strimzi writes every value as text, whatever its YAML type (1.0 stays "1.0").
        kafka.path("spec").path("kafka").path("config").fields()
                .forEachRemaining(e -> config.put(e.getKey(), e.getValue().asText()));
        // and a custom authorization as authorizer.class.name and super.users
        JsonNode authorization = kafka.path("spec").path("kafka").path("authorization");
        if ("custom".equals(authorization.path("type").asText())) {
            config.put(StopAuthorizer.AUTHORIZER_CLASS_NAME, authorization.path("authorizerClass").asText());
            List<String> superUsers = new java.util.ArrayList<>();
            authorization.path("superUsers").forEach(u -> superUsers.add(u.asText()));
            config.put("super.users", String.join(";", superUsers));
        }
        return config;
    }

    @Test
    void theResourceLoadsThisCallbackWithSettingsItAccepts() throws IOException {
        Map<String, String> config = brokerConfig();
        assertEquals(PipelineQuotaCallback.class.getName(), config.get("client.quota.callback.class"));
        CallbackConfig parsed = CallbackConfig.parse(config);  // throws ConfigException naming each problem
        assertEquals("prod-east", parsed.clusterName());
        assertEquals(Duration.ofSeconds(60), parsed.maxMute());
        assertEquals(List.of(), parsed.stopWarnings());
        assertTrue(!config.containsKey("quota.pipeline.excluded.client.ids"),
                "no client is exempt by its client id: a client chooses its own");
    }

    @Test
    void theResourceRefusesWritesAtAStopWithStopAuthorizer() throws Exception {
        Map<String, String> config = brokerConfig();
        assertEquals(StopAuthorizer.class.getName(), config.get(StopAuthorizer.AUTHORIZER_CLASS_NAME));
        StopAuthorizer authorizer = new StopAuthorizer(new MutableClock(java.time.Instant.EPOCH),
                (topic, settings, sink) -> () -> { }, StopAuthorizer::newDelegate);
        try {
            authorizer.configure(config);  // the delegate, StandardAuthorizer, takes the broker's settings
            assertTrue(authorizer.delegate() instanceof org.apache.kafka.metadata.authorizer.StandardAuthorizer);
        } finally {
            authorizer.close();
        }
        PipelineQuotaCallback callback = new PipelineQuotaCallback(new MutableClock(java.time.Instant.EPOCH),
                (topic, settings, sink) -> () -> { });
        try {
            callback.configure(config);
            assertTrue(callback.policy().refusal(), "with StopAuthorizer a stop mutes no client");
        } finally {
            callback.close();
        }
    }

    @Test
    void aBrokenSettingInTheResourceWouldFailTheBroker() throws IOException {
        Map<String, String> config = brokerConfig();
        config.put("quota.pipeline.throttle.max.mute", "PT10S");  // below the shortest mute Kafka's windows allow
        assertThrows(ConfigException.class, () -> CallbackConfig.parse(config));
    }
}
