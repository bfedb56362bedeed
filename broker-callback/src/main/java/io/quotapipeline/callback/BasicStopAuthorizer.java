package io.quotapipeline.callback;

import java.io.IOException;
import java.time.Clock;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;

import org.apache.kafka.common.Endpoint;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.errors.NotControllerException;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.utils.Utils;
import org.apache.kafka.metadata.authorizer.AclMutator;
import org.apache.kafka.metadata.authorizer.ClusterMetadataAuthorizer;
import org.apache.kafka.metadata.authorizer.StandardAcl;
import org.apache.kafka.metadata.authorizer.StandardAuthorizer;
import org.apache.kafka.server.authorizer.AclCreateResult;
import org.apache.kafka.server.authorizer.AclDeleteResult;
import org.apache.kafka.server.authorizer.Action;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.authorizer.AuthorizationResult;
import org.apache.kafka.server.authorizer.Authorizer;
import org.apache.kafka.server.authorizer.AuthorizerServerInfo;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The stop that refuses writes: an authorizer that DENIES the writes to a topic while the decision in force has
 * factor 0 (RefusalPolicy says which), and asks the broker's own authorizer about everything else.
 *
 * <p>A quota throttle cannot stop a fleet: Kafka appends a produce request before it throttles, and a client below its
 * limit is never slowed. A refused write is never appended: the producer gets TOPIC_AUTHORIZATION_FAILED.
 *
 * <p>{@code authorizer.class.name=io.quotapipeline.callback.StopAuthorizer}; the authorizer it wraps is
 * {@code quota.pipeline.stop.authorizer.delegate} (default StandardAuthorizer, with its ACLs, super.users and
 * allow.everyone.if.no.acl.found unchanged; {@code none}: the broker had no authorizer). In KRaft the broker and the
 * controller hand ACLs only to an authorizer that is a {@link ClusterMetadataAuthorizer} (AclPublisher and
 * ControllerServer test the plugin's instance), so this class is one and forwards those calls to its delegate.
 *
 * <p>It follows the quota callback's decision topic with the callback's properties, through the same follower when
 * both are loaded (SharedFollowers). {@link #authorize} reads only the held decision and the clock: it never blocks,
 * and with no stop in force hands the actions to the delegate as they came.
 *
 * <p>This class loads on every Kafka from 3.9: brokers before 4.1 have no plugin metrics (KIP-877) and name it in
 * {@code authorizer.class.name}; on 4.1 and later name {@link StopAuthorizer}, which is this class reporting through
 * Kafka's plugin metrics too (StandardAuthorizer of 4.1 cannot answer without them).
 */
public class BasicStopAuthorizer implements ClusterMetadataAuthorizer {
    /** One logger for both classes: the broker's log names the stop the same whichever was loaded. */
    private static final Logger log = LoggerFactory.getLogger("io.quotapipeline.callback.StopAuthorizer");
    /** Either class names the stop; a class name, not a class: StopAuthorizer cannot load before Kafka 4.1. */
    static final Set<String> CLASS_NAMES = Set.of("io.quotapipeline.callback.StopAuthorizer",
            "io.quotapipeline.callback.BasicStopAuthorizer");
    static final String AUTHORIZER_CLASS_NAME = "authorizer.class.name";
    static final String DELEGATE = CallbackConfig.Q + "stop.authorizer.delegate";
    static final String DEFAULT_DELEGATE = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";
    static final String NONE = "none";
    static final String JMX_TYPE = "StopAuthorizer";
    /** At most one line per this long about an internal error (the count says how many). */
    private static final long ERROR_LOG_INTERVAL_NANOS = 10_000_000_000L;
    private static final Object NO_STOP = new Object();

    private final Clock clock;
    private final FollowerFactory followers;
    private final Function<String, Authorizer> delegates;
    private volatile Configured configured;
    /** The broker's own authorizer: everything this class does not refuse is its decision. */
    private volatile Authorizer delegate = new NoAuthorizer();
    /** The controller's ACL writer, kept for a delegate that is not a ClusterMetadataAuthorizer. */
    private volatile AclMutator aclMutator;
    private final AtomicReference<Object> lastScope = new AtomicReference<>(NO_STOP);
    private final AtomicLong refused = new AtomicLong();
    private final AtomicLong errors = new AtomicLong();
    private final AtomicLong lastErrorLogged = new AtomicLong(System.nanoTime() - ERROR_LOG_INTERVAL_NANOS);

    /** What configure() builds; one immutable value so request threads see all of it or none. */
    private record Configured(DecisionHolder holder, RefusalPolicy policy, Follower follower, CallbackMetrics jmx,
                              List<CallbackMetrics.Metric> metrics) {
    }

    /** The constructor Kafka uses. */
    public BasicStopAuthorizer() {
        this(SharedFollowers.SYSTEM_CLOCK, SharedFollowers.TOPIC_FOLLOWERS, BasicStopAuthorizer::newDelegate);
    }

    /** For tests: an injected clock, record feed and delegate maker (class name to instance). */
    BasicStopAuthorizer(Clock clock, FollowerFactory followers, Function<String, Authorizer> delegates) {
        this.clock = clock;
        this.followers = followers;
        this.delegates = delegates;
    }

    /**
     * Reads the callback's properties and the delegate, configures the delegate with the broker's configuration and
     * starts following the decision topic.
     *
     * @throws ConfigException naming the invalid property; the broker then refuses to start
     */
    @Override
    public synchronized void configure(Map<String, ?> configs) {
        CallbackConfig config = CallbackConfig.parse(configs);
        Object named = configs.get(DELEGATE);
        String delegateName = named == null ? DEFAULT_DELEGATE : String.valueOf(named).strip();
        Authorizer made = delegateFor(delegateName);
        made.configure(configs);
        ControllerQuorumCheck.logOnce(log, configs, made instanceof StandardAuthorizer);
        closeFollower();
        delegate = made;
        SharedFollowers.Lease lease = SharedFollowers.acquire(config, followers, clock);
        DecisionHolder holder = lease.holder();
        RefusalPolicy policy = RefusalPolicy.of(config);
        List<CallbackMetrics.Metric> metrics = List.of(
                new CallbackMetrics.Metric("WritesRefused", "writes-refused",
                        "Topic writes refused because a stop (factor 0) is in force", true, refused::get),
                new CallbackMetrics.Metric("StopInForce", "stop-in-force",
                        "1 while a stop refuses writes (factor 0), else 0", false,
                        () -> policy.inForce(holder.answer(clock.instant())) == null ? 0.0 : 1.0),
                new CallbackMetrics.Metric("AuthorizeErrors", "authorize-errors",
                        "Internal errors of the stop check; the delegate answered those requests alone", true,
                        errors::get));
        CallbackMetrics jmx = CallbackMetrics.register(JMX_TYPE, metrics);
        Map<String, Object> consumer = config.consumerSettings(jmx.instance());
        if (!lease.follow(() -> followers.start(config.topic(), consumer, SharedFollowers.sink(config, holder)))) {
            log.info("stop authorizer for cluster {} shares the decision follower of {} with {} other plugin(s) of "
                    + "this JVM", config.clusterName(), config.topic(), lease.users() - 1);
        }
        configured = new Configured(holder, policy, lease, jmx, metrics);
        afterConfigure();
        if (configs.get(CallbackConfig.EXCLUDED_CLIENT_IDS) != null) {
            log.warn("{} is deprecated and ignored: no client is exempt from a stop by its client id (a client "
                    + "chooses its own); exempt the pipeline's principal with {}", CallbackConfig.EXCLUDED_CLIENT_IDS,
                    CallbackConfig.EXCLUDED_PRINCIPALS);
        }
        log.info("stop authorizer for cluster {}: topic {} ({}), at factor 0 writes refused to {}, never to {}Kafka's "
                        + "internal topics or principals {}; every other action asked of {}; {}",
                config.clusterName(), config.topic(), config.decisionTopicHere() ? "on this cluster"
                        : "on another cluster: a topic of that name here is not exempt, "
                        + CallbackConfig.OUTPUT_TOPIC_HERE + "=false", config.stopScopeClusterWide() ? "every topic ("
                        + CallbackConfig.STOP_SCOPE + "=cluster)" : "the topics the decision names (every topic "
                        + "when it names none, on the fallback and before the first decision)",
                exemptTopic(policy), config.excludedPrincipalNames(), describe(made, delegateName),
                config.signature().describe());
    }

    private Authorizer delegateFor(String name) {
        if (NONE.equals(name)) {
            return new NoAuthorizer();
        }
        if (name.isEmpty() || CLASS_NAMES.contains(name)) {
            throw new ConfigException(DELEGATE, name, "must name the broker's own authorizer class (default "
                    + DEFAULT_DELEGATE + "), or be " + NONE + " for a broker without one");
        }
        try {
            return delegates.apply(name);
        } catch (RuntimeException e) {
            throw new ConfigException(DELEGATE, name, "cannot make this authorizer: " + e);
        }
    }

    static Authorizer newDelegate(String className) {
        try {
            return Utils.newInstance(className, Authorizer.class);
        } catch (ClassNotFoundException e) {
            throw new IllegalArgumentException("class not found", e);
        }
    }

    private static String describe(Authorizer delegate, String name) {
        if (delegate instanceof NoAuthorizer) {
            return "nobody (" + DELEGATE + "=" + NONE + ": everything else allowed, no ACLs)";
        }
        return name + (delegate instanceof ClusterMetadataAuthorizer ? " (its ACLs from the cluster metadata)"
                : " (a plain Authorizer: the cluster metadata's ACLs are not handed to it)");
    }

    /**
     * DENIED for each write a stop refuses, the delegate's answer for every other action (asked in one call, the
     * order kept). Never throws: on an internal error the delegate answers alone.
     */
    @Override
    public List<AuthorizationResult> authorize(AuthorizableRequestContext requestContext, List<Action> actions) {
        Authorizer d = delegate;
        Configured c = configured;
        StopScope scope;
        try {
            scope = c == null ? null : scope(c);
        } catch (RuntimeException e) {
            internalError(e);
            return d.authorize(requestContext, actions);
        }
        if (scope == null) {
            return d.authorize(requestContext, actions);
        }
        boolean[] refusals;
        try {
            refusals = refusals(c.policy(), scope, requestContext.principal(), actions);
        } catch (RuntimeException e) {
            internalError(e);
            return d.authorize(requestContext, actions);
        }
        if (refusals == null) {
            return d.authorize(requestContext, actions);
        }
        List<Action> asked = new ArrayList<>(actions.size());
        for (int i = 0; i < actions.size(); i++) {
            if (!refusals[i]) {
                asked.add(actions.get(i));
            }
        }
        List<AuthorizationResult> answered = asked.isEmpty() ? List.of() : d.authorize(requestContext, asked);
        List<AuthorizationResult> results = new ArrayList<>(actions.size());
        int next = 0;
        for (int i = 0; i < actions.size(); i++) {
            results.add(refusals[i] ? AuthorizationResult.DENIED : answered.get(next++));
        }
        refused.addAndGet(actions.size() - asked.size());
        return results;
    }

    /** The stop in force now (null: none), saying so in the log when its scope changes. */
    private StopScope scope(Configured c) {
        Answer answer = c.holder().answer(clock.instant());
        StopScope scope = c.policy().inForce(answer);
        Object now = scope == null ? NO_STOP : scope;
        Object seen = lastScope.get();
        if (seen != now && lastScope.compareAndSet(seen, now) && !Objects.equals(seen, now)) {
            if (scope == null) {
                log.info("stop of {} lifted: writes accepted again (factor {}, {})", c.holder().cluster(),
                        answer.factor(), answer.reason());
            } else {
                log.info("stop of {} in force: writes to {} refused, never to {}Kafka's internal "
                        + "topics or excluded principals (factor 0, {})", c.holder().cluster(),
                        scope.describe(), exemptTopic(c.policy()), answer.reason());
            }
        }
        return scope;
    }

    /** "topic, " for the decision topic a stop lets through (this cluster holds it), else nothing. */
    private static String exemptTopic(RefusalPolicy policy) {
        return policy.exemptDecisionTopic() == null ? "" : policy.exemptDecisionTopic() + ", ";
    }

    /** Which actions the stop refuses, or null when none. */
    private static boolean[] refusals(RefusalPolicy policy, StopScope scope, KafkaPrincipal principal,
                                      List<Action> actions) {
        String name = principal == null ? null : principal.getName();
        boolean[] refusals = null;
        for (int i = 0; i < actions.size(); i++) {
            if (policy.refuses(scope, actions.get(i), name)) {
                if (refusals == null) {
                    refusals = new boolean[actions.size()];
                }
                refusals[i] = true;
            }
        }
        return refusals;
    }

    private void internalError(RuntimeException e) {
        long count = errors.incrementAndGet();
        long now = System.nanoTime();
        long last = lastErrorLogged.get();
        if (now - last >= ERROR_LOG_INTERVAL_NANOS && lastErrorLogged.compareAndSet(last, now)) {
            log.warn("the stop check failed ({} time(s) so far); the delegate authorizer answered alone", count, e);
        }
    }

    // ---- the delegate's calls -------------------------------------------------------------------------------

    @Override
    public Map<Endpoint, ? extends CompletionStage<Void>> start(AuthorizerServerInfo serverInfo) {
        return delegate.start(serverInfo);
    }

    @Override
    public AuthorizationResult authorizeByResourceType(AuthorizableRequestContext requestContext, AclOperation op,
                                                       ResourceType resourceType) {
        return delegate.authorizeByResourceType(requestContext, op, resourceType);
    }

    @Override
    public List<? extends CompletionStage<AclCreateResult>> createAcls(AuthorizableRequestContext requestContext,
                                                                       List<AclBinding> aclBindings) {
        return delegate.createAcls(requestContext, aclBindings);
    }

    @Override
    public List<? extends CompletionStage<AclDeleteResult>> deleteAcls(AuthorizableRequestContext requestContext,
                                                                       List<AclBindingFilter> aclBindingFilters) {
        return delegate.deleteAcls(requestContext, aclBindingFilters);
    }

    @Override
    public Iterable<AclBinding> acls(AclBindingFilter filter) {
        return delegate.acls(filter);
    }

    @Override
    public int aclCount() {
        return delegate.aclCount();
    }

    /** The delegate as a ClusterMetadataAuthorizer, or null when it is a plain Authorizer (or none). */
    private ClusterMetadataAuthorizer metadataDelegate() {
        Authorizer d = delegate;
        return d instanceof ClusterMetadataAuthorizer ? (ClusterMetadataAuthorizer) d : null;
    }

    @Override
    public void setAclMutator(AclMutator aclMutator) {
        this.aclMutator = aclMutator;
        ClusterMetadataAuthorizer d = metadataDelegate();
        if (d != null) {
            d.setAclMutator(aclMutator);
        }
    }

    @Override
    public AclMutator aclMutatorOrException() {
        ClusterMetadataAuthorizer d = metadataDelegate();
        if (d != null) {
            return d.aclMutatorOrException();
        }
        AclMutator mutator = aclMutator;
        if (mutator == null) {
            throw new NotControllerException("The current node is not the active controller.");
        }
        return mutator;
    }

    @Override
    public void completeInitialLoad() {
        ClusterMetadataAuthorizer d = metadataDelegate();
        if (d != null) {
            d.completeInitialLoad();
        }
    }

    @Override
    public void completeInitialLoad(Exception e) {
        ClusterMetadataAuthorizer d = metadataDelegate();
        if (d != null) {
            d.completeInitialLoad(e);
        }
    }

    @Override
    public void loadSnapshot(Map<Uuid, StandardAcl> acls) {
        ClusterMetadataAuthorizer d = metadataDelegate();
        if (d != null) {
            d.loadSnapshot(acls);
        }
    }

    @Override
    public void addAcl(Uuid id, StandardAcl acl) {
        ClusterMetadataAuthorizer d = metadataDelegate();
        if (d != null) {
            d.addAcl(id, acl);
        }
    }

    @Override
    public void removeAcl(Uuid id) {
        ClusterMetadataAuthorizer d = metadataDelegate();
        if (d != null) {
            d.removeAcl(id);
        }
    }

    /** Called at the end of each configure(): StopAuthorizer adds its metrics to Kafka's plugin metrics here. */
    void afterConfigure() {
    }

    /** The metrics of the last configure() (none before it). */
    List<CallbackMetrics.Metric> metrics() {
        Configured c = configured;
        return c == null ? List.of() : c.metrics();
    }

    @Override
    public void close() throws IOException {
        try {
            closeFollower();
        } finally {
            delegate.close();
        }
    }

    private void closeFollower() {
        Configured c = configured;
        if (c == null) {
            return;
        }
        configured = null;
        Follower.closeWith(c.follower(), c.jmx());
    }

    /** Writes refused so far (for tests). */
    long refused() {
        return refused.get();
    }

    Authorizer delegate() {
        return delegate;
    }
}
