package io.quotapipeline.callback;

import java.util.HashMap;
import java.util.Map;

import org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A StandardAuthorizer delegate on a controller whose listener principal is no super user is named, with the fix. */
class ControllerQuorumCheckTest {

    /** A combined node as the harness and Kafka's own example configure it: PLAINTEXT controller listener. */
    private static Map<String, Object> combined() {
        Map<String, Object> configs = new HashMap<>();
        configs.put("process.roles", "broker,controller");
        configs.put("controller.listener.names", "CONTROLLER");
        configs.put("listeners", "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093");
        configs.put("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT");
        return configs;
    }

    @Test
    void aControllerWithoutSuperUsersIsToldTheQuorumWillNotFormAndWhatToSet() {
        ControllerQuorumCheck.Finding finding = ControllerQuorumCheck.check(combined());
        assertNotNull(finding);
        assertTrue(finding.certain());
        String line = finding.line();
        assertTrue(line.startsWith("stop authorizer: the KRaft quorum will not form"), line);
        assertTrue(line.contains("listener CONTROLLER (PLAINTEXT) as User:ANONYMOUS"), line);
        assertTrue(line.contains("super.users empty"), line);
        assertTrue(line.contains("set quota.pipeline.stop.authorizer.delegate=none if this cluster had no authorizer, "
                + "else add User:ANONYMOUS to super.users"), line);
        assertFalse(line.contains("\n"), line);
    }

    @Test
    void superUsersThatNameTheControllerPrincipalAreFine() {
        Map<String, Object> configs = combined();
        configs.put("super.users", "User:admin; User:ANONYMOUS");
        assertNull(ControllerQuorumCheck.check(configs));
        configs.put("principal.builder.class", DefaultKafkaPrincipalBuilder.class);  // as Kafka parses it
        assertNull(ControllerQuorumCheck.check(configs));
    }

    @Test
    void superUsersWithoutTheControllerPrincipalAreNamedInTheLine() {
        Map<String, Object> configs = combined();
        configs.put("super.users", "User:admin");
        ControllerQuorumCheck.Finding finding = ControllerQuorumCheck.check(configs);
        assertTrue(finding.certain());
        assertTrue(finding.line().contains("super.users is User:admin; set "), finding.line());
    }

    @Test
    void aBrokerOnlyNodeHasNoQuorumToKeepFromForming() {
        Map<String, Object> configs = combined();
        configs.put("process.roles", "broker");
        assertNull(ControllerQuorumCheck.check(configs));
        configs.remove("process.roles");  // ZooKeeper-era brokers have none
        assertNull(ControllerQuorumCheck.check(configs));
    }

    @Test
    void withoutAProtocolMapAControllerListenerIsPlaintextAsKafkaDefaultsIt() {
        Map<String, Object> configs = combined();
        configs.remove("listener.security.protocol.map");
        ControllerQuorumCheck.Finding finding = ControllerQuorumCheck.check(configs);
        assertTrue(finding.certain());
        assertTrue(finding.line().contains("(PLAINTEXT) as User:ANONYMOUS"), finding.line());
    }

    @Test
    void anSslOrSaslControllerListenerIsSaidToBeUnknownNotGuessed() {
        Map<String, Object> configs = combined();
        configs.put("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL");
        configs.put("super.users", "User:controller");
        ControllerQuorumCheck.Finding finding = ControllerQuorumCheck.check(configs);
        assertFalse(finding.certain(), "the SASL user may be User:controller");
        String line = finding.line();
        assertTrue(line.startsWith("stop authorizer: cannot tell whether the KRaft quorum will form"), line);
        assertTrue(line.contains("CONTROLLER (SASL_SSL) is the SASL login's user, not known from the configuration"),
                line);
        assertTrue(line.contains("unless super.users (User:controller) names it"), line);
        assertFalse(line.contains("ANONYMOUS"), line);

        configs.put("listener.security.protocol.map", "CONTROLLER:SSL");
        assertTrue(ControllerQuorumCheck.check(configs).line().contains("the peer certificate's"));
    }

    @Test
    void aControllerListenerMissingFromTheProtocolMapIsSaidToBeUnknown() {
        Map<String, Object> configs = combined();
        configs.put("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT");
        configs.put("super.users", "User:ANONYMOUS");
        ControllerQuorumCheck.Finding finding = ControllerQuorumCheck.check(configs);
        assertFalse(finding.certain());
        assertTrue(finding.line().contains("controller listener CONTROLLER is not known (its protocol is not in "
                + "listener.security.protocol.map)"), finding.line());
    }

    @Test
    void withNoSuperUserAtAllTheQuorumCannotFormWhateverThePrincipal() {
        Map<String, Object> configs = combined();
        configs.put("listener.security.protocol.map", "CONTROLLER:SASL_PLAINTEXT");
        ControllerQuorumCheck.Finding finding = ControllerQuorumCheck.check(configs);
        assertTrue(finding.certain());
        assertTrue(finding.line().contains("super.users empty; set "), finding.line());
        assertTrue(finding.line().contains("else add the controllers' principal to super.users"), finding.line());
    }

    @Test
    void aCustomPrincipalBuilderMakesThePlaintextPrincipalUnknown() {
        Map<String, Object> configs = combined();
        configs.put("super.users", "User:ANONYMOUS");
        configs.put("listener.name.controller.principal.builder.class", "com.example.Builder");
        ControllerQuorumCheck.Finding finding = ControllerQuorumCheck.check(configs);
        assertFalse(finding.certain());
        assertTrue(finding.line().contains("made by principal.builder.class"), finding.line());
    }

    @Test
    void configuredTextIsEscapedInTheLine() {
        Map<String, Object> configs = combined();
        configs.put("controller.listener.names", "CTL\u001b[2J");
        configs.put("listener.security.protocol.map", "CTL\u001b[2J:PLAINTEXT");
        configs.put("super.users", "User:a\u2028b");
        String line = ControllerQuorumCheck.check(configs).line();
        assertTrue(line.contains("listener CTL\\x1b[2J (PLAINTEXT)"), line);
        assertTrue(line.contains("super.users is User:a\\u2028b;"), line);
        assertEquals(-1, line.indexOf('\u001b'));
    }
}
