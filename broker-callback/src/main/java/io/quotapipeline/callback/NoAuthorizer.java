package io.quotapipeline.callback;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;

import org.apache.kafka.common.Endpoint;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.errors.SecurityDisabledException;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.server.authorizer.AclCreateResult;
import org.apache.kafka.server.authorizer.AclDeleteResult;
import org.apache.kafka.server.authorizer.Action;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.authorizer.AuthorizationResult;
import org.apache.kafka.server.authorizer.Authorizer;
import org.apache.kafka.server.authorizer.AuthorizerServerInfo;

/**
 * The delegate of a broker that had no authorizer ({@code quota.pipeline.stop.authorizer.delegate=none}): every
 * action is allowed, as without {@code authorizer.class.name}, so StopAuthorizer's refusals are the only ones; ACLs
 * cannot be created, deleted or listed, and each such call says why.
 */
class NoAuthorizer implements Authorizer {
    static final String NO_ACLS = "this broker keeps no ACLs: its authorizer is io.quotapipeline.callback.StopAuthorizer"
            + " with " + BasicStopAuthorizer.DELEGATE + "=" + BasicStopAuthorizer.NONE + " (allow everything but the writes a "
            + "stop refuses); set " + BasicStopAuthorizer.DELEGATE + "=" + BasicStopAuthorizer.DEFAULT_DELEGATE + " to use ACLs";

    @Override
    public void configure(Map<String, ?> configs) {
    }

    /** Nothing to load: every listener may accept requests at once. */
    @Override
    public Map<Endpoint, ? extends CompletionStage<Void>> start(AuthorizerServerInfo serverInfo) {
        Map<Endpoint, CompletableFuture<Void>> ready = new java.util.HashMap<>();
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
    public AuthorizationResult authorizeByResourceType(AuthorizableRequestContext requestContext, AclOperation op,
                                                       ResourceType resourceType) {
        return AuthorizationResult.ALLOWED;
    }

    @Override
    public List<? extends CompletionStage<AclCreateResult>> createAcls(AuthorizableRequestContext requestContext,
                                                                       List<AclBinding> aclBindings) {
        List<CompletableFuture<AclCreateResult>> results = new ArrayList<>();
        for (int i = 0; i < aclBindings.size(); i++) {
            results.add(CompletableFuture.completedFuture(new AclCreateResult(new SecurityDisabledException(NO_ACLS))));
        }
        return results;
    }

    @Override
    public List<? extends CompletionStage<AclDeleteResult>> deleteAcls(AuthorizableRequestContext requestContext,
                                                                       List<AclBindingFilter> aclBindingFilters) {
        List<CompletableFuture<AclDeleteResult>> results = new ArrayList<>();
        for (int i = 0; i < aclBindingFilters.size(); i++) {
            results.add(CompletableFuture.completedFuture(new AclDeleteResult(new SecurityDisabledException(NO_ACLS))));
        }
        return results;
    }

    @Override
    public Iterable<AclBinding> acls(AclBindingFilter filter) {
        throw new SecurityDisabledException(NO_ACLS);
    }

    @Override
    public void close() {
    }
}
