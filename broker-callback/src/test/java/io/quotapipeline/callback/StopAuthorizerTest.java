package io.quotapipeline.callback;

import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletionException;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.errors.SecurityDisabledException;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.internals.PluginMetricsImpl;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import org.apache.kafka.metadata.authorizer.StandardAcl;
import org.apache.kafka.metadata.authorizer.StandardAuthorizer;
import org.apache.kafka.server.authorizer.Action;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.authorizer.AuthorizationResult;
import org.apache.kafka.server.authorizer.Authorizer;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import static io.quotapipeline.callback.RequestContexts.action;
import static io.quotapipeline.callback.RequestContexts.write;
import static org.apache.kafka.server.authorizer.AuthorizationResult.ALLOWED;
import static org.apache.kafka.server.authorizer.AuthorizationResult.DENIED;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The stop that refuses writes, around a delegate that records what it is asked. */
class StopAuthorizerTest {
    private static final Instant START = Instant.parse("2026-11-21T10:00:00Z");
    private static final AuthorizableRequestContext ALICE = RequestContexts.of("User:alice", "app");
    private final MutableClock clock = new MutableClock(START);
    private final List<RecordSink> sinks = new ArrayList<>();
    private final RecordingAuthorizer recording = new RecordingAuthorizer();
    private final List<AutoCloseable> opened = new ArrayList<>();
    /** One factory instance: plugins share a follower only when theirs is the same. */
    private final FollowerFactory followers = this::follower;

    @AfterEach
    void close() throws Exception {
        for (AutoCloseable c : opened) {
            c.close();
        }
    }

    private Follower follower(String topic, Map<String, Object> settings, RecordSink sink) {
        sinks.add(sink);
        return () -> { };
    }

    private static Map<String, Object> props(Map<String, Object> extra) {
        Map<String, Object> props = new HashMap<>();
        props.put("quota.pipeline.cluster.name", "c1");
        props.put("quota.pipeline.output.kafka.bootstrap.servers", "127.0.0.1:9");
        props.put("quota.pipeline.output.topic.on.this.cluster", "true");  // a listener of this broker's cluster
        props.put("quota.pipeline.state.dir", "");
        props.put("client.quota.callback.static.excluded.principal.name.list", "User:pipeline");
        props.putAll(extra);
        return props;
    }

    private StopAuthorizer configured(Map<String, Object> extra) {
        StopAuthorizer authorizer = new StopAuthorizer(clock, followers, name -> {
            assertEquals("test.Recording", name);
            return recording;
        });
        Map<String, Object> props = props(extra);
        props.putIfAbsent(StopAuthorizer.DELEGATE, "test.Recording");
        authorizer.configure(props);
        opened.add(authorizer);
        return authorizer;
    }

    private StopAuthorizer configured() {
        return configured(Map.of());
    }

