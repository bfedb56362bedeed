package io.quotapipeline.callback;

import java.time.Clock;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One decision follower (and the decisions it holds) per JVM for each decision topic, connection and reading of it.
 *
 * <p>A combined broker+controller node configures the quota callback twice (the broker's and the controller's quota
 * managers), from one configuration: without sharing, that is two consumers of the decision topic per node. Callbacks
 * whose {@link Key} is equal share one {@link DecisionHolder} and one follower; each holds a {@link Lease}, and the
 * follower stops when the last lease is closed, so closing one callback never stops another's decisions. A callback
 * with another topic, cluster, connection (bootstrap, security settings) or validity gets its own.
 */
final class SharedFollowers {
    private static final Logger log = LoggerFactory.getLogger(SharedFollowers.class);
    private static final Map<Key, Entry> ENTRIES = new HashMap<>();
    /**
     * The clock and follower factory of every plugin Kafka makes (the quota callback, StopAuthorizer): equal keys
     * need the same instances, so that a broker's callback and authorizer share one follower.
     */
    static final Clock SYSTEM_CLOCK = Clock.systemUTC();
    static final FollowerFactory TOPIC_FOLLOWERS = DecisionFollower::start;

    private SharedFollowers() {
    }

    /**
     * What makes two callbacks' decisions the same: who starts the follower and tells the time (tests inject their
     * own), the topic and the consumer settings it is read with, and everything the holder is built from.
     */
    record Key(FollowerFactory factory, Clock clock, String topic, Map<String, Object> consumer, String cluster,
               Duration validity, double fallback, Duration skew, List<DecisionSignature.SigningKey> signingKeys) {
        Key {
            consumer = Map.copyOf(consumer);
        }
    }

    private static final class Entry {
        final DecisionHolder holder;
        Follower follower;
        int leases;

        Entry(DecisionHolder holder) {
            this.holder = holder;
        }
    }

    /** A callback's share of a follower: {@link #close()} releases it, the last release stops the follower. */
    static final class Lease implements Follower {
        private final Key key;
        private final Entry entry;
        private boolean closed;

        private Lease(Key key, Entry entry) {
            this.key = key;
            this.entry = entry;
        }

        DecisionHolder holder() {
            return entry.holder;
        }

        /** How many callbacks of the JVM share this follower now. */
        int users() {
            synchronized (SharedFollowers.class) {
                return entry.leases;
            }
        }

        /** Starts the follower unless another callback's lease already did; false when it was already running. */
        boolean follow(Supplier<Follower> start) {
            synchronized (SharedFollowers.class) {
                if (entry.follower != null || closed) {
                    return false;
                }
                entry.follower = start.get();
                return true;
            }
        }

        @Override
        public void close() {
            Follower last = null;
            synchronized (SharedFollowers.class) {
                if (closed) {
                    return;
                }
                closed = true;
                if (--entry.leases == 0) {
                    ENTRIES.remove(key, entry);
                    last = entry.follower;
                } else {
                    log.info("a quota callback closed; its decision follower of {} goes on for {} other callback(s)",
                            key.topic(), entry.leases);
                }
            }
            if (last != null) {
                last.close();  // outside the lock: it may take a few seconds
            }
        }
    }

    /**
     * A lease on the decisions {@code config} names: the holder is made (and the last decision this broker applied
     * restored into it) when no plugin of the JVM holds it yet. Start the follower with {@link Lease#follow}, its
     * records going to {@link #sink}.
     */
    static Lease acquire(CallbackConfig config, FollowerFactory followers, Clock clock) {
        LastDecisionFile last = LastDecisionFile.in(config.stateDir(), config.clusterName());
        DecisionSignature signature = config.signature();
        return acquire(new Key(followers, clock, config.topic(), config.consumerSettings(1), config.clusterName(),
                config.validity(), config.fallback(), config.maxClockSkew(), signature.keys()), () -> {
                    DecisionHolder made = new DecisionHolder(config.clusterName(), config.validity(),
                            config.fallback(), config.maxClockSkew(), clock, signature);
                    if (last != null) {
                        last.restore(made, config.clusterName());  // a restart starts from the decision it held
                    }
                    return made;
                });
    }

    /** Where the follower of {@code config}'s decisions puts each record: the holder, and the last decision file. */
    static RecordSink sink(CallbackConfig config, DecisionHolder holder) {
        LastDecisionFile last = LastDecisionFile.in(config.stateDir(), config.clusterName());
        return last == null ? holder::apply : last.keeping(holder);
    }

    /** A lease on the holder and follower for {@code key}, the holder made by {@code holders} when there is none. */
    static Lease acquire(Key key, Supplier<DecisionHolder> holders) {
        synchronized (SharedFollowers.class) {
            Entry entry = ENTRIES.computeIfAbsent(key, k -> new Entry(holders.get()));
            entry.leases++;
            return new Lease(key, entry);
        }
    }

    /** Followers alive in this JVM (for tests). */
    static int followers() {
        synchronized (SharedFollowers.class) {
            return (int) ENTRIES.values().stream().filter(e -> e.follower != null).count();
        }
    }
}
