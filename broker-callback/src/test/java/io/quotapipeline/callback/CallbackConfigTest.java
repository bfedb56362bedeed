package io.quotapipeline.callback;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The callback's own rules; the rules it shares with the Python config are in the shared vectors. */
class CallbackConfigTest {
    private static Map<String, Object> minimal() {
        Map<String, Object> props = new HashMap<>();
        props.put("quota.pipeline.cluster.name", "prod-east");
        props.put("quota.pipeline.output.kafka.bootstrap.servers", "kafka-0:9092, kafka-1:9092");
        return props;
    }

    @Test
    void theDefaultsAreStrimzisAndThePipelines() {
        CallbackConfig config = CallbackConfig.parse(minimal());
        assertEquals(Map.of(), config.staticQuotas());
        assertEquals(1.0, config.fallback());
        assertEquals(Duration.ofMinutes(5), config.validity());
        assertEquals(Set.of(), config.excludedPrincipalNames());
        assertFalse(config.stopScopeClusterWide());
        assertEquals(null, config.produceFloor());
        assertEquals(Duration.ofSeconds(60), config.maxMute());
        assertEquals(List.of(), config.stopWarnings());
        // 1 MiB / (32 s + 10 s) when a stop starts, 1 MiB / (60 s + 10 s) at the longest mute
        assertEquals(1_048_576.0 / 42, config.stopLimit().enterLimit());
        assertEquals(1_048_576.0 / 70, config.stopLimit().limit(3600));
        assertEquals("__quota_throttle_factors", config.topic());
        assertEquals("prod-east", config.clusterName());
    }

    @Test
    void theDecisionTopicIsOnThisClusterOnlyWithoutAnOutputClusterOrWhenSaidSo() {
        assertFalse(CallbackConfig.parse(minimal()).decisionTopicHere(), "an output cluster is named");
        Map<String, Object> observed = minimal();
        observed.remove("quota.pipeline.output.kafka.bootstrap.servers");
        observed.put("client.quota.callback.static.kafka.admin.bootstrap.servers", "kafka-0:9092");
        assertTrue(CallbackConfig.parse(observed).decisionTopicHere(), "read through the admin bootstrap");
        Map<String, Object> listener = minimal();
        listener.put("quota.pipeline.output.topic.on.this.cluster", "TRUE");
        assertTrue(CallbackConfig.parse(listener).decisionTopicHere());
        observed.put("quota.pipeline.output.topic.on.this.cluster", "false");
        assertFalse(CallbackConfig.parse(observed).decisionTopicHere());
        listener.put("quota.pipeline.output.topic.on.this.cluster", "yes");
        ConfigException e = assertThrows(ConfigException.class, () -> CallbackConfig.parse(listener));
        assertEquals("Invalid value yes for configuration quota.pipeline.output.topic.on.this.cluster: must be true "
                + "or false", e.getMessage());
    }

    @Test
    void readsEveryProperty() {
        Map<String, Object> props = minimal();
        props.put("client.quota.callback.static.produce", "1000");
        props.put("client.quota.callback.static.fetch", "2000.5");
        props.put("client.quota.callback.static.excluded.principal.name.list", "User:pipeline;User:ops");
        props.put("client.quota.callback.static.throttle.factor.fallback", "0.25");
        props.put("client.quota.callback.static.throttle.factor.validity.duration", "PT30S");
        props.put("quota.pipeline.output.topic", "decisions");
        props.put("quota.pipeline.excluded.client.ids", "a,b");
        props.put("quota.pipeline.produce.quota.floor", "4096");
        props.put("quota.pipeline.stop.scope", "cluster");
        CallbackConfig config = CallbackConfig.parse(props);
        assertEquals(Map.of(ClientQuotaType.PRODUCE, 1000.0, ClientQuotaType.FETCH, 2000.5), config.staticQuotas());
        assertEquals(Set.of("pipeline", "ops"), config.excludedPrincipalNames());
        assertEquals(0.25, config.fallback());
        assertEquals(Duration.ofSeconds(30), config.validity());
        assertEquals("decisions", config.topic());
        assertTrue(config.stopScopeClusterWide());
        assertEquals(4096.0, config.produceFloor());
        assertEquals(4096.0, config.stopLimit().limit(3600));
        assertTrue(config.stopWarnings().get(0).startsWith("quota.pipeline.excluded.client.ids is deprecated and "
                + "ignored"), config.stopWarnings().toString());
        assertTrue(config.stopWarnings().get(1).startsWith("quota.pipeline.produce.quota.floor is deprecated"),
                config.stopWarnings().toString());
    }

