package com.example;

import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;

import org.apache.kafka.common.Endpoint;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.server.authorizer.AclCreateResult;
import org.apache.kafka.server.authorizer.AclDeleteResult;
import org.apache.kafka.server.authorizer.Action;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.authorizer.AuthorizationResult;
import org.apache.kafka.server.authorizer.Authorizer;
import org.apache.kafka.server.authorizer.AuthorizerServerInfo;

/**
 * An authorizer of one's own, as an operator's cluster may have had one (docs/broker-side.md, "Another authorizer
 * before"): a plain Authorizer, not a ClusterMetadataAuthorizer, that allows every action and keeps no ACLs.
 */
public class AuditAuthorizer implements Authorizer {
    @Override
    public void configure(Map<String, ?> configs) {
    }

    @Override
    public Map<Endpoint, ? extends CompletionStage<Void>> start(AuthorizerServerInfo serverInfo) {
        Map<Endpoint, CompletableFuture<Void>> ready = new HashMap<>();
        for (Endpoint endpoint : serverInfo.endpoints()) {
            ready.put(endpoint, CompletableFuture.completedFuture(null));
        }
        return ready;
    }

    @Override
    public List<AuthorizationResult> authorize(AuthorizableRequestContext requestContext, List<Action> actions) {
        return Collections.nCopies(actions.size(), AuthorizationResult.ALLOWED);
    }

    @Override
    public List<? extends CompletionStage<AclCreateResult>> createAcls(AuthorizableRequestContext requestContext,
                                                                       List<AclBinding> aclBindings) {
        throw new UnsupportedOperationException("AuditAuthorizer keeps no ACLs");
    }

    @Override
    public List<? extends CompletionStage<AclDeleteResult>> deleteAcls(AuthorizableRequestContext requestContext,
                                                                       List<AclBindingFilter> aclBindingFilters) {
        throw new UnsupportedOperationException("AuditAuthorizer keeps no ACLs");
    }

    @Override
    public Iterable<AclBinding> acls(AclBindingFilter filter) {
        return List.of();
    }

    @Override
    public void close() {
    }
}
