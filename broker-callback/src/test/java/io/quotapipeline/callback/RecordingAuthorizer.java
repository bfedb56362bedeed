package io.quotapipeline.callback;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;

import org.apache.kafka.common.Endpoint;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.metadata.authorizer.AclMutator;
import org.apache.kafka.metadata.authorizer.ClusterMetadataAuthorizer;
import org.apache.kafka.metadata.authorizer.StandardAcl;
import org.apache.kafka.server.authorizer.AclCreateResult;
import org.apache.kafka.server.authorizer.AclDeleteResult;
import org.apache.kafka.server.authorizer.Action;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.authorizer.AuthorizationResult;
import org.apache.kafka.server.authorizer.AuthorizerServerInfo;

/**
 * A delegate that records every call: actions on a topic named "denied-*" are DENIED, every other one ALLOWED, so a
 * test sees which answer came from where.
 */
class RecordingAuthorizer implements ClusterMetadataAuthorizer {
    final List<List<Action>> asked = new ArrayList<>();
    final List<String> calls = new ArrayList<>();
    Map<String, ?> configs;
    AclMutator mutator;

    @Override
    public void configure(Map<String, ?> configs) {
        this.configs = configs;
        calls.add("configure");
    }

    @Override
    public List<AuthorizationResult> authorize(AuthorizableRequestContext requestContext, List<Action> actions) {
        asked.add(actions);
        List<AuthorizationResult> results = new ArrayList<>();
        for (Action action : actions) {
            results.add(action.resourcePattern().name().startsWith("denied-") ? AuthorizationResult.DENIED
                    : AuthorizationResult.ALLOWED);
        }
        return results;
    }

    @Override
    public Map<Endpoint, ? extends CompletionStage<Void>> start(AuthorizerServerInfo serverInfo) {
        calls.add("start");
        return Map.of();
    }

    @Override
    public AuthorizationResult authorizeByResourceType(AuthorizableRequestContext requestContext, AclOperation op,
                                                       ResourceType resourceType) {
        calls.add("authorizeByResourceType " + op + " " + resourceType);
        return AuthorizationResult.ALLOWED;
    }

    @Override
    public void setAclMutator(AclMutator aclMutator) {
        calls.add("setAclMutator");
        mutator = aclMutator;
    }

    @Override
    public AclMutator aclMutatorOrException() {
        calls.add("aclMutatorOrException");
        return mutator;
    }

    @Override
    public void completeInitialLoad() {
        calls.add("completeInitialLoad");
    }

    @Override
    public void completeInitialLoad(Exception e) {
        calls.add("completeInitialLoad " + e.getMessage());
    }

    @Override
    public void loadSnapshot(Map<Uuid, StandardAcl> acls) {
        calls.add("loadSnapshot " + acls.size());
    }

    @Override
    public void addAcl(Uuid id, StandardAcl acl) {
        calls.add("addAcl " + id);
    }

    @Override
    public void removeAcl(Uuid id) {
        calls.add("removeAcl " + id);
    }

    @Override
    public List<? extends CompletionStage<AclCreateResult>> createAcls(AuthorizableRequestContext requestContext,
                                                                       List<AclBinding> aclBindings) {
        calls.add("createAcls " + aclBindings.size());
        return Collections.nCopies(aclBindings.size(), CompletableFuture.completedFuture(AclCreateResult.SUCCESS));
    }

    @Override
    public List<? extends CompletionStage<AclDeleteResult>> deleteAcls(AuthorizableRequestContext requestContext,
                                                                       List<AclBindingFilter> filters) {
        calls.add("deleteAcls " + filters.size());
        return Collections.nCopies(filters.size(), CompletableFuture.completedFuture(new AclDeleteResult(List.of())));
    }

    @Override
    public Iterable<AclBinding> acls(AclBindingFilter filter) {
        calls.add("acls");
        return List.of();
    }

    @Override
    public int aclCount() {
        calls.add("aclCount");
        return 7;
    }

    @Override
    public void close() {
        calls.add("close");
    }
}