    @Test
    void theMaxMuteFollowsTheBrokersQuotaWindow() {
        Map<String, Object> props = minimal();
        props.put("quota.pipeline.throttle.max.mute", "PT40S");
        props.put("quota.window.num", "21");
        ConfigException e = assertThrows(ConfigException.class, () -> CallbackConfig.parse(props));
        assertTrue(e.getMessage().contains("must be at least (quota.window.num - 1) x quota.window.size.seconds"
                + " + 2 quota windows (PT62S)"), e.getMessage());
        props.put("quota.window.num", "11");
        CallbackConfig config = CallbackConfig.parse(props);
        assertEquals(1_048_576.0 / 50, config.stopLimit().limit(3600));  // a 1 MiB request muted at most 40 s
    }

    @Test
    void aStaticQuotaBelowTheStopLimitIsWarnedAbout() {
        Map<String, Object> props = minimal();
        props.put("client.quota.callback.static.produce", "20000");
        List<String> warnings = CallbackConfig.parse(props).stopWarnings();
        assertEquals(1, warnings.size());
        assertTrue(warnings.get(0).contains("is not above the per-client limit at a stop"), warnings.toString());
    }

    @Test
    void theClusterNameIsRequired() {
        Map<String, Object> props = minimal();
        props.remove("quota.pipeline.cluster.name");
        ConfigException e = assertThrows(ConfigException.class, () -> CallbackConfig.parse(props));
        assertTrue(e.getMessage().startsWith("Missing required configuration \"quota.pipeline.cluster.name\""),
                e.getMessage());
    }

    @Test
    void theOutputBootstrapIsRequiredAndNamedWithItsFallback() {
        Map<String, Object> props = minimal();
        props.remove("quota.pipeline.output.kafka.bootstrap.servers");
        ConfigException e = assertThrows(ConfigException.class, () -> CallbackConfig.parse(props));
        assertTrue(e.getMessage().contains("\"quota.pipeline.output.kafka.bootstrap.servers\""), e.getMessage());
        assertTrue(e.getMessage().contains("client.quota.callback.static.kafka.admin.bootstrap.servers"),
                e.getMessage());
    }

    @Test
    void theAdminSettingsServeWhenNoOutputSettingIsSetLikeThePythonSide() {
        Map<String, Object> props = minimal();
        props.remove("quota.pipeline.output.kafka.bootstrap.servers");
        props.put("client.quota.callback.static.kafka.admin.bootstrap.servers", "observed:9092");
        props.put("client.quota.callback.static.kafka.admin.security.protocol", "SSL");
        Map<String, Object> consumer = CallbackConfig.parse(props).consumerSettings(1);
        assertEquals("observed:9092", consumer.get("bootstrap.servers"));
        assertEquals("SSL", consumer.get("security.protocol"));
    }

    @Test
    void outputSettingsWithoutABootstrapTuneTheAdminSettingsLikeThePythonSide() {
        Map<String, Object> props = minimal();
        props.remove("quota.pipeline.output.kafka.bootstrap.servers");
        props.put("client.quota.callback.static.kafka.admin.bootstrap.servers", "observed:9092");
        props.put("client.quota.callback.static.kafka.admin.security.protocol", "SSL");
        props.put("quota.pipeline.output.kafka.request.timeout.ms", "8000");
        Map<String, Object> consumer = CallbackConfig.parse(props).consumerSettings(1);
        assertEquals("observed:9092", consumer.get("bootstrap.servers"));
        assertEquals("SSL", consumer.get("security.protocol"));
        assertEquals("8000", consumer.get("request.timeout.ms"));
    }

    @Test
    void anOutputBootstrapSelectsTheOutputSettingsAlone() {
        Map<String, Object> props = minimal();
        props.put("client.quota.callback.static.kafka.admin.bootstrap.servers", "observed:9092");
        props.put("client.quota.callback.static.kafka.admin.security.protocol", "SSL");
        Map<String, Object> consumer = CallbackConfig.parse(props).consumerSettings(1);
        assertEquals("kafka-0:9092,kafka-1:9092", consumer.get("bootstrap.servers"));
        assertFalse(consumer.containsKey("security.protocol"));
    }

