package io.quotapipeline.callback;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

import org.slf4j.Logger;

/**
 * Whether a StandardAuthorizer delegate lets this controller's KRaft quorum form: StandardAuthorizer refuses every
 * request of a principal that is not a super user (AuthorizerNotReadyException) until it has loaded the cluster's
 * ACLs, and a controller loads them only from a formed quorum, so controllers whose listener principal is not in
 * {@code super.users} refuse each other's votes for ever. The line says what to set; it comes once per JVM (a
 * combined node configures two authorizers).
 *
 * <p>The principal is known only for a PLAINTEXT controller listener with Kafka's own principal builder
 * (User:ANONYMOUS); with SSL or SASL it is the peer's certificate or login, which the configuration does not hold,
 * and the line says so instead.
 */
final class ControllerQuorumCheck {
    static final String PLAINTEXT_PRINCIPAL = "User:ANONYMOUS";
    private static final String DEFAULT_BUILDER =
            "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder";
    private static final List<String> PROTOCOLS = List.of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL");
    private static final AtomicBoolean LOGGED = new AtomicBoolean();

    /** What the check found: {@code certain} when the quorum will not form, else it could not tell. */
    record Finding(boolean certain, String line) {
    }

    private ControllerQuorumCheck() {
    }

    /** Logs the finding for this node, if any, once per JVM: a WARN when certain, else an INFO. */
    static void logOnce(Logger log, Map<String, ?> configs, boolean standardDelegate) {
        Finding finding = standardDelegate ? check(configs) : null;
        if (finding != null && LOGGED.compareAndSet(false, true)) {
            if (finding.certain()) {
                log.warn(finding.line());
            } else {
                log.info(finding.line());
            }
        }
    }

    /**
     * The finding for a node configured with {@code configs} (the broker's properties) whose delegate is
     * StandardAuthorizer; null when this node is no controller or {@code super.users} names its controller principal.
     */
    static Finding check(Map<String, ?> configs) {
        if (!csv(configs.get("process.roles")).contains("controller")) {
            return null;
        }
        List<String> superUsers = Arrays.stream(text(configs.get("super.users")).split(";")).map(String::strip)
                .filter(s -> !s.isEmpty()).toList();
        List<String> names = csv(configs.get("controller.listener.names"));
        String listener = names.isEmpty() ? null : names.get(0);
        String protocol = listener == null ? null : protocol(listener, configs);
        String principal = "PLAINTEXT".equals(protocol) && isDefaultBuilder(configs, listener) ? PLAINTEXT_PRINCIPAL
                : null;
        if (principal != null && superUsers.contains(principal)) {
            return null;
        }
        String shownUsers = superUsers.isEmpty() ? "empty" : "is " + Printable.visible(String.join(";", superUsers));
        String fix = "set " + BasicStopAuthorizer.DELEGATE + "=" + BasicStopAuthorizer.NONE
                + " if this cluster had no authorizer, else add " + (principal == null ? "the controllers' principal"
                : principal) + " to super.users (docs/broker-side.md)";
        String why = BasicStopAuthorizer.DEFAULT_DELEGATE + " refuses every request of a principal that is not in "
                + "super.users until it has loaded the ACLs, which needs a formed quorum";
        if (principal != null || superUsers.isEmpty()) {
            String who = principal == null ? "" : " the controllers reach each other on listener "
                    + Printable.visible(listener) + " (PLAINTEXT) as " + principal + ";";
            return new Finding(true, "stop authorizer: the KRaft quorum will not form: the controllers will refuse "
                    + "each other's votes (AuthorizerNotReadyException on VOTE): " + why + ";" + who + " super.users "
                    + shownUsers + "; " + fix);
        }
        return new Finding(false, "stop authorizer: cannot tell whether the KRaft quorum will form: " + why + ", and "
                + unknownPrincipal(listener, protocol) + "; unless super.users (" + Printable.visible(String.join(";",
                superUsers)) + ") names it, the controllers will refuse each other's votes: " + fix);
    }

    /** Which principal the configuration does not tell, and why. */
    private static String unknownPrincipal(String listener, String protocol) {
        if (listener == null) {
            return "the controller listener's principal is not known (controller.listener.names is not set)";
        }
        String named = "the principal of the controller listener " + Printable.visible(listener);
        if (protocol == null) {
            return named + " is not known (its protocol is not in listener.security.protocol.map)";
        }
        if ("PLAINTEXT".equals(protocol)) {
            return named + " (PLAINTEXT) is made by principal.builder.class, not known from the configuration";
        }
        return named + " (" + Printable.visible(protocol) + ") is " + (protocol.startsWith("SASL")
                ? "the SASL login's user" : "the peer certificate's (after ssl.principal.mapping.rules)")
                + ", not known from the configuration";
    }

    /**
     * The security protocol of {@code listener}: from listener.security.protocol.map, else, as Kafka does for a
     * controller without that map, the listener's own name when it is a protocol, else PLAINTEXT when no listener
     * is SSL or SASL; null when not known.
     */
    private static String protocol(String listener, Map<String, ?> configs) {
        String wanted = listener.toUpperCase(Locale.ROOT);
        Object map = configs.get("listener.security.protocol.map");
        if (map != null) {
            for (String entry : csv(map)) {
                int colon = entry.lastIndexOf(':');
                if (colon > 0 && entry.substring(0, colon).strip().toUpperCase(Locale.ROOT).equals(wanted)) {
                    return entry.substring(colon + 1).strip().toUpperCase(Locale.ROOT);
                }
            }
            return null;
        }
        if (PROTOCOLS.contains(wanted)) {
            return wanted;
        }
        for (String bound : csv(configs.get("listeners"))) {
            int scheme = bound.indexOf("://");
            String name = (scheme < 0 ? bound : bound.substring(0, scheme)).toUpperCase(Locale.ROOT);
            if (name.startsWith("SSL") || name.startsWith("SASL")) {
                return null;
            }
        }
        return "PLAINTEXT";
    }

    /** Whether the listener's principals are made by Kafka's own builder (its own setting, else the broker's). */
    private static boolean isDefaultBuilder(Map<String, ?> configs, String listener) {
        Object own = configs.get("listener.name." + listener.toLowerCase(Locale.ROOT) + ".principal.builder.class");
        Object builder = own != null ? own : configs.get("principal.builder.class");
        if (builder instanceof Class<?> c) {
            return c.getName().equals(DEFAULT_BUILDER);
        }
        return builder == null || text(builder).isEmpty() || text(builder).equals(DEFAULT_BUILDER);
    }

    private static List<String> csv(Object value) {
        return Arrays.stream(text(value).split(",")).map(String::strip).filter(s -> !s.isEmpty()).toList();
    }

    private static String text(Object value) {
        return value == null ? "" : String.valueOf(value).strip();
    }
}