    private void feed(Instant observed, double factor, String stop) {
        String value = "{\"schema_version\": 2, " + TestRecords.required(observed) + ", \"observed_at\": \"" + observed + "\", \"throttle_factor\": " + factor
                + ", \"source\": \"OBSERVATION\", \"valid_until\": \"" + observed.plusSeconds(300) + "\""
                + (stop == null ? "" : ", \"stop\": " + stop) + "}";
        sinks.get(0).accept("c1".getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8), "");
    }

    @Test
    void withNoStopInForceTheDelegateGetsTheVeryListAndAnswers() {
        StopAuthorizer authorizer = configured();
        feed(START, 0.5, null);
        List<Action> actions = List.of(write("a"), write("denied-b"));
        assertEquals(List.of(ALLOWED, DENIED), authorizer.authorize(ALICE, actions));
        assertSame(actions, recording.asked.get(0));
        assertEquals(0, authorizer.refused());
    }

    @Test
    void refusedWritesNeverReachTheDelegateAndTheOrderIsKept() {
        StopAuthorizer authorizer = configured();
        feed(START, 0.0, null);
        List<Action> actions = List.of(
                write("a"),
                action(AclOperation.READ, ResourceType.TOPIC, "a"),
                write("b"),
                write("__quota_throttle_factors"),
                action(AclOperation.DESCRIBE, ResourceType.TOPIC, "denied-c"),
                write("__consumer_offsets"),
                action(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, "tx"));
        assertEquals(List.of(DENIED, ALLOWED, DENIED, ALLOWED, DENIED, ALLOWED, ALLOWED),
                authorizer.authorize(ALICE, actions));
        assertEquals(List.of(List.of(actions.get(1), actions.get(3), actions.get(4), actions.get(5), actions.get(6))),
                recording.asked);
        assertEquals(2, authorizer.refused());
    }

    @Test
    void onAClusterThatDoesNotHoldTheDecisionTopicATopicOfItsNameIsRefusedLikeAnyOther() {
        Map<String, Object> elsewhere = new HashMap<>();
        elsewhere.put("quota.pipeline.output.topic.on.this.cluster", null);  // the default with an output bootstrap
        elsewhere.put("quota.pipeline.stop.scope", "cluster");
        StopAuthorizer authorizer = configured(elsewhere);
        feed(START, 0.0, "{\"scope\": \"topics\", \"topics\": [\"orders\"]}");
        AuthorizableRequestContext publisherNamed = RequestContexts.of("User:alice", "quota-pipeline-publisher");
        assertEquals(List.of(DENIED, DENIED, ALLOWED, ALLOWED),
                authorizer.authorize(publisherNamed, List.of(write("orders"), write("__quota_throttle_factors"),
                        write("__consumer_offsets"), write("__transaction_state"))));
        assertEquals(List.of(ALLOWED), authorizer.authorize(RequestContexts.of("User:pipeline", "app"),
                List.of(write("__quota_throttle_factors"))), "an excluded principal still writes");
        assertEquals(2, authorizer.refused());
    }

    @Test
    void onTheClusterThatHoldsTheDecisionTopicItsWritesGetThroughATargetedStop() {
        StopAuthorizer authorizer = configured(Map.of("quota.pipeline.output.topic", "decisions"));
        feed(START, 0.0, "{\"scope\": \"topics\", \"topics\": [\"decisions\", \"__quota_throttle_factors\"]}");
        assertEquals(List.of(ALLOWED, DENIED),
                authorizer.authorize(ALICE, List.of(write("decisions"), write("__quota_throttle_factors"))));
    }

    @Test
    void whenEveryActionIsRefusedTheDelegateIsNotAsked() {
        StopAuthorizer authorizer = configured();
        feed(START, 0.0, null);
        assertEquals(List.of(DENIED, DENIED), authorizer.authorize(ALICE, List.of(write("a"), write("b"))));
        assertEquals(List.of(), recording.asked);
    }

    @Test
    void aTargetedStopRefusesOnlyItsTopics() {
        StopAuthorizer authorizer = configured();
        feed(START, 0.0, "{\"scope\": \"topics\", \"topics\": [\"full\"]}");
        assertEquals(List.of(DENIED, ALLOWED), authorizer.authorize(ALICE, List.of(write("full"), write("other"))));
        assertEquals(List.of(List.of(write("other"))), recording.asked);
    }

    @Test
    void theReadersClusterScopeRefusesEveryTopic() {
        StopAuthorizer authorizer = configured(Map.of("quota.pipeline.stop.scope", "cluster"));
        feed(START, 0.0, "{\"scope\": \"topics\", \"topics\": [\"full\"]}");
        assertEquals(List.of(DENIED, DENIED), authorizer.authorize(ALICE, List.of(write("full"), write("other"))));
    }

    @Test
    void excludedPrincipalsAreNeverRefusedAndClientIdsExemptNobody() {
        StopAuthorizer authorizer = configured(Map.of("quota.pipeline.excluded.client.ids", "quota-pipeline-publisher"));
        feed(START, 0.0, null);
        assertEquals(List.of(ALLOWED), authorizer.authorize(RequestContexts.of("User:pipeline", "x"),
                List.of(write("a"))));
        assertEquals(List.of(DENIED), authorizer.authorize(RequestContexts.of("User:alice",
                "quota-pipeline-publisher"), List.of(write("a"))));
    }

    @Test
    void theFallbackAfterExpiryRefusesEveryTopic() {
        StopAuthorizer authorizer = configured(Map.of("client.quota.callback.static.throttle.factor.fallback", "0"));
        feed(START, 1.0, null);
        assertEquals(List.of(ALLOWED), authorizer.authorize(ALICE, List.of(write("a"))));
        clock.advance(Duration.ofMinutes(10));
        assertEquals(List.of(DENIED), authorizer.authorize(ALICE, List.of(write("a"))));
        feed(START.plus(Duration.ofMinutes(10)), 1.0, null);
        assertEquals(List.of(ALLOWED), authorizer.authorize(ALICE, List.of(write("a"))));
    }

    @Test
    void anInternalErrorLeavesTheAnswerToTheDelegate() {
        StopAuthorizer authorizer = configured();
        feed(START, 0.0, null);
        AuthorizableRequestContext broken = new ForwardingContext(ALICE) {
            @Override
            public KafkaPrincipal principal() {
                throw new IllegalStateException("no principal");
            }
        };
        List<Action> actions = List.of(write("a"));
        assertEquals(List.of(ALLOWED), authorizer.authorize(broken, actions));
        assertSame(actions, recording.asked.get(0));
    }

    @Test
    void everyClusterMetadataCallGoesToTheDelegate() throws Exception {
        StopAuthorizer authorizer = configured();
        StandardAcl acl = StandardAcl.fromAclBinding(new AclBinding(
                new ResourcePattern(ResourceType.TOPIC, "a", PatternType.LITERAL),
                new AccessControlEntry("User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)));
        Uuid id = Uuid.randomUuid();
        authorizer.setAclMutator(null);
        authorizer.aclMutatorOrException();
        authorizer.start(null);
        authorizer.loadSnapshot(Map.of(id, acl));
        authorizer.addAcl(id, acl);
        authorizer.removeAcl(id);
        authorizer.completeInitialLoad();
        authorizer.completeInitialLoad(new RuntimeException("boom"));
        authorizer.createAcls(ALICE, List.of());
        authorizer.deleteAcls(ALICE, List.of(AclBindingFilter.ANY));
        authorizer.acls(AclBindingFilter.ANY);
        assertEquals(7, authorizer.aclCount());
        authorizer.authorizeByResourceType(ALICE, AclOperation.WRITE, ResourceType.TOPIC);
        authorizer.close();
        opened.clear();
        assertEquals(List.of("configure", "setAclMutator", "aclMutatorOrException", "start", "loadSnapshot 1",
                "addAcl " + id, "removeAcl " + id, "completeInitialLoad", "completeInitialLoad boom", "createAcls 0",
                "deleteAcls 1", "acls", "aclCount", "authorizeByResourceType WRITE TOPIC", "close"), recording.calls);
        assertTrue(recording.configs.containsKey("quota.pipeline.cluster.name"), "the broker's configuration");
    }

    @Test
    void authorizeByResourceTypeIsNeverRefused() {
        StopAuthorizer authorizer = configured();
        feed(START, 0.0, null);
        // InitProducerId asks for WRITE on any topic: a stop must not fail a producer's start.
        assertEquals(ALLOWED, authorizer.authorizeByResourceType(ALICE, AclOperation.WRITE, ResourceType.TOPIC));
    }

    @Test
    void theDefaultDelegateIsKafkasStandardAuthorizer() throws Exception {
        StopAuthorizer authorizer = new StopAuthorizer(clock, followers, StopAuthorizer::newDelegate);
        opened.add(authorizer);
        authorizer.configure(props(Map.of("super.users", "User:admin")));
        // Kafka hands plugin metrics to the authorizer it loaded; StandardAuthorizer needs them to answer.
        authorizer.withPluginMetrics(new PluginMetricsImpl(new Metrics(), Map.of()));
        assertInstanceOf(StandardAuthorizer.class, authorizer.delegate());
        authorizer.loadSnapshot(Map.of());
        authorizer.completeInitialLoad();
        feed(START, 0.0, "{\"scope\": \"topics\", \"topics\": [\"full\"]}");
        // StandardAuthorizer denies without ACLs; its super user gets every action but the refused write.
        AuthorizableRequestContext admin = RequestContexts.of("User:admin", "a");
        assertEquals(List.of(DENIED, ALLOWED), authorizer.authorize(admin, List.of(write("full"), write("other"))));
        assertEquals(List.of(DENIED, DENIED), authorizer.authorize(ALICE, List.of(write("full"), write("other"))));
    }

    @Test
    void noneAllowsEverythingButTheRefusedWritesAndKeepsNoAcls() throws Exception {
        StopAuthorizer authorizer = new StopAuthorizer(clock, followers, StopAuthorizer::newDelegate);
        opened.add(authorizer);
        authorizer.configure(props(Map.of(StopAuthorizer.DELEGATE, "none")));
        authorizer.loadSnapshot(Map.of());  // the broker hands the metadata's ACLs to every ClusterMetadataAuthorizer
        authorizer.completeInitialLoad();
        feed(START, 0.0, null);
        assertEquals(List.of(DENIED, ALLOWED), authorizer.authorize(ALICE, List.of(write("a"),
                action(AclOperation.READ, ResourceType.TOPIC, "a"))));
        assertEquals(ALLOWED, authorizer.authorizeByResourceType(ALICE, AclOperation.WRITE, ResourceType.TOPIC));
        CompletionException e = assertThrows(CompletionException.class, () -> authorizer.createAcls(ALICE,
                List.of(new AclBinding(new ResourcePattern(ResourceType.TOPIC, "a", PatternType.LITERAL),
                        new AccessControlEntry("User:a", "*", AclOperation.READ, AclPermissionType.ALLOW))))
                .get(0).toCompletableFuture().thenApply(r -> {
                    throw new CompletionException(r.exception().orElseThrow());
                }).join());
        assertInstanceOf(SecurityDisabledException.class, e.getCause());
        assertTrue(e.getCause().getMessage().contains("quota.pipeline.stop.authorizer.delegate=none"));
        assertThrows(SecurityDisabledException.class, () -> authorizer.acls(new AclBindingFilter(
                ResourcePatternFilter.ANY, AccessControlEntryFilter.ANY)));
    }

    @Test
    void aPlainAuthorizerDelegateGetsNoClusterMetadataCalls() {
        List<String> calls = new ArrayList<>();
        Authorizer plain = new NoAuthorizer() {
            @Override
            public java.util.List<? extends java.util.concurrent.CompletionStage<
                    org.apache.kafka.server.authorizer.AclCreateResult>> createAcls(
                    AuthorizableRequestContext context, List<AclBinding> bindings) {
                calls.add("createAcls");
                return List.of();
            }
        };
        StopAuthorizer authorizer = new StopAuthorizer(clock, followers, name -> plain);
        opened.add(authorizer);
        authorizer.configure(props(Map.of(StopAuthorizer.DELEGATE, "com.example.Plain")));
        authorizer.loadSnapshot(Map.of());
        authorizer.completeInitialLoad();
        authorizer.createAcls(ALICE, List.of());
        assertEquals(List.of("createAcls"), calls);
    }

    @Test
    void aDelegateThatCannotBeMadeFailsTheBrokersStart() {
        StopAuthorizer authorizer = new StopAuthorizer(clock, followers, StopAuthorizer::newDelegate);
        ConfigException e = assertThrows(ConfigException.class, () -> authorizer.configure(props(Map.of(
                StopAuthorizer.DELEGATE, "com.example.Missing"))));
        assertTrue(e.getMessage().contains(StopAuthorizer.DELEGATE), e.getMessage());
        assertThrows(ConfigException.class, () -> authorizer.configure(props(Map.of(
                StopAuthorizer.DELEGATE, StopAuthorizer.class.getName()))));
    }

    @Test
    void theCallbackAndTheAuthorizerShareOneFollower() {
        int before = SharedFollowers.followers();
        PipelineQuotaCallback callback = new PipelineQuotaCallback(clock, followers);
        Map<String, Object> props = props(Map.of(StopAuthorizer.AUTHORIZER_CLASS_NAME,
                StopAuthorizer.class.getName(), StopAuthorizer.DELEGATE, "test.Recording"));
        callback.configure(props);
        opened.add(callback::close);
        StopAuthorizer authorizer = configured();
        assertEquals(1, sinks.size());
        assertEquals(before + 1, SharedFollowers.followers());
        feed(START, 0.0, null);
        assertEquals(List.of(DENIED), authorizer.authorize(ALICE, List.of(write("a"))));
        assertEquals(0.0, callback.answer().factor());
    }

    @Test
    void refusalsAreCountedInJmx() throws Exception {
        StopAuthorizer authorizer = configured();
        feed(START, 0.0, null);
        authorizer.authorize(ALICE, List.of(write("a"), write("b")));
        Object count = java.lang.management.ManagementFactory.getPlatformMBeanServer().getAttribute(
                CallbackMetrics.objectName(StopAuthorizer.JMX_TYPE, "WritesRefused", ""), "Count");
        assertEquals(2L, count);
        Object inForce = java.lang.management.ManagementFactory.getPlatformMBeanServer().getAttribute(
                CallbackMetrics.objectName(StopAuthorizer.JMX_TYPE, "StopInForce", ""), "Value");
        assertEquals(1.0, inForce);
    }

    /** A request context that answers like another, for overriding one method. */
    private static class ForwardingContext implements AuthorizableRequestContext {
        private final AuthorizableRequestContext to;

        ForwardingContext(AuthorizableRequestContext to) {
            this.to = to;
        }

        @Override
        public String listenerName() {
            return to.listenerName();
        }

        @Override
        public SecurityProtocol securityProtocol() {
            return to.securityProtocol();
        }

        @Override
        public KafkaPrincipal principal() {
            return to.principal();
        }

        @Override
        public InetAddress clientAddress() {
            return to.clientAddress();
        }

        @Override
        public int requestType() {
            return to.requestType();
        }

        @Override
        public int requestVersion() {
            return to.requestVersion();
        }

        @Override
        public String clientId() {
            return to.clientId();
        }

        @Override
        public int correlationId() {
            return to.correlationId();
        }
    }
}