    @Test
    void afterAnOutputOutageTheConsumerReconnectsWithin2SecondsUnlessTheOperatorSaysOtherwise() {
        Map<String, Object> props = minimal();
        assertEquals("2000", CallbackConfig.parse(props).consumerSettings(1).get("reconnect.backoff.max.ms"));
        props.put("quota.pipeline.output.kafka.reconnect.backoff.max.ms", "5000");
        assertEquals("5000", CallbackConfig.parse(props).consumerSettings(1).get("reconnect.backoff.max.ms"));
    }

    @Test
    void theConsumerReadsWithoutAGroupFromTheBeginningAndNeverCreatesTheTopic() {
        Map<String, Object> props = minimal();
        props.put("quota.pipeline.output.kafka.group.id", "someone");
        props.put("quota.pipeline.output.kafka.allow.auto.create.topics", "true");
        props.put("quota.pipeline.output.kafka.client.id", "callback-7");
        Map<String, Object> consumer = CallbackConfig.parse(props).consumerSettings(1);
        assertFalse(consumer.containsKey("group.id"));
        assertEquals("false", consumer.get("allow.auto.create.topics"));
        assertEquals("false", consumer.get("enable.auto.commit"));
        assertEquals("earliest", consumer.get("auto.offset.reset"));
        assertEquals("callback-7", consumer.get("client.id"));
    }

    @Test
    void eachCallbackOfTheJvmHasItsOwnConsumerClientId() {
        CallbackConfig config = CallbackConfig.parse(minimal());
        assertEquals("quota-pipeline-callback", config.consumerSettings(1).get("client.id"));
        assertEquals("quota-pipeline-callback-2", config.consumerSettings(2).get("client.id"));
    }

    @Test
    void anInvalidConsumerSettingFailsWithKafkasMessage() {
        Map<String, Object> props = minimal();
        props.put("quota.pipeline.output.kafka.request.timeout.ms", "soon");
        ConfigException e = assertThrows(ConfigException.class, () -> CallbackConfig.parse(props));
        assertTrue(e.getMessage().contains("quota.pipeline.output.kafka.*"), e.getMessage());
        assertTrue(e.getMessage().contains("request.timeout.ms"), e.getMessage());
    }

    @Test
    void everyProblemIsReportedAtOnce() {
        Map<String, Object> props = minimal();
        props.remove("quota.pipeline.cluster.name");
        props.put("client.quota.callback.static.throttle.factor.fallback", "2");
        props.put("client.quota.callback.static.produce", "-5");
        ConfigException e = assertThrows(ConfigException.class, () -> CallbackConfig.parse(props));
        assertTrue(e.getMessage().contains("quota.pipeline.cluster.name"), e.getMessage());
        assertTrue(e.getMessage().contains(
                "Invalid value 2 for configuration client.quota.callback.static.throttle.factor.fallback: "
                        + "must be between 0.0 and 1.0"), e.getMessage());
        assertTrue(e.getMessage().contains(
                "Invalid value -5 for configuration client.quota.callback.static.produce: must be at least 0.0"),
                e.getMessage());
    }

    @Test
    void aWholeBrokerFileWithPipelineOnlyAndNonStringValuesLoads() {
        Map<String, Object> props = minimal();
        props.put("node.id", 1);
        props.put("process.roles", "broker,controller");
        props.put("client.quota.callback.class", PipelineQuotaCallback.class.getName());
        props.put("client.quota.callback.static.storage.check-interval", "30");
        props.put("client.quota.callback.static.storage.check.interval", "PT30S");
        props.put("client.quota.callback.static.storage.per.volume.limit.min.available.bytes", "1000");
        props.put("client.quota.callback.static.storage.per.volume.limit.min.available.ratio", "0.1");
        props.put("quota.pipeline.checkpoint.path", "/var/lib/pipeline");
        props.put("client.quota.callback.static.produce", 1000.0);
        assertEquals(1000.0, CallbackConfig.parse(props).staticQuotas().get(ClientQuotaType.PRODUCE));
    }

    @Test
    void secretsAreMaskedInTheLoggedConsumerSettings() {
        Map<String, Object> props = minimal();
        props.put("quota.pipeline.output.kafka.sasl.jaas.config", "org.apache.kafka.common.security.plain."
                + "PlainLoginModule required username=\"u\" password=\"hunter2\";");
        props.put("quota.pipeline.output.kafka.ssl.key.password", "hunter3");
        String logged = CallbackConfig.forLog(CallbackConfig.parse(props).consumerSettings(1)).toString();
        assertFalse(logged.contains("hunter2") || logged.contains("hunter3"), logged);
        assertTrue(logged.contains("sasl.jaas.config=[hidden]"), logged);
    }
}
