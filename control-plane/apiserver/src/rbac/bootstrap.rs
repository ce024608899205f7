//! The default roles and bindings every cluster starts with, named and shaped as upstream's so
//! that clients and charts that expect them find them: `cluster-admin`, the aggregated
//! `admin` / `edit` / `view`, and the `system:` basics (discovery, public info, self reviews,
//! service-account issuer discovery, `system:auth-delegator` for aggregated API servers).

use serde_json::{json, Value};

use crate::error::{ApiError, Result};
use crate::registry::{Registry, WriteOptions};

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn urls(urls: &[&str], verbs: &[&str]) -> Value {
    json!({"nonResourceURLs": urls, "verbs": verbs})
}

/// Resources a `view` user may read (secrets excluded, as upstream).
fn viewable() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "pods/log",
                "pods/status",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "replicationcontrollers/status",
                "serviceaccounts",
                "services",
                "services/status",
                "bindings",
                "events",
                "limitranges",
                "resourcequotas",
                "resourcequotas/status",
                "namespaces",
                "namespaces/status",
            ],
            READ,
        ),
        rule(
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            READ,
        ),
        rule(
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
            READ,
        ),
        rule(
            &["batch"],
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
            READ,
        ),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
            READ,
        ),
        rule(
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
            READ,
        ),
        rule(&["discovery.k8s.io"], &["endpointslices"], READ),
        rule(&["events.k8s.io"], &["events"], READ),
    ]
}

/// What `edit` adds: writes of workloads and their configuration, secrets, exec and friends.
fn editable() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "pods/eviction",
                "configmaps",
                "endpoints",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            WRITE,
        ),
        rule(&[""], &["secrets"], READ),
        rule(&[""], &["serviceaccounts/token"], &["create"]),
        rule(&[""], &["serviceaccounts"], &["impersonate"]),
        rule(
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
            WRITE,
        ),
        rule(&["autoscaling"], &["horizontalpodautoscalers"], WRITE),
        rule(&["batch"], &["cronjobs", "jobs"], WRITE),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "networkpolicies"],
            WRITE,
        ),
        rule(&["policy"], &["poddisruptionbudgets"], WRITE),
        rule(&["discovery.k8s.io"], &["endpointslices"], WRITE),
    ]
}

/// What `admin` adds: roles and bindings inside the namespace, local access reviews.
fn administrable() -> Vec<Value> {
    let all: Vec<&str> = READ.iter().chain(WRITE.iter()).copied().collect();
    vec![
        rule(
            &["rbac.authorization.k8s.io"],
            &["rolebindings", "roles"],
            &all,
        ),
        rule(
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews"],
            &["create"],
        ),
    ]
}

fn labels(pairs: &[&str]) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("kubernetes.io/bootstrapping".into(), json!("rbac-defaults"));
    for p in pairs {
        m.insert(format!("rbac.authorization.k8s.io/{p}"), json!("true"));
    }
    Value::Object(m)
}

fn cluster_role(name: &str, label_pairs: &[&str], rules: Vec<Value>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": name,
            "labels": labels(label_pairs),
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        },
        "rules": rules,
    })
}

fn aggregated(name: &str, label_pairs: &[&str], select: &str) -> Value {
    let mut role = cluster_role(name, label_pairs, Vec::new());
    role["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {
        format!("rbac.authorization.k8s.io/{select}"): "true"
    }}]});
    role
}

fn binding(name: &str, role: &str, groups: &[&str]) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": name,
            "labels": labels(&[]),
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": groups.iter().map(|g| json!({
            "apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g
        })).collect::<Vec<_>>(),
    })
}

/// The default ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    vec![
        cluster_role(
            "cluster-admin",
            &[],
            vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
        ),
        aggregated("admin", &[], "aggregate-to-admin"),
        aggregated("edit", &["aggregate-to-admin"], "aggregate-to-edit"),
        aggregated(
            "view",
            &["aggregate-to-admin", "aggregate-to-edit"],
            "aggregate-to-view",
        ),
        cluster_role(
            "system:aggregate-to-admin",
            &["aggregate-to-admin"],
            administrable(),
        ),
        cluster_role(
            "system:aggregate-to-edit",
            &["aggregate-to-admin", "aggregate-to-edit"],
            editable(),
        ),
        cluster_role(
            "system:aggregate-to-view",
            &[
                "aggregate-to-admin",
                "aggregate-to-edit",
                "aggregate-to-view",
            ],
            viewable(),
        ),
        cluster_role(
            "system:basic-user",
            &[],
            vec![
                rule(
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                    &["create"],
                ),
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
            ],
        ),
        cluster_role(
            "system:discovery",
            &[],
            vec![urls(
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/readyz",
                    "/openapi",
                    "/openapi/*",
                    "/version",
                    "/version/",
                ],
                &["get"],
            )],
        ),
        cluster_role(
            "system:public-info-viewer",
            &[],
            vec![urls(
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
                &["get"],
            )],
        ),
        cluster_role(
            "system:auth-delegator",
            &[],
            vec![
                rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
                rule(
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                    &["create"],
                ),
            ],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            &[],
            vec![urls(
                &["/.well-known/openid-configuration", "/openid/v1/jwks"],
                &["get"],
            )],
        ),
    ]
}

/// The default ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding("cluster-admin", "cluster-admin", &["system:masters"]),
        binding(
            "system:basic-user",
            "system:basic-user",
            &["system:authenticated"],
        ),
        binding(
            "system:discovery",
            "system:discovery",
            &["system:authenticated"],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
        binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            &["system:serviceaccounts"],
        ),
    ]
}

/// Creates the default roles and bindings that are missing.
pub async fn ensure(registry: &Registry) -> Result<()> {
    let (Some(roles), Some(bindings)) = (
        registry.resource("rbac.authorization.k8s.io", "v1", "clusterroles"),
        registry.resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings"),
    ) else {
        return Ok(());
    };
    let mut objects: Vec<(&_, Value)> = cluster_roles().into_iter().map(|r| (&roles, r)).collect();
    objects.extend(cluster_role_bindings().into_iter().map(|b| (&bindings, b)));
    for (def, obj) in objects {
        match registry
            .create(def, None, obj, &WriteOptions::default())
            .await
        {
            Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
