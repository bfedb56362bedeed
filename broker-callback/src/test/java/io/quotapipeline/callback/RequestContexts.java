package io.quotapipeline.callback;

import java.net.InetAddress;

import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import org.apache.kafka.server.authorizer.Action;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;

/** Requests and actions as Kafka hands them to an authorizer (a produce request: WRITE on each topic). */
final class RequestContexts {
    private RequestContexts() {
    }

    static AuthorizableRequestContext of(String principal, String clientId) {
        int colon = principal.indexOf(':');
        KafkaPrincipal p = new KafkaPrincipal(principal.substring(0, colon), principal.substring(colon + 1));
        return new AuthorizableRequestContext() {
            @Override
            public String listenerName() {
                return "PLAINTEXT";
            }

            @Override
            public SecurityProtocol securityProtocol() {
                return SecurityProtocol.PLAINTEXT;
            }

            @Override
            public KafkaPrincipal principal() {
                return p;
            }

            @Override
            public InetAddress clientAddress() {
                return InetAddress.getLoopbackAddress();
            }

            @Override
            public int requestType() {
                return 0;  // PRODUCE
            }

            @Override
            public int requestVersion() {
                return 11;
            }

            @Override
            public String clientId() {
                return clientId;
            }

            @Override
            public int correlationId() {
                return 1;
            }
        };
    }

    static Action write(String topic) {
        return action(AclOperation.WRITE, ResourceType.TOPIC, topic);
    }

    static Action action(AclOperation operation, ResourceType type, String name) {
        return new Action(operation, new ResourcePattern(type, name, PatternType.LITERAL), 1, true, true);
    }
}
