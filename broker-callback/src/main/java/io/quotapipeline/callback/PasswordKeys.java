package io.quotapipeline.callback;

import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Stream;

import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.config.ConfigDef;

/**
 * The client settings Kafka itself types as {@link ConfigDef.Type#PASSWORD}, read from the clients' own ConfigDefs of
 * the Kafka on the classpath (the broker's), so that a password Kafka adds later (a passphrase, a token) is masked
 * without anyone naming it here.
 */
final class PasswordKeys {
    static final Set<String> NAMES = names();

    private PasswordKeys() {
    }

    /** True when Kafka types {@code name} (a client setting, without prefix) as a password. */
    static boolean contains(String name) {
        return NAMES.contains(name);
    }

    private static Set<String> names() {
        Set<String> names = new TreeSet<>();
        Stream.of(ConsumerConfig.configDef(), ProducerConfig.configDef(), AdminClientConfig.configDef())
                .flatMap(def -> def.configKeys().values().stream())
                .filter(key -> key.type == ConfigDef.Type.PASSWORD)
                .forEach(key -> names.add(key.name));
        return Set.copyOf(names);
    }
}
